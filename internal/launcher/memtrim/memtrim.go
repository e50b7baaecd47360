// Package memtrim gives back the memory a Go program's start-up needed and
// its steady state does not. The launcher and the monitor call it once
// they have settled.
package memtrim

import (
	"bufio"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// Trim gives back the memory the start-up needed and the steady state
// does not:
//
//   - the Go heap's free pages (debug.FreeOSMemory: a forced GC and a scavenge,
//     instead of the background scavenger's gradual return);
//   - the mappings of this executable's read-only segments (code, read-only
//     data, the function tables). Start-up runs code that never runs again
//     (the launcher: 200 package inits, the converter, the disk preparation,
//     the first Sync), and the kernel maps 64 KiB around every page touched
//     (fault-around), so most of the launcher's 38 MB binary ends up mapped
//     though far less of it is in use. MADV_DONTNEED on a read-only
//     private file mapping only drops this process's page table entries:
//     the pages stay in the page cache (shared with every other launcher
//     running the same file) and a later access maps them again with a
//     minor fault, exactly as after reclaim under memory pressure. Writable
//     segments are left alone: dropping them would discard their contents.
//
// RSS falls by the pages dropped; what the node spends does not change for
// the file pages (the page cache keeps them until reclaim, as before), so
// this is about the per-process accounting a pod's RSS shows, and about not
// holding start-up code mapped for the VM's whole life.
//
// It returns the bytes of mappings dropped.
func Trim() (int64, error) {
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("find executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("read mappings: %w", err)
	}
	defer f.Close()
	type span struct{ lo, hi uintptr }
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00fc4000 r-xp 00000000 fe:00 745575   /path/virt-launcher
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || h <= l {
			continue
		}
		spans = append(spans, span{uintptr(l), uintptr(h)})
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read mappings: %w", err)
	}
	var n int64
	for _, s := range spans {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, syscall.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("madvise %#x-%#x: %w", s.lo, s.hi, e)
		}
		n += int64(s.hi - s.lo)
	}
	return n, nil
}
