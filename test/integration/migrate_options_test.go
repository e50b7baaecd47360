package integration

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// v19StallDetector is what KubeVirt v1.9's handler sends with the
// MigrationStallDetection gate on and no policy changing it.
func v19StallDetector() *migration.StallDetectorOptions {
	return &migration.StallDetectorOptions{StallMargin: 0.04, StallProgressTimeout: 40, SwitchoverTimeout: 60, EwmaAlpha: 0.4,
		PrecopyPossibleFactor: 1.5, PatienceWindowDecayFactor: 0.5, SearchLocalMinima: true, CompletionTimeoutFactor: 2}
}

// maxDowntime reads the source domain's migration downtime limit from its
// daemon (virDomainMigrateGetMaxDowntime), over a connection of the
// test's own.
func maxDowntime(t *testing.T, mp *migrationPair) uint64 {
	t.Helper()
	l := libvirt.NewWithDialer(libvirtd.SocketDialer(filepath.Join(mp.a.Layout.LibvirtRunDir, "libvirt", "virtqemud-sock")))
	launchertest.Must(t, l.ConnectToURI(libvirt.ConnectURI("qemu:///session")))
	defer l.Disconnect()
	d, err := l.DomainLookupByName(mp.a.DomainName())
	launchertest.Must(t, err)
	ms, err := l.DomainMigrateGetMaxDowntime(d, 0)
	launchertest.Must(t, err)
	return ms
}

// TestMigrationMaxDowntime: a migration under KubeVirt v1.9's options
// (the stall detector on, MaxDowntimeMs 100, zstd compression over 8
// connections) lowers QEMU's downtime limit from its 300 ms to 100 ms as
// it starts, read back from the source's daemon; the compression this
// libvirt (9.0) cannot do is dropped, saying why, and the migration runs
// without it; cancelled, it ends as v1.9 reports it and the guest counts
// on in the source pod.
func TestMigrationMaxDowntime(t *testing.T) {
	mp := newMigrationPair(t, false)
	mp.prepareTarget(t)
	if ms := maxDowntime(t, mp); ms != 300 {
		t.Fatalf("before the migration the downtime limit is %d ms, want QEMU's 300", ms)
	}
	zstd, threads := "zstd", uint(8)
	o := slow()
	o.MaxDowntimeMs, o.StallDetectorOptions, o.Compression, o.ParallelMigrationThreads = 100, v19StallDetector(), &zstd, &threads
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, o))
	mp.waitMigrating(t)
	deadline := time.Now().Add(10 * time.Second)
	for ms := maxDowntime(t, mp); ms != 100; ms = maxDowntime(t, mp) {
		if time.Now().After(deadline) {
			t.Fatalf("the migration's downtime limit is %d ms, want MaxDowntimeMs 100", ms)
		}
		time.Sleep(200 * time.Millisecond)
	}
	log := mp.a.Stderr.String()
	if !strings.Contains(log, "no compression: libvirt 9.0.0 knows only the mt and xbzrle methods") && !strings.Contains(log, "no compression: zstd compresses parallel connections only") {
		t.Errorf("the source did not say why it migrates without compression")
	}
	launchertest.Must(t, mp.ca.CancelMigration(mp.ctx, mp.vm))
	m := waitMigration(t, mp.ctx, mp.ca, "source", time.Minute)
	if !m.Failed || m.AbortStatus != string(v1.MigrationAbortSucceeded) || m.FailureReason != "Live migration has been aborted" {
		t.Errorf("the cancelled migration: %+v", m)
	}
	mp.stillCounting(t)
}

// TestMigrationStallDetector: a guest dirtying 8 MB of memory over and
// over, migrated at 16 MiB/s with MaxDowntimeMs 100, never gets its
// remaining data below the half second the limit allows: at the start of
// each pass as much is left as a few seconds before. The stall detector
// (a 3 s window, v1.9's other defaults) sees the stall, finds the
// estimated downtime beyond 1.5 times the limit and aborts the migration
// long before its completion limit; the migration ends as v1.9 reports an
// abort, the detector's reason in the log, and the guest counts on in the
// source pod.
func TestMigrationStallDetector(t *testing.T) {
	mp := newMigrationPair(t, false, dirtier)
	mp.prepareTarget(t)
	sd := v19StallDetector()
	sd.StallProgressTimeout = 3
	o := migration.Options{Bandwidth: resource.MustParse("16Mi"), ProgressTimeout: 150, CompletionTimeoutPerGiB: 150,
		MaxDowntimeMs: 100, StallDetectorOptions: sd}
	t0 := time.Now()
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, o))
	m := waitMigration(t, mp.ctx, mp.ca, "source", 2*time.Minute)
	took := time.Since(t0)
	if !m.Failed || m.AbortStatus != string(v1.MigrationAbortSucceeded) || m.FailureReason != "Live migration has been aborted" {
		t.Errorf("the stalled migration: %+v, want it aborted", m)
	}
	why := regexp.MustCompile(`"msg":"aborting the migration"[^\n]*"reason":"(estimated downtime \d+ms exceeds max allowed downtime 100ms by a factor of more than x1.50)"`).FindStringSubmatch(mp.a.Stderr.String())
	if why == nil {
		t.Fatalf("the source did not log the stall detector's abort:\n%s", launchertest.Tail(mp.a.Stderr.String(), 3000))
	}
	t.Logf("aborted after %v: %s", took.Round(time.Second), why[1])
	mp.stillCounting(t)
}
