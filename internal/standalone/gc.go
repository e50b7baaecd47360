package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// gcWait is how long vlctl run's own GC gives a stale run's processes
// between SIGTERM and SIGKILL.
const gcWait = 10 * time.Second

// GC cleans up after every `vlctl run` that ended without doing it itself
// (killed with SIGKILL, say), from the records in recordDir whose run is
// gone: it ends the run's processes, those running as its VM's id
// (SIGTERM, then SIGKILL after wait), deletes its network namespaces, takes its ACL entries out of the user's
// disk files, removes its work dir and finally the record. A record whose
// clean-up failed stays, for another try. Records of live runs are never
// acted on. Then it gives back the ids in the machine's lease table whose
// runs are gone and cleaned up after. What it does is told on status.
func GC(recordDir string, wait time.Duration, status io.Writer) error {
	entries, err := runrecord.List(recordDir)
	if err != nil {
		// Without every record, no lease can be told unneeded.
		return err
	}
	var errs []error
	var kept []uint32 // the ids of the records that stay
	// The directories live runs use: their work dirs, and where their
	// launchers see them (a migrated VM's first work dir, migrate.go).
	inUse := map[string]bool{}
	for _, e := range entries {
		if !e.Stale {
			inUse[e.WorkDir], inUse[e.Root()] = true, true
		}
	}
	for i := range entries {
		e := &entries[i]
		if !e.Stale {
			kept = append(kept, e.UID)
			continue
		}
		fmt.Fprintf(status, "vlctl: gc: %s: its vlctl run (pid %d) ended without cleaning up; cleaning up %s\n", e.FullName(), e.PID, e.WorkDir)
		err := collect(e, inUse, wait, status)
		if err == nil {
			err = runrecord.Remove(e.Path)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("gc of %s (record %s, kept): %w", e.FullName(), e.Path, err))
			kept = append(kept, e.UID)
		}
	}
	if err := sweepUIDs(kept, status); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sweepUIDs gives back the ids of runs that are gone: every lease whose
// vlctl run has ended, unless a record that stays names its id (kept: a
// clean-up that failed, to be retried) or something still runs as it. A
// run that started since holds its lease alive.
func sweepUIDs(kept []uint32, status io.Writer) error {
	pool := uidpool.MachineTable()
	freed, err := pool.Sweep(func(id uint32) bool { return slices.Contains(kept, id) })
	for _, id := range freed {
		fmt.Fprintf(status, "vlctl: gc: gave back uid %d\n", id)
	}
	if err != nil {
		return fmt.Errorf("uid leases: %w", err)
	}
	return nil
}

// collect undoes what one stale run left. inUse are the directories live
// runs use.
func collect(e *runrecord.Entry, inUse map[string]bool, wait time.Duration, status io.Writer) error {
	dir := e.WorkDir
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || strings.Count(dir, "/") < 2 {
		return fmt.Errorf("work dir %q: not a clean absolute path below a work root; nothing done", dir)
	}
	if err := endProcesses(e, wait, status); err != nil {
		return err
	}
	var errs []error
	for _, n := range e.NetNS {
		if !podnet.IsNamespaceName(n) {
			errs = append(errs, fmt.Errorf("network namespace %q: not one vlctl makes; left alone", n))
			continue
		}
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
			continue
		}
		if err := podnet.DeleteNamedNS(n); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(status, "vlctl: gc: deleted network namespace %s\n", n)
	}
	for _, g := range e.Grants {
		if err := revokeGrant(g, status); err != nil {
			errs = append(errs, fmt.Errorf("ACL of %s: %w", g.Path, err))
		}
	}
	// The work dir stays root's for the whole run (only its entries go to
	// the launcher's user); anything else at that path is not ours.
	switch {
	case inUse[dir]:
		// The guest migrated to a run whose launcher sees its pod at
		// this path: emptied, kept for it.
		if err := removeWorkDir(dir, true); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		} else if err == nil {
			fmt.Fprintf(status, "vlctl: gc: emptied %s (the VM's run now uses the path)\n", dir)
		}
	case e.Keep:
		fmt.Fprintf(status, "vlctl: gc: kept %s (the run had --keep)\n", dir)
	default:
		if err := removeWorkDir(dir, false); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		} else if err == nil {
			fmt.Fprintf(status, "vlctl: gc: removed %s\n", dir)
		}
	}
	// The first work dir of a migrated VM goes with its last run.
	if root := e.Root(); root != dir && !inUse[root] && filepath.IsAbs(root) && filepath.Clean(root) == root {
		if removed, err := removeLauncherRoot(root); err != nil {
			errs = append(errs, err)
		} else if removed {
			fmt.Fprintf(status, "vlctl: gc: removed %s (where its launcher saw its pod)\n", root)
		}
	}
	return errors.Join(errs...)
}

