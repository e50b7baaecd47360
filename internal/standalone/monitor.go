package standalone

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/pod"
)

// launch makes the VM's pod and starts its monitor (pod.Spec.Launch): the
// pod directories filled (fill), the pod network with the run's services
// on it (networked), the hand-over to the VM's user, virtiofsd and the
// VM's devices, then virt-launcher-monitor as the VM's user in the pod's
// namespaces: network, and a mount namespace with the VM's passwd
// (OwnPasswd).
func (r *runner) launch(ctx context.Context) error {
	spec := r.podSpec(ctx)
	// With --cpuset the pod runs in a cpuset cgroup of its own, where its
	// launcher finds its CPUs as under a CPU manager.
	if len(r.cfg.CPUSet) > 0 {
		cg, err := hostcpu.NewCgroup("vlctl-", r.cfg.CPUSet)
		if err != nil {
			return fmt.Errorf("--cpuset: %w", err)
		}
		r.pod.cgroup, spec.Cgroup = cg, cg
	}
	p, err := spec.Launch(ctx)
	// The child has its own copies; root keeps none.
	r.pod.closeStaged()
	if err != nil {
		return err
	}
	if p.Unplaced != nil {
		r.log.Warn("the thread that started the monitor stays in its cpuset cgroup", "error", p.Unplaced)
	}
	r.pod.monitor = p.Process
	r.log.Info("monitor started", "pid", p.Process.Cmd.Process.Pid, "workdir", r.workDir, "log", r.dir.Join("launcher.log"))
	return nil
}

// podSpec is the VM's pod, once the work dir is made and the launcher
// staged (stageLauncher).
func (r *runner) podSpec(ctx context.Context) pod.Spec {
	o := launcherflags.ForVMI(r.vmi)
	o.QemuTimeout = r.cfg.QemuTimeout
	o.QemuCapsCache = r.caps
	spec := pod.Spec{
		Dir: r.dir, Layout: r.layout, User: r.owner.Credential(),
		Monitor: r.pod.bins[0], Launcher: r.pod.bins[1], Flags: o, Emulate: r.emulation(),
		// The network is made while root alone can write the work dir:
		// the vif caches in private/ go to the VM's user with the rest
		// of its directories; the restore state, which root acts on at
		// the end, stays in the work dir, root's.
		Network: &pod.NetworkConfig{Dir: r.workDir, Name: r.pod.netName, VMI: r.vmi,
			Privileged: netsetup.PrivilegedConfig{QemuUID: r.owner.UID, QemuGID: r.owner.GID,
				CacheDir: r.layout.PrivateDir, StateDir: r.workDir},
			Log: r.log},
		Fill:      r.fill,
		Networked: r.networked,
		HandedOver: func() error {
			if err := r.virtiofs.start(ctx, r.layout, r.owner.User, r.pod.logFile, r.withLauncherLog); err != nil {
				return err
			}
			return r.pod.grantVFIO(r.cfg.vfioGroups, r.owner.UID)
		},
		// The VM's uid has no account on the machine, yet libvirt
		// looks up every client's user.
		OwnPasswd: true,
		Env:       r.cfg.deviceEnv,
		// launcher.log takes the monitor's, the launcher's and QEMU's
		// output.
		Stdout: r.pod.logFile, Stderr: r.pod.logFile,
	}
	// A migration's target sees its pod where the source's launcher
	// sees its own (migrate.go).
	if root := r.launcherRoot(); root != r.workDir {
		spec.FixedRoot = root
	}
	return spec
}

// networked puts the guest's network services on the pod network (n nil:
// the VMI has none): the DNS relay, the published ports (a migration's
// target publishes once the guest is here: guestSource.publishesAtLaunch)
// and the guest's egress.
func (r *runner) networked(n *pod.Network) error {
	r.pod.net = n
	if n != nil {
		r.progress("pod network up (namespaces %s and %s)", n.NSName, n.OutsideName)
	}
	r.guestNet = guestnet.NewServices(guestnet.ServicesConfig{Ports: r.cfg.ports, Publish: r.cfg.Publish,
		DNS: r.cfg.DNS, NoEgress: r.cfg.NoEgress, IDs: guestnet.IDs{UID: r.owner.UID, GID: r.owner.GID}, Name: r.owner.Name,
		Status: r.cfg.Status, Progress: r.progress})
	return r.guestNet.Start(n, r.cfg.guest.publishesAtLaunch())
}

func (r *runner) waitMonitor(timeout time.Duration) error {
	select {
	case <-r.pod.monitor.Done():
	case <-time.After(timeout):
		r.pod.monitor.Cmd.Process.Signal(syscall.SIGTERM)
		<-r.pod.monitor.Done()
		return r.withLauncherLog(fmt.Errorf("launcher did not exit within %s of the domain's deletion", timeout))
	}
	if r.pod.monitor.Err() != nil {
		return r.withLauncherLog(fmt.Errorf("launcher: %w", r.pod.monitor.Err()))
	}
	return nil
}

// killTree kills the monitor and every process below it, those first: once
// the monitor is gone, its orphans are no longer below it.
func killTree(pid int) {
	pod.EndProcesses(context.Background(), pod.Below(pid), pod.EndOptions{})
	syscall.Kill(pid, syscall.SIGKILL)
}
