package standalone

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// virtiofsBinary is the wrapper KubeVirt's virtiofs containers run
// (/usr/libexec/virtiofsd in the launcher image, cmd/virtiofsd), found in
// --bin-dir beside the launcher's binaries.
const virtiofsBinary = "virtiofsd"

// virtiofsStartWait bounds the wait for a daemon's socket.
const virtiofsStartWait = 10 * time.Second

// virtiofsShare is one virtiofs filesystem and the directory its daemon
// serves.
type virtiofsShare struct {
	name string
	dir  func(layout.Layout) string
}

// virtiofsShares are the VMI's virtiofs filesystems with the directories
// vlctl serves them from: a configMap's or Secret's, which vlctl writes
// from the documents as the kubelet would mount them. Other sources are
// refused naming the filesystem.
func virtiofsShares(v *v1.VirtualMachineInstance) ([]virtiofsShare, error) {
	vols := map[string]*v1.Volume{}
	for i := range v.Spec.Volumes {
		vols[v.Spec.Volumes[i].Name] = &v.Spec.Volumes[i]
	}
	var out []virtiofsShare
	for i, f := range v.Spec.Domain.Devices.Filesystems {
		if f.Virtiofs == nil {
			continue
		}
		field := fmt.Sprintf("spec.domain.devices.filesystems[%d]", i)
		name := f.Name
		if err := layout.CheckName(name); err != nil {
			return nil, fmt.Errorf("%s.name: %w", field, err)
		}
		vol := vols[name]
		switch {
		case vol == nil:
			return nil, fmt.Errorf("%s.name: %q has no volume", field, name)
		case vol.ConfigMap != nil:
			out = append(out, virtiofsShare{name, func(l layout.Layout) string { return l.ConfigMapSource(name) }})
		case vol.Secret != nil:
			out = append(out, virtiofsShare{name, func(l layout.Layout) string { return l.SecretSource(name) }})
		default:
			return nil, fmt.Errorf("%s: volume %q: vlctl run shares configMap and secret volumes by virtiofs, not this kind", field, name)
		}
	}
	return out, nil
}

// virtiofsd is one running daemon.
type virtiofsd struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once it has ended
}

// virtiofsArgs is the command line KubeVirt v1.9.0's virt-controller gives
// a virtiofs container (services/virtiofs.go), for the socket and shared
// directory of this run.
func virtiofsArgs(socket, shared string) []string {
	return []string{"--socket-path=" + socket, "--shared-dir=" + shared, "--sandbox=none", "--cache=auto",
		"--migration-on-error=guest-error", "--migration-mode=find-paths"}
}

// virtiofsContainers play the pod's virtiofs containers for one boot: the
// VMI's shares, the wrapper staged for them (stage) and the daemons
// started (start), one per share, ended by stop.
type virtiofsContainers struct {
	shares  []virtiofsShare
	bin     string
	daemons []*virtiofsd
}

// stage finds the wrapper for the shares, copied into the work dir when
// the VM's user cannot reach the build's (stageBinary), and makes the
// sockets' directory, the pod's virtiofs-containers emptyDir, handed over
// with the rest of the share dir (mkdir, through the work dir).
func (v *virtiofsContainers) stage(l layout.Layout, stageBinary func(name, what string) (string, error), mkdir func(path string) error) error {
	if len(v.shares) == 0 {
		return nil
	}
	b, err := stageBinary(virtiofsBinary, "virtiofsd wrapper for the VMI's filesystems (build it with `make build`)")
	if err != nil {
		return err
	}
	v.bin = b
	return mkdir(l.VirtiofsDir())
}

// start runs one daemon per share, as the VM's user (owner) without
// supplementary groups, from the staged wrapper, its socket where the
// launcher's domain expects it, its output to out. It returns once every
// socket is there; a daemon that does not get there fails it, with
// withLog's context. The daemons end by themselves when QEMU lets go of
// them; stop ends what is left.
func (v *virtiofsContainers) start(ctx context.Context, l layout.Layout, owner vmuser.User, out *os.File, withLog func(error) error) error {
	for _, s := range v.shares {
		sock := l.VirtiofsSocket(s.name)
		cmd := exec.Command(v.bin, virtiofsArgs(sock, s.dir(l))...)
		cmd.Env = []string{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: uint32(owner.UID), Gid: uint32(owner.GID), Groups: []uint32{}},
			Setpgid:    true,
			Pdeathsig:  syscall.SIGTERM,
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("virtiofsd for filesystem %s: %w", s.name, err)
		}
		d := &virtiofsd{name: s.name, cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(d.done) }()
		v.daemons = append(v.daemons, d)
		if err := waitSocket(ctx, sock, d.done); err != nil {
			return withLog(fmt.Errorf("virtiofsd for filesystem %s: %w", s.name, err))
		}
	}
	return nil
}

// waitSocket waits until path is a socket, failing when the daemon ends
// first.
func waitSocket(ctx context.Context, path string, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, virtiofsStartWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
			return nil
		}
		select {
		case <-done:
			return errors.New("ended before its socket was there")
		case <-ctx.Done():
			return fmt.Errorf("no socket at %s after %s", path, virtiofsStartWait)
		case <-tick.C:
		}
	}
}

// stop ends the daemons still running (SIGTERM to each one's process
// group, SIGKILL after the grace) and waits for them.
func (v *virtiofsContainers) stop() {
	for _, d := range v.daemons {
		select {
		case <-d.done:
			continue
		default:
		}
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(vmEndWait):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
}
