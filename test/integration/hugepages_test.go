//go:build hugepages

package integration

// A guest backed by 2Mi hugepages needs the machine's hugepage pool,
// which is empty on a stock machine and whole-machine state, so the test
// is not in make test: make test-hugepages reserves the pages for its run
// (VIRTLAUNCHER_TEST_SET_HUGEPAGES=1) and puts the setting back after.

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

const nrHugepages = "/proc/sys/vm/nr_hugepages"

// meminfo reads one "Name: value" figure of /proc/meminfo.
func meminfo(t *testing.T, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	launchertest.Must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			launchertest.Must(t, err)
			return n
		}
	}
	t.Fatalf("/proc/meminfo has no %s", name)
	return 0
}

// reserveHugepages makes n more 2Mi hugepages free than there are for the
// test's run, and puts vm.nr_hugepages back afterwards.
func reserveHugepages(t *testing.T, n uint64) {
	t.Helper()
	b, err := os.ReadFile(nrHugepages)
	launchertest.Must(t, err)
	old, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	launchertest.Must(t, err)
	if os.Getenv("VIRTLAUNCHER_TEST_SET_HUGEPAGES") != "1" {
		t.Skipf("needs %d free 2Mi hugepages; make test-hugepages reserves them for the run", n)
	}
	want := old + n
	launchertest.Must(t, os.WriteFile(nrHugepages, []byte(strconv.FormatUint(want, 10)), 0o644))
	t.Cleanup(func() {
		if err := os.WriteFile(nrHugepages, []byte(strconv.FormatUint(old, 10)), 0o644); err != nil {
			t.Errorf("put vm.nr_hugepages back to %d: %v", old, err)
		}
		t.Logf("vm.nr_hugepages back to %d", old)
	})
	if got := meminfo(t, "HugePages_Total"); got < want {
		t.Fatalf("vm.nr_hugepages=%d gave %d hugepages (memory too fragmented?)", want, got)
	}
	t.Logf("vm.nr_hugepages=%d for this test (was %d)", want, old)
}

// TestHugepages: a guest with memory.hugepages.pageSize 2Mi is refused
// with the field named while the pool cannot hold it, then, with the
// pages reserved, boots backed by them: HugePages_Free drops by the
// guest's pages and QEMU maps its RAM with 2 MiB kernel pages.
func TestHugepages(t *testing.T) {
	testenv.Root(t, "vm.nr_hugepages")
	const guest = 128 << 20
	pages := uint64(guest / (2 << 20))
	p := env.New(t, "huge", podOpts{})
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("huge", testguest.OptNoAgent)
	v.Spec.Domain.Resources.Requests[k8sv1.ResourceMemory] = *resource.NewQuantity(guest, resource.BinarySI)
	v.Spec.Domain.Memory = &v1.Memory{Hugepages: &v1.Hugepages{PageSize: "2Mi"}}

	if free := meminfo(t, "HugePages_Free"); free < pages {
		err := c.Sync(ctx, v, nil)
		if err == nil || !strings.Contains(err.Error(), "spec.domain.memory.hugepages.pageSize") || !strings.Contains(err.Error(), "free 2Mi hugepages") {
			t.Errorf("Sync with %d free hugepages: %v, want the page size named", free, err)
		}
	}
	reserveHugepages(t, pages+8)
	before := meminfo(t, "HugePages_Free")
	t0 := time.Now()
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	t.Logf("Sync -> guest ready: %v", time.Since(t0))
	after := meminfo(t, "HugePages_Free")
	rsvd := meminfo(t, "HugePages_Rsvd")
	// memfd hugepages are reserved at the mapping and taken as the guest
	// touches them: together they are the guest's memory.
	if before-after+rsvd < pages {
		t.Errorf("HugePages_Free %d -> %d, Rsvd %d: less than the guest's %d pages", before, after, rsvd, pages)
	}
	smaps, err := os.ReadFile("/proc/" + strconv.Itoa(p.QemuPid()) + "/smaps")
	launchertest.Must(t, err)
	huge := uint64(0)
	for _, m := range strings.Split(string(smaps), "\nSize:") {
		if strings.Contains(m, "KernelPageSize:     2048 kB") {
			kb, _ := strconv.ParseUint(strings.Fields(m)[0], 10, 64)
			huge += kb << 10
		}
	}
	if huge < guest {
		t.Errorf("QEMU maps %d bytes with 2 MiB pages, want the guest's %d", huge, guest)
	}
	t.Logf("HugePages_Free %d -> %d (Rsvd %d); QEMU's 2 MiB-page mappings: %d MiB", before, after, rsvd, huge>>20)
}