// endProcesses ends the processes of the stale run e: those running with
// its VM's id (pod.Holding), which no other process on the machine has
// while the id is leased to the run. A working directory or a command line
// would not do: the VM's processes choose those. SIGTERM first (a monitor
// still shutting its guest down gets the time to finish), SIGKILL for what
// is left after wait. Any survivor keeps the record, and so the lease.
func endProcesses(e *runrecord.Entry, wait time.Duration, status io.Writer) error {
	sel, what, err := runProcesses(e)
	if err != nil {
		return err
	}
	n := len(sel())
	if n == 0 {
		return nil
	}
	fmt.Fprintf(status, "vlctl: gc: %d processes of %s left: SIGTERM\n", n, what)
	err = pod.EndProcesses(context.Background(), sel, pod.EndOptions{Signal: syscall.SIGTERM, Grace: wait,
		Killing: func(left []int) {
			fmt.Fprintf(status, "vlctl: gc: processes %v of %s still running after %s: SIGKILL\n", left, what, wait)
		}})
	if err != nil {
		return fmt.Errorf("processes of %s: %w; nothing else done", what, err)
	}
	return nil
}

// runProcesses selects the processes of the stale run e, and says what
// they are. The id must still be the run's: its lease in the machine's
// table names the run (its record, or its pid and start time), or, when
// there is none, gc takes it for the run first, so that no new run gets
// the id while its processes are ended.
func runProcesses(e *runrecord.Entry) (pod.Selector, string, error) {
	if e.UID == 0 {
		// A record of a vlctl from before each VM had an id of its own:
		// its processes ran as a user shared by all VMs.
		return pod.Under(e.WorkDir), e.WorkDir, nil
	}
	what := fmt.Sprintf("uid %d", e.UID)
	pool := uidpool.MachineTable()
	mine := uidpool.Holder{PID: e.PID, PIDStart: e.PIDStart, Record: e.Path}
	for range 2 {
		h, ok, err := pool.Holder(e.UID)
		if err != nil {
			return nil, "", err
		}
		if ok {
			if h.Record != e.Path && (h.Record != "" || h.PID != e.PID || h.PIDStart != e.PIDStart) {
				return nil, "", fmt.Errorf("%s is leased to another run now (vlctl pid %d, record %q): its processes are not this run's; nothing done", what, h.PID, h.Record)
			}
			return pod.Holding(e.UID), what, nil
		}
		if err := pool.Claim(e.UID, mine); !errors.Is(err, os.ErrExist) {
			if err != nil {
				return nil, "", err
			}
			return pod.Holding(e.UID), what, nil
		}
		// Leased meanwhile: look again whose it is.
	}
	return nil, "", fmt.Errorf("%s: its lease keeps changing; nothing done", what)
}

// revokeGrant takes a run's ACL entry out of a user's file, as the run's
// own clean-up does (userstorage.Grant.Undo), when the file at that path is still the
// same file (device and inode) and its ACL is still what the run set.
func revokeGrant(g runrecord.Grant, status io.Writer) error {
	f, err := os.OpenFile(g.Path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(st.Dev) != g.Dev || st.Ino != g.Ino {
		fmt.Fprintf(status, "vlctl: gc: %s is another file now: its ACL left alone\n", g.Path)
		return nil
	}
	same, err := userstorage.Recorded(f, g.Before, g.After).Undo()
	if err != nil {
		return err
	}
	if !same {
		fmt.Fprintf(status, "vlctl: gc: the run's ACL entry in %s changed since the run set it: left as it is\n", g.Path)
		return nil
	}
	fmt.Fprintf(status, "vlctl: gc: took the run's ACL entry out of %s\n", g.Path)
	return nil
}

// removeWorkDir removes a dead run's work dir if it is a directory root
// owns, after taking it back (takeBack) through the descriptor it checked;
// keep empties it and keeps the directory (handedOverRoot).
func removeWorkDir(dir string, keep bool) error {
	d, err := safefs.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s is not a directory owned by root: left alone", dir)
	}
	if err := takeBack(d); err != nil {
		return err
	}
	if keep {
		return handedOverRoot(dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
