package standalone

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// vmPod is the VM's pod as one boot makes it, the part a container runtime
// and the kubelet play in a cluster: what its monitor starts with (staged
// before the hand-over: stageLauncher), its network, cpuset cgroup and
// device grants (launch), and the monitor once started. stopMonitor ends
// the monitor; teardown undoes the rest once nothing of the VM runs.
type vmPod struct {
	// netName names the pod network's namespaces (podnet.NewName), chosen
	// before they exist so that the record names them for vlctl gc.
	netName string
	// bins are the monitor and launcher binaries to run, logFile their
	// output, both staged before the hand-over.
	bins    [2]string
	logFile *os.File
	net     *pod.Network
	cgroup  *hostcpu.Cgroup      // the pod's cpuset cgroup (--cpuset), once made
	vfio    []*userstorage.Grant // the VM's access to its IOMMU groups (--device)
	monitor *pod.Process         // nil until started
}

// closeStaged lets go of root's copies of what the monitor starts with,
// once the monitor has its own or never will.
func (p *vmPod) closeStaged() {
	if p.logFile == nil {
		return
	}
	p.logFile.Close()
	p.logFile = nil
}

// grantVFIO lets the VM's user (uid) open its IOMMU groups' nodes (groups)
// and lock its guest's memory, as VFIO needs (a device plugin's pod gets
// the nodes, and the memory lock limit is the kubelet's to raise; here the
// VM's uid would have neither): vlctl's own limit is raised, which the
// monitor, its launcher, libvirt and QEMU inherit.
func (p *vmPod) grantVFIO(groups []string, uid int) error {
	if len(groups) == 0 {
		return nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}); err != nil {
		return fmt.Errorf("--device: raise the locked memory limit for VFIO: %w", err)
	}
	for _, node := range groups {
		g, err := vfioGrant(node, uint32(uid))
		if err != nil {
			return fmt.Errorf("--device: %w", err)
		}
		if g != nil {
			p.vfio = append(p.vfio, g)
		}
	}
	return nil
}

// stopMonitor ends the monitor when it still runs: SIGTERM, then, once
// force is closed (a second Ctrl-C) or after a minute, SIGKILL to it and
// everything below it.
func (p *vmPod) stopMonitor(force <-chan struct{}) {
	if p.monitor == nil {
		return
	}
	select {
	case <-p.monitor.Done():
	default:
		p.monitor.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.monitor.Done():
		case <-force:
			killTree(p.monitor.Cmd.Process.Pid)
			<-p.monitor.Done()
		case <-time.After(60 * time.Second):
			killTree(p.monitor.Cmd.Process.Pid)
			<-p.monitor.Done()
		}
	}
}

// teardown undoes what the pod holds of the host, after stopMonitor: the
// device grants and the cgroup once nothing of the VM runs any more
// (podGone), the network, and root's staged files when the monitor never
// started.
func (p *vmPod) teardown(podGone bool) []error {
	var errs []error
	if podGone {
		for _, g := range p.vfio {
			if _, err := g.Undo(); err != nil {
				errs = append(errs, fmt.Errorf("take back the VM's access to %s: %w", g.File().Name(), err))
			}
			g.File().Close()
		}
		p.vfio = nil
	}
	if p.cgroup != nil && podGone {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.cgroup.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
		p.cgroup = nil
	}
	if p.net != nil {
		if err := p.net.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.closeStaged()
	return errs
}
