package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// vmID is the VM's own id for one boot: a uid and gid leased from the
// machine's pool (--uids, uidpool) and the user that is (vmuser). Only the
// VM's processes run as it, so ending them is ending what runs as it; the
// id goes back to the pool once nothing does (release).
type vmID struct {
	vmuser.User
	// lease holds the id for the boot; nil for a user given as it is
	// (the tests'), which has nothing to end or give back.
	lease *uidpool.Lease
}

// leaseVMID leases an id of the pool for one boot.
func leaseVMID(pool *uidpool.Pool) (vmID, error) {
	lease, err := pool.Allocate()
	if err != nil {
		return vmID{}, fmt.Errorf("a user id for the VM: %w", err)
	}
	return vmID{User: vmuser.Leased(lease), lease: lease}, nil
}

// vmEndWait is how long the VM's processes left after the monitor get to
// end by themselves (a launcher shutting its guest down) before SIGKILL.
const vmEndWait = 30 * time.Second

// endProcesses waits for every process that runs as the VM's id to end,
// vmEndWait at most (less once force is closed: a second Ctrl-C), then
// kills what is left.
func (id vmID) endProcesses(force <-chan struct{}, log *slog.Logger) error {
	if id.lease == nil {
		return nil
	}
	uid := id.lease.ID
	if pids := pod.Holding(uid)(); len(pids) > 0 {
		log.Info("processes of the VM outlive its monitor; waiting for them", "uid", uid, "pids", pids)
	}
	if err := pod.EndProcesses(context.Background(), pod.Holding(uid), pod.EndOptions{Grace: vmEndWait, Force: force}); err != nil {
		return fmt.Errorf("the VM's processes (uid %d): %w", uid, err)
	}
	return nil
}

// stuckVMGrace is how long the VM's processes get after SIGTERM, when the
// launcher could not destroy the guest, before SIGKILL.
const stuckVMGrace = 5 * time.Second

// endStuck ends the VM's processes when its launcher could not destroy
// the guest (err says why), as the kubelet ends a pod whose grace period is
// over: SIGTERM to every process of the VM's id (QEMU stops at once; the
// monitor passes it on to the launcher), SIGKILL to what is left after
// stuckVMGrace.
func (id vmID) endStuck(status io.Writer, err error) error {
	fmt.Fprintf(status, "vlctl: the launcher could not destroy the guest (%v); ending the VM's processes\n", err)
	if id.lease == nil {
		return fmt.Errorf("kill: %w", err)
	}
	if eerr := pod.EndProcesses(context.Background(), pod.Holding(id.lease.ID), pod.EndOptions{Signal: syscall.SIGTERM, Grace: stuckVMGrace}); eerr != nil {
		return fmt.Errorf("kill: %w; ending the VM's processes: %w", err, eerr)
	}
	return errors.New("the VM's processes were ended: its launcher could not destroy the guest")
}

// release gives the id back once nothing runs as it; otherwise its lease
// stays for vlctl gc.
func (id vmID) release() error { return id.lease.Release("/proc") }
