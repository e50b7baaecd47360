// Package pod is a launcher pod on a plain machine, the part a container
// runtime and the kubelet play in a cluster: the pod's directories, made by
// root and then handed to the pod's user (MakeDirs, Dirs.HandOver), the
// monitor's process (Monitor: the command line from internal/launcherflags,
// the environment from monitor.Env), started from a thread that first
// enters the pod's namespaces (Start, NetNS, and a passwd of the pod's own,
// Identity). Spec is the whole recipe in one value: vlctl run, the test
// harness (internal/launchertest) and the bench describe their pods with
// one and make and start them with Spec.Launch (or Prepare and Start).
package pod

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Process is a started monitor.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
	end  time.Time
}

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is what Wait returned; it waits for the process to exit.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has exited, without waiting.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// EndedAt is when Wait returned; it waits for the process to exit.
func (p *Process) EndedAt() time.Time {
	<-p.done
	return p.end
}

// Start starts cmd from a goroutine locked to its thread for good: the
// enter steps (Enter) first put the thread into the pod's namespaces,
// which cmd inherits, and the thread then waits for cmd. A child's
// parent-death signal (Pdeathsig) follows the thread that started it, not
// the process, so that thread must live as long as the child; and a thread
// that changed namespaces must never run other goroutines. Once cmd has
// exited the thread goes back to its namespaces and ends with its
// goroutine (the runtime ends a locked thread, except the main thread,
// which it parks for good: back in its own namespaces, it holds none of
// the pod's alive).
func Start(cmd *exec.Cmd, enter ...func() error) (*Process, error) {
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore, err := Enter(enter...)
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			restore()
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		p.end = time.Now()
		restore()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Enter runs the enter steps (nil ones skipped) on the calling thread,
// which must be locked to its goroutine for good, and returns what takes
// the thread back to the network and mount namespaces it had. restore is
// never nil; it does its best and is safe to call after a failed step.
func Enter(enter ...func() error) (restore func(), err error) {
	if !slices.ContainsFunc(enter, func(e func() error) bool { return e != nil }) {
		return func() {}, nil // nothing to enter, nothing to go back to
	}
	net, nerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	mnt, merr := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	restore = func() {
		if merr == nil {
			unix.Setns(mnt, unix.CLONE_NEWNS)
			unix.Close(mnt)
		}
		if nerr == nil {
			unix.Setns(net, unix.CLONE_NEWNET)
			unix.Close(net)
		}
	}
	if err := errors.Join(nerr, merr); err != nil {
		restore()
		return func() {}, fmt.Errorf("the thread's own namespaces: %w", err)
	}
	for _, e := range enter {
		if e == nil {
			continue
		}
		if err := e(); err != nil {
			return restore, err
		}
	}
	return restore, nil
}

// NetNS enters the network namespace ns; a handle of 0 or less means none.
func NetNS(ns netns.NsHandle) func() error {
	if ns <= 0 {
		return nil
	}
	return func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter the pod's network namespace: %w", err)
		}
		return nil
	}
}

// BindAt puts the pod's directory dir at the path at in a mount namespace
// of its own (at must exist, an empty directory): every pod started so
// sees its own files at one and the same path. A live migration needs
// that between two pods on one machine, as between two nodes: the source
// domain's XML names its disks, sockets and logs by path, and the target
// must find its own files there.
func BindAt(dir, at string) func() error {
	return func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("new mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make the mount namespace private: %w", err)
		}
		if err := unix.Mount(dir, at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s at %s: %w", dir, at, err)
		}
		return nil
	}
}
