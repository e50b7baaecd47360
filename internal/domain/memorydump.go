package domain

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// A memory dump (VirtualMachineMemoryDump) is made as KubeVirt's launcher
// makes it: libvirt's memory-only core dump in ELF (the raw format) into
// the file virt-handler names in the directory where it mounted the
// memory dump volume. The RPC starts it and answers at once; the dump runs
// in the background, outside the operation lock, so the domain's other
// RPCs go on meanwhile (libvirt pauses the guest for the dump, reason
// Dump, and resumes it after). Its start, end and outcome go into the
// Domain's memory dump metadata, which virt-handler compares with the file
// name it asked for. virt-handler calls again on every reconcile until it
// reads the end there, so a request while a dump runs, or for the file of
// the last dump, does nothing.

// memoryDumpFailed begins a failed dump's reason (KubeVirt's words).
const memoryDumpFailed = "Domain memory dump failed"

// The dump's deadline: libvirt cannot abort a memory-only dump, so one
// that takes longer is recorded as failed (the call is left to end on
// its own). It allows a fixed margin plus the guest's memory written at
// dumpMinRate, slower than any volume a dump is expected to go to.
const (
	dumpBaseDeadline = 15 * time.Minute
	dumpMinRate      = 8 << 20 // bytes per second
)

func dumpDeadline(memBytes uint64) time.Duration {
	return dumpBaseDeadline + time.Duration(memBytes/dumpMinRate)*time.Second
}

