package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// IdentityDir is where, below a Spec's Dir, OwnPasswd's files are.
const IdentityDir = "identity"

// Spec is a launcher pod: who runs it, where its directories are, what
// root puts into them, its network and its monitor's command line. vlctl
// run, the test harness and the bench each describe their pods with one
// and start them with Launch (or Prepare and Start), so that all three
// make the same pod the same way.
type Spec struct {
	// Dir is the pod's own directory, open (the caller's to close): made
	// by root, root's, and standing in for the volumes a cluster mounts.
	Dir *safefs.Dir
	// Layout names the pod directories as root sees them: below Dir.
	Layout layout.Layout
	// ImageVolume lays the pod out for KubeVirt's ImageVolume feature
	// gate (layout.PodDirs).
	ImageVolume bool
	// User is who the pod's processes run as; never root on a plain
	// machine. Its Uid and Gid get the pod directories.
	User *syscall.Credential
	// FixedRoot, when set, is where the launcher sees Dir: the monitor
	// runs in a mount namespace of its own with Dir bound there (BindAt)
	// and its flags name paths below it. Two pods with the same FixedRoot
	// see their own files at the same paths, as pods on two nodes do: a
	// live migration between them needs that, since the source domain's
	// XML names its files by path.
	FixedRoot string
	// Monitor and Launcher are the virt-launcher-monitor and virt-launcher
	// binaries.
	Monitor, Launcher string
	// Flags are the launcher's flags of this VMI (name, namespace, uid,
	// timeouts, caches); Command sets the pod's own on them.
	Flags launcherflags.Options
	// Emulate runs the guest under TCG even where KVM works.
	Emulate bool
	// Network, when set, is the pod network to make (NewNetwork).
	Network *NetworkConfig
	// Fill puts into the pod directories, while they are still root's,
	// what virt-handler's mounts provide (images, links, configuration
	// volumes).
	Fill func() error
	// Networked runs once the network step is done, before the
	// hand-over, with the network made (nil without Network, or when the
	// VMI needs none): the caller's services on the network.
	Networked func(*Network) error
	// HandedOver runs after the hand-over, before the monitor starts.
	HandedOver func() error
	// OwnPasswd gives User a passwd and group entry of its own (Identity)
	// for a user the host has no account for: Prepare writes them below
	// Dir (IdentityDir), Start binds them over /etc/passwd and /etc/group
	// for the monitor, and User.Groups list the user as a member.
	OwnPasswd bool
	// Enter are more steps for the thread that starts the monitor, run
	// after it entered the pod's network, FixedRoot and OwnPasswd's
	// mount namespace (Start).
	Enter []func() error
	// Cgroup, when set, is the cpuset cgroup the pod runs in.
	Cgroup *hostcpu.Cgroup
	// Env are more variables for the monitor and its launcher, Extra more
	// flags after the launcher's.
	Env, Extra []string
	// Stdout and Stderr take the monitor's output.
	Stdout, Stderr io.Writer
}

// LauncherLayout is the pod's layout as its launcher sees it: Layout, or
// the same below FixedRoot.
func (s *Spec) LauncherLayout() layout.Layout {
	if s.FixedRoot != "" {
		return layout.Under(s.FixedRoot)
	}
	return s.Layout
}

// LauncherFlags are Flags with the pod's own set: its directories as the
// launcher sees them, an unprivileged launcher that may emulate, and the
// pod network's resolv.conf (n nil: none).
func (s *Spec) LauncherFlags(n *Network) launcherflags.Options {
	o := s.Flags
	o.SetLayout(s.LauncherLayout())
	o.RunAsNonroot, o.AllowEmulation, o.ForceEmulation = true, true, s.Emulate
	if n != nil {
		o.ResolvConf = n.ResolvConf
	}
	return o
}

// Command is the monitor's exec.Cmd for the pod with network n (nil:
// none), to be started from the pod's namespaces (Start). It has no side
// effect.
func (s *Spec) Command(n *Network) *exec.Cmd {
	dir := ""
	if s.Dir != nil {
		dir = s.Dir.Path()
	}
	return Monitor{
		Bin: s.Monitor, Launcher: s.Launcher,
		Flags: s.LauncherFlags(n), Extra: s.Extra,
		User: s.User, Network: n != nil, Env: s.Env,
		Dir: dir, Stdout: s.Stdout, Stderr: s.Stderr,
	}.Command()
}

