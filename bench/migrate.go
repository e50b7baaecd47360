package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/migrationproxy"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// migrationRun measures live migration of the test guest between two of
// our launcher pods on this machine (test/integration TestLiveMigration
// drives the same, and checks it): each run boots the guest in pod A,
// prepares pod B as the target (SyncMigrationTarget), starts
// virt-handler's proxies (unix socket, TCP, unix socket) and migrates
// (MigrateVirtualMachine, KubeVirt's default options). Figures: the time
// from the call to the end in the source's migration metadata, then in the
// target's, and libvirt's own statistics of the job (elapsed, downtime),
// from the source launcher's log. KubeVirt's launcher is not measured: its
// migration needs virt-handler's part, which runs beside ours only in a
// cluster.
func (b *bench) migrationRun(ctx context.Context) error {
	if b.seed == "" {
		b.env.logf("migration: seeding a capability cache first")
		if err := b.seedCache(ctx); err != nil {
			return err
		}
	}
	for i := 0; i < b.o.runs; i++ {
		if err := b.migrateOne(ctx, i); err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
	}
	f := b.r.fig("migration.downtime")
	f.summarize()
	b.env.logf("migration: downtime %.0f ms (median of %d)", f.Median, f.N)
	return nil
}

func (b *bench) migrateOne(ctx context.Context, i int) error {
	e, r := b.env, b.r
	fixed, err := os.MkdirTemp(e.workRoot, "fx")
	if err != nil {
		return err
	}
	defer os.Remove(fixed)
	if err := os.Chmod(fixed, 0o755); err != nil {
		return err
	}
	src, err := newInstance(ctx, e, fmt.Sprintf("mg%d", i), b.seed)
	if err != nil {
		return err
	}
	defer src.cleanup()
	dst, err := newInstance(ctx, e, fmt.Sprintf("mg%d", i), b.seed)
	if err != nil {
		return err
	}
	defer dst.cleanup()
	dst.vmi = src.vmi.DeepCopy() // one VMI, two pods
	for _, in := range []*instance{src, dst} {
		in.pod.Spec.FixedRoot = fixed
		if err := in.start(); err != nil {
			return err
		}
		if err := in.waitReady(ctx); err != nil {
			return err
		}
	}
	if err := src.firstSync(ctx); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := src.console.wait(bctx, testguest.MarkerReady); err != nil {
		return src.withLog(err)
	}
	vm := src.vmi.DeepCopy()
	vm.Status.Phase = v1.Running
	vm.Status.MigrationMethod = v1.BlockMigration
	vm.Status.MigrationTransport = v1.MigrationTransportUnix
	vm.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "bench-mig", SourcePod: "a", TargetPod: "b"}
	if err := dst.client.SyncMigrationTarget(bctx, vm, cmdclient.HandlerSyncOptions()); err != nil {
		return dst.withLog(err)
	}
	streams, err := openProxies(src, dst)
	for _, s := range streams {
		defer s.Close()
	}
	if err != nil {
		return err
	}
	// KubeVirt's defaults (virt-config): no bandwidth cap, 150 s without
	// progress, 150 s per GiB.
	t0 := time.Now()
	if err := src.client.Migrate(bctx, vm, migration.Options{ProgressTimeout: 150, CompletionTimeoutPerGiB: 150}); err != nil {
		return src.withLog(err)
	}
	srcEnd, err := migrationEnd(bctx, src.client)
	if err != nil {
		return src.withLog(fmt.Errorf("source: %w", err))
	}
	r.addDur("migration.source_end", srcEnd.Sub(t0))
	dstEnd, err := migrationEnd(bctx, dst.client)
	if err != nil {
		return dst.withLog(fmt.Errorf("target: %w", err))
	}
	r.addDur("migration.target_end", dstEnd.Sub(t0))
	st, err := completedJob(src.logPath())
	if err != nil {
		return src.withLog(err)
	}
	r.add("migration.elapsed", st.Elapsed)
	r.add("migration.downtime", st.Downtime)
	r.add("migration.data", st.Data/(1<<20))
	e.logf("migration %d: source end %v, target end %v, libvirt: %.0f ms, downtime %.0f ms",
		i, srcEnd.Sub(t0).Round(time.Millisecond), dstEnd.Sub(t0).Round(time.Millisecond), st.Elapsed, st.Downtime)
	return nil
}

// openProxies plays virt-handler's proxies from src to dst: the libvirt
// connection (dst's daemon by KubeVirt's name for it), the memory and the
// disks (the sockets dst's QEMU and NBD server listen on).
func openProxies(src, dst *instance) ([]*migrationproxy.Stream, error) {
	e := src.env
	dir := src.lay.MigrationProxyDir()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if err := os.Chown(dir, e.owner.uid, e.owner.gid); err != nil {
		return nil, err
	}
	uid := string(src.vmi.UID)
	targets := map[int]string{
		0:                          filepath.Join(dst.libvirtSocketDir(), "virtqemud-sock"),
		layout.DirectMigrationPort: dst.lay.MigrationSocket(uid, layout.DirectMigrationPort),
		layout.BlockMigrationPort:  dst.lay.MigrationSocket(uid, layout.BlockMigrationPort),
	}
	var out []*migrationproxy.Stream
	for port, target := range targets {
		s, err := migrationproxy.Open(src.lay.MigrationSocket(uid, port), target, e.owner.uid, e.owner.gid, nil)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// migrationEnd polls a launcher's Domain for its migration's end; a
// failed migration is an error saying why.
func migrationEnd(ctx context.Context, c *cmdclient.Client) (time.Time, error) {
	for {
		d, exists, err := c.GetDomain(ctx)
		if err == nil && exists {
			if m := d.Spec.Metadata.KubeVirt.Migration; m != nil && m.EndTimestamp != nil {
				if m.Failed {
					return time.Time{}, fmt.Errorf("migration failed: %s", m.FailureReason)
				}
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no migration end: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// jobStats is libvirt's statistics of the completed migration, as the
// launcher logs them ("migration statistics").
type jobStats struct {
	Elapsed  float64 `json:"time_elapsed"` // ms
	Downtime float64 `json:"downtime"`     // ms
	Data     float64 `json:"data_total"`   // bytes
}

func completedJob(log string) (jobStats, error) {
	f, err := os.Open(log)
	if err != nil {
		return jobStats{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"msg":"migration statistics"`) {
			continue
		}
		var st jobStats
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			return st, fmt.Errorf("migration statistics: %w", err)
		}
		return st, nil
	}
	return jobStats{}, errors.New("no migration statistics in the source launcher's log")
}
