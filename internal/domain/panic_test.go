package domain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// TestPanicInfoFromLog: the details of a guest panic are the last "panic"
// line libvirt wrote to the domain's QEMU log (Hyper-V's bugcheck code and
// parameters); a pvpanic panic has none, so its type is "unknown".
func TestPanicInfoFromLog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hv := write("hv.log", "2026-12-07 07:00:00.000+0000: starting up libvirt version: 9.0.0\n"+
		"2026-12-07 07:01:00.000+0000: panic hyper-v: arg1='0x1', arg2='0x2', arg3='0x3', arg4='0x4', arg5='0x5'\n"+
		strings.Repeat("noise after the first panic\n", 400)+
		"2026-12-07 07:02:00.000+0000: panic hyper-v: arg1='0x5a', arg2='0x1', arg3='0x0', arg4='0x0', arg5='0xfffff80'\n"+
		"2026-12-07 07:02:01.000+0000: shutting down, reason=crashed\n")
	plain := write("plain.log", "2026-12-07 07:00:00.000+0000: starting up\nqemu-system-x86_64: terminating on signal 15\n")
	for _, c := range []struct {
		path, want, msg string
	}{
		{hv, "hyper-v 0x5a 0x1 0x0 0x0 0xfffff80", "GuestPanicked: '0x5a', '0x1', '0x0', '0x0', '0xfffff80'"},
		{plain, "unknown 0x0 0x0 0x0 0x0 0x0", "GuestPanicked (details unavailable)"},
		{filepath.Join(dir, "missing.log"), "unknown 0x0 0x0 0x0 0x0 0x0", "GuestPanicked (details unavailable)"},
	} {
		info, msg := panicDetails(c.path)
		got := fmt.Sprintf("%s %#x %#x %#x %#x %#x", info.Type, info.Arg1, info.Arg2, info.Arg3, info.Arg4, info.Arg5)
		if got != c.want || msg != c.msg {
			t.Errorf("%s: %s %q, want %s %q", filepath.Base(c.path), got, msg, c.want, c.msg)
		}
	}
}

// TestPanicRecord: KubeVirt counts each crash event once, except that after
// a PANICKED one further PANICKED events are not counted (the guest stays
// crashed); CRASHLOADED ones (kdump rebooting the guest) always count.
func TestPanicRecord(t *testing.T) {
	var r panicRecord
	info := &domainjson.GuestPanicInfo{Type: "unknown"}
	steps := []struct {
		detail libvirt.DomainEventCrashedDetailType
		counts bool
		count  int
	}{
		{libvirt.DomainEventCrashedCrashloaded, true, 1},
		{libvirt.DomainEventCrashedCrashloaded, true, 2},
		{libvirt.DomainEventCrashedPanicked, true, 3},
		{libvirt.DomainEventCrashedPanicked, false, 3},
		{libvirt.DomainEventCrashedCrashloaded, false, 3},
	}
	for i, s := range steps {
		if got := r.record(int32(s.detail), info); got != s.counts || r.count != s.count {
			t.Errorf("step %d: counted %v (count %d), want %v (%d)", i, got, r.count, s.counts, s.count)
		}
	}
	var st domainjson.DomainStatus
	r.overlay(&st)
	if st.PanicCount != 3 || st.GuestPanicInfo == nil || st.GuestPanicInfo.Type != "unknown" {
		t.Errorf("status %+v", st)
	}
}
