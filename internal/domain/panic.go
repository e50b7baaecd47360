package domain

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// panicRecord is what KubeVirt's notifier keeps of a domain's guest panics
// and sends in every Domain after the first: how many crash events it
// counted and the details of the last one.
type panicRecord struct {
	count   int
	info    *domainjson.GuestPanicInfo
	handled bool // a PANICKED event was counted: later crash events are not
}

// record counts one CRASHED lifecycle event with the given detail, as
// KubeVirt does: none after a PANICKED one (the guest stays crashed until
// it is started again), every CRASHLOADED one before (kdump booting the
// guest's crash kernel, which may panic again). It tells whether the event
// counted.
func (r *panicRecord) record(detail int32, info *domainjson.GuestPanicInfo) bool {
	if r.handled {
		return false
	}
	if libvirt.DomainEventCrashedDetailType(detail) == libvirt.DomainEventCrashedPanicked {
		r.handled = true
	}
	r.count++
	r.info = info
	return true
}

// overlay puts the record into a Domain's status.
func (r *panicRecord) overlay(st *domainjson.DomainStatus) {
	if r.count == 0 {
		return
	}
	st.PanicCount = r.count
	info := *r.info
	st.GuestPanicInfo = &info
}

// panicLogTail bounds how much of the QEMU log is searched for the panic's
// details: libvirt writes them last, right before the domain stops.
const panicLogTail = 1 << 20

var (
	// libvirt's line in the domain's QEMU log, e.g.
	// "2026-12-07 07:02:00.000+0000: panic hyper-v: arg1='0x5a', arg2='0x1', ...".
	panicLineRE = regexp.MustCompile(`panic\s+(\S+):\s*(.*)`)
	panicArgRE  = regexp.MustCompile(`arg([1-5])=['"]?0[xX]([0-9a-fA-F]+)['"]?`)
)

// panicDetails reads the details of the guest's last panic from the
// domain's QEMU log and the message of the GuestPanicked event, as
// KubeVirt's launcher words it. A pvpanic device gives no details (libvirt
// logs a line only for Hyper-V and s390 crash information): type
// "unknown".
func panicDetails(logPath string) (*domainjson.GuestPanicInfo, string) {
	if info := lastPanicLine(logPath); info != nil && info.Type != "" {
		if info.Type == "hyper-v" {
			return info, fmt.Sprintf("GuestPanicked: '%#x', '%#x', '%#x', '%#x', '%#x'", info.Arg1, info.Arg2, info.Arg3, info.Arg4, info.Arg5)
		}
		return info, "GuestPanicked: type=" + info.Type
	}
	return &domainjson.GuestPanicInfo{Type: "unknown"}, "GuestPanicked (details unavailable)"
}

func lastPanicLine(logPath string) *domainjson.GuestPanicInfo {
	if logPath == "" {
		return nil
	}
	f, err := os.Open(logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	start := max(0, fi.Size()-panicLogTail)
	b, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := panicLineRE.FindStringSubmatch(lines[i]); m != nil {
			return parsePanicArgs(m[1], m[2])
		}
	}
	return nil
}

func parsePanicArgs(typ, args string) *domainjson.GuestPanicInfo {
	info := &domainjson.GuestPanicInfo{Type: typ}
	for _, a := range panicArgRE.FindAllStringSubmatch(args, -1) {
		v, _ := strconv.ParseUint(a[2], 16, 64)
		switch a[1] {
		case "1":
			info.Arg1 = v
		case "2":
			info.Arg2 = v
		case "3":
			info.Arg3 = v
		case "4":
			info.Arg4 = v
		case "5":
			info.Arg5 = v
		}
	}
	return info
}

// guestPanic handles a CRASHED lifecycle event before the Domain is read
// again: the GuestPanicked Kubernetes event with the panic's details, and
// the count and details every Domain from now on carries.
func (x *watcher) guestPanic(detail int32, domName string, ref VMIRef) {
	logPath := ""
	if x.qemuLogDir != "" && domName != "" {
		logPath = filepath.Join(x.qemuLogDir, domName+".log")
	}
	info, msg := panicDetails(logPath)
	x.rec.mu.Lock()
	counted := x.rec.panics.record(detail, info)
	x.rec.mu.Unlock()
	if !counted {
		return
	}
	x.log.Info("guest panic", "domain", domName, "details", msg)
	x.out.queue(outEvent{k8s: true, ref: ref, k8sType: "Warning", reason: "GuestPanicked", message: msg})
}