// MemoryDump starts a memory dump of the domain to dumpPath, a file in a
// hotplugged volume's directory, and returns once it runs (or once it is
// recorded as failed: a dump that cannot start is reported in the
// metadata, like one that fails later). Nothing is done while a dump runs
// or when the last dump was to a file of the same name.
func (m *Manager) MemoryDump(ctx context.Context, v *v1.VirtualMachineInstance, dumpPath string) error {
	vol, file, err := dumpTarget(m.cfg.Layout, dumpPath)
	if err != nil {
		return err
	}
	if err := m.op.lock(ctx); err != nil {
		return fmt.Errorf("memory dump: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	m.jobs.beginDump(ctx, vol, file, dumpPath)
	return nil
}

// beginDump starts the dump to dumpPath (file in volume vol) unless one
// runs or the last was to the same file.
func (x *jobs) beginDump(ctx context.Context, vol, file, dumpPath string) {
	x.rec.mu.Lock()
	next, start := startDump(x.rec.md.MemoryDump, x.dumping, file, time.Now())
	if start {
		x.rec.md.MemoryDump, x.dumping = next, true
	}
	bg := x.rec.runContextLocked()
	x.rec.mu.Unlock()
	if !start {
		x.log.Info("memory dump in progress or done: nothing to do", "file", file)
		return
	}
	x.refresh(ctx, EventModified, true)
	l, d, limit, err := x.dumpDomain(ctx)
	if err != nil {
		x.log.Error("memory dump failed", "file", file, "reason", err.Error())
		x.dumpEnded(bg, file, err, true)
		return
	}
	go x.runDump(bg, l, d, vol, dumpPath, limit)
}

// dumpTarget checks the dump's path: a file directly in a volume's
// directory below the hotplug disk directory, where virt-handler mounts
// a memory dump volume. The launcher writes and removes dumps nowhere
// else.
func dumpTarget(l layout.Layout, p string) (vol, file string, err error) {
	bad := func(why string) error { return fmt.Errorf("dumpPath %q: %s", p, why) }
	switch {
	case p == "":
		return "", "", bad("must be set")
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return "", "", bad("must be an absolute path without . or .. elements")
	}
	rel, err := filepath.Rel(l.HotplugDiskDir, p)
	parts := strings.Split(rel, "/")
	if err != nil || len(parts) != 2 || layout.CheckName(parts[0]) != nil || layout.CheckName(parts[1]) != nil {
		return "", "", bad("must be a file directly in a volume's directory under " + l.HotplugDiskDir)
	}
	return parts[0], parts[1], nil
}

// startDump decides a request for a dump to file: nothing while a dump
// runs (whatever its file, as KubeVirt's one dump slot) or when the last
// dump, running or ended, was to the same file name; otherwise a new
// record, started at now.
func startDump(last *domainjson.MemoryDumpMetadata, running bool, file string, now time.Time) (*domainjson.MemoryDumpMetadata, bool) {
	if running || (last != nil && last.FileName == file) {
		return last, false
	}
	t := metav1.NewTime(now)
	return &domainjson.MemoryDumpMetadata{FileName: file, StartTimestamp: &t}, true
}

// endDump is the record of the dump to file once it ended with err (nil:
// completed). A record that already has its end (the deadline passed
// before the call returned) or is of another file stays as it is.
func endDump(cur *domainjson.MemoryDumpMetadata, file string, err error, now time.Time) *domainjson.MemoryDumpMetadata {
	if cur == nil || cur.FileName != file || cur.EndTimestamp != nil {
		return cur
	}
	next := *cur
	t := metav1.NewTime(now)
	next.Completed, next.EndTimestamp = true, &t
	if err != nil {
		next.Failed, next.FailureReason = true, memoryDumpFailed+": "+err.Error()
	}
	return &next
}

// dumpDomain finds the domain and the deadline of its dump.
func (x *jobs) dumpDomain(ctx context.Context) (*libvirt.Libvirt, libvirt.Domain, time.Duration, error) {
	l, err := x.find.conn.wait(ctx)
	if err != nil {
		return nil, libvirt.Domain{}, 0, err
	}
	var d libvirt.Domain
	var maxKiB uint64
	err = bounded.Call(ctx, "find the domain to dump", func() error {
		var ok bool
		var err error
		if _, d, ok, err = x.find.lookupOn(l); err != nil {
			return err
		}
		if !ok {
			return errors.New("no domain is defined")
		}
		_, maxKiB, _, _, _, err = l.DomainGetInfo(d)
		return err
	})
	return l, d, dumpDeadline(maxKiB << 10), err
}

// runDump runs the dump call and records its end. bg is the manager's
// lifetime: the dump outlives the RPC that started it.
func (x *jobs) runDump(bg context.Context, l *libvirt.Libvirt, d libvirt.Domain, vol, path string, limit time.Duration) {
	file := filepath.Base(path)
	x.removeOldDumps(vol)
	t0 := time.Now()
	x.log.Info("memory dump starting", "domain", d.Name, "path", path, "deadline", limit.String())
	done := make(chan error, 1)
	go func() {
		done <- l.DomainCoreDumpWithFormat(d, path, uint32(libvirt.DomainCoreDumpFormatRaw), libvirt.DumpMemoryOnly)
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-done:
		x.logDumpEnd(d.Name, path, err, time.Since(t0))
		x.dumpEnded(bg, file, err, true)
		return
	case <-bg.Done():
		return
	case <-timer.C:
	}
	err := fmt.Errorf("not completed within %v (libvirt cannot abort a memory-only dump; the guest stays paused until it ends)", limit)
	x.log.Error("memory dump failed", "domain", d.Name, "path", path, "reason", err.Error())
	x.dumpEnded(bg, file, err, false)
	// The daemon still runs the dump: no other may start before it ends.
	select {
	case err := <-done:
		x.logDumpEnd(d.Name, path, err, time.Since(t0))
		x.dumpEnded(bg, file, err, true)
	case <-bg.Done():
	}
}

func (x *jobs) logDumpEnd(dom, path string, err error, took time.Duration) {
	if err != nil {
		x.log.Error("memory dump failed", "domain", dom, "path", path, "reason", err.Error(), "took", took.String())
		return
	}
	x.log.Info("memory dump completed", "domain", dom, "path", path, "took", took.String())
}

// dumpEnded records the end of the dump to file (endDump) and, when over
// reports that the daemon's call has returned, frees the dump slot; a
// change is sent to virt-handler.
func (x *jobs) dumpEnded(bg context.Context, file string, err error, over bool) {
	x.rec.mu.Lock()
	next := endDump(x.rec.md.MemoryDump, file, err, time.Now())
	changed := next != x.rec.md.MemoryDump
	x.rec.md.MemoryDump = next
	if over {
		x.dumping = false
	}
	x.rec.mu.Unlock()
	if changed {
		ctx, cancel := context.WithTimeout(bg, refreshWait)
		defer cancel()
		x.refresh(ctx, EventModified, true)
	}
}

// refreshWait bounds the read of the domain that sends a dump's end.
const refreshWait = 10 * time.Second

// removeOldDumps removes what earlier dumps left in the volume's
// directory (the names KubeVirt's launcher removes: any with
// "memory.dump" in it), so the volume holds the new dump only. No link is
// followed. A failure is logged and the dump tried anyway, as KubeVirt
// does.
func (x *jobs) removeOldDumps(vol string) {
	warn := func(err error) { x.log.Warn("remove earlier memory dumps", "volume", vol, "reason", err.Error()) }
	hot, err := safefs.Open(x.hotplugDir)
	if err != nil {
		warn(err)
		return
	}
	defer hot.Close()
	dir, err := hot.OpenDir(vol)
	if err != nil {
		warn(err)
		return
	}
	defer dir.Close()
	f, err := dir.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		warn(err)
		return
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		warn(err)
		return
	}
	for _, n := range names {
		if !strings.Contains(n, "memory.dump") {
			continue
		}
		if err := dir.Remove(n); err != nil {
			warn(err)
			continue
		}
		x.log.Info("removed an earlier memory dump", "path", dir.Join(n))
	}
}