// Pod is a launcher pod made from a Spec: prepared (its directories
// filled and handed over, its network made), then started.
type Pod struct {
	// Spec is what the pod was made from. FixedRoot, Enter and Cgroup
	// may still change before Start.
	Spec    Spec
	Network *Network // nil: none
	// Cmd is what Start starts; nil renders Spec.Command. The caller may
	// set or change it before Start.
	Cmd     *exec.Cmd
	Process *Process // once started
	// Unplaced is why the thread that started the monitor stays in the
	// pod's cgroup (hostcpu.Cgroup.Place's done), if it does.
	Unplaced error
	dirs     *Dirs
	// identity is OwnPasswd's passwd and group, open until the monitor
	// has started with them or the pod is undone.
	identity *Identity
}

// Launch makes the pod and starts it: Prepare, then Start. On error
// nothing it made is left.
func (s Spec) Launch(ctx context.Context) (*Pod, error) {
	p, err := s.Prepare(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, errors.Join(err, p.Undo())
	}
	return p, nil
}

// Prepare makes the pod directories, writes OwnPasswd's files, fills the
// directories (Fill), makes the network
// and runs Networked, hands the directories to the pod's user and runs
// HandedOver. On error nothing it made is left: the network is removed
// and the pod directories with all in them.
func (s Spec) Prepare(ctx context.Context) (*Pod, error) {
	if s.Dir == nil || s.User == nil {
		return nil, errors.New("pod: a spec needs its directory and its user")
	}
	dirs, err := MakeDirs(s.Dir, s.Layout, s.ImageVolume)
	if err != nil {
		return nil, err
	}
	p := &Pod{Spec: s, dirs: dirs}
	fail := func(err error) (*Pod, error) { return nil, errors.Join(err, p.Undo()) }
	if s.OwnPasswd {
		if p.identity, err = WriteIdentity(s.Dir, IdentityDir, int(s.User.Uid), int(s.User.Gid), s.User.Groups); err != nil {
			return fail(fmt.Errorf("the pod user's passwd and group: %w", err))
		}
	}
	if s.Fill != nil {
		if err := s.Fill(); err != nil {
			return fail(err)
		}
	}
	if s.Network != nil {
		if p.Network, err = NewNetwork(ctx, *s.Network); err != nil {
			return fail(err)
		}
	}
	if s.Networked != nil {
		if err := s.Networked(p.Network); err != nil {
			return fail(err)
		}
	}
	if err := dirs.HandOver(int(s.User.Uid), int(s.User.Gid)); err != nil {
		return fail(err)
	}
	if s.HandedOver != nil {
		if err := s.HandedOver(); err != nil {
			return fail(err)
		}
	}
	return p, nil
}

// Start starts Cmd (Spec.Command when nil) from a thread in the pod's
// namespaces: its network, FixedRoot bound, OwnPasswd's files bound, the
// Enter steps, its cgroup. It undoes nothing: Undo does.
func (p *Pod) Start() error {
	if p.Process != nil {
		return errors.New("pod: started already")
	}
	s := &p.Spec
	if p.Cmd == nil {
		p.Cmd = s.Command(p.Network)
	}
	enter := make([]func() error, 0, len(s.Enter)+4)
	if p.Network != nil {
		enter = append(enter, NetNS(p.Network.NS))
	}
	if s.FixedRoot != "" {
		enter = append(enter, BindAt(s.Dir.Path(), s.FixedRoot))
	}
	if p.identity != nil {
		enter = append(enter, p.identity.Enter)
	}
	enter = append(enter, s.Enter...)
	placed := func() error { return nil }
	if s.Cgroup != nil {
		inCgroup, done, err := s.Cgroup.Place(p.Cmd)
		if err != nil {
			return fmt.Errorf("pod cgroup: %w", err)
		}
		enter, placed = append(enter, inCgroup), done
	}
	proc, err := Start(p.Cmd, enter...)
	if perr := placed(); perr != nil && err == nil {
		p.Unplaced = perr
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Cmd.Path, err)
	}
	p.Process = proc
	// The monitor's mount namespace holds the files now; root keeps no
	// copy open.
	p.identity.Close()
	p.identity = nil
	return nil
}

// Undo removes what Prepare made, for a pod whose processes are gone or
// never started: the network, then the pod directories and all in them,
// and OwnPasswd's files (the pod's directory itself stays, root's and 0700
// again).
func (p *Pod) Undo() error {
	var errs []error
	if p.Network != nil {
		errs = append(errs, p.Network.Close())
	}
	if p.dirs != nil {
		errs = append(errs, p.dirs.Remove())
	}
	if p.Spec.OwnPasswd {
		p.identity.Close()
		p.identity = nil
		errs = append(errs, removeIdentity(p.Spec.Dir))
	}
	return errors.Join(errs...)
}
