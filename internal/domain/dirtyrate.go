package domain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// The dirty rate is KubeVirt's (manager.go GetDomainDirtyRateStats,
// cli/libvirt.go GetDomainDirtyRate): QEMU measures it when asked, by
// page sampling over one second (virDomainStartDirtyRateCalc), and the
// answer is the dirtyrate group of the bulk stats once QEMU reports it
// measured, kept for 3 s so that scrapes close together share one
// measurement.
const (
	dirtyRatePeriod = time.Second     // KubeVirt's calculation time
	dirtyRateMaxAge = 3 * time.Second // KubeVirt's cache period
	// dirtyRateSettle is how long after the period QEMU may take to
	// report the measurement (KubeVirt's retry window).
	dirtyRateSettle = time.Second
	// dirtyRateTimeout bounds one whole measurement, libvirt calls
	// included, whatever the caller's deadline.
	dirtyRateTimeout = 10 * time.Second
)

// ErrNoDomain is the answer of calls that need a running (or paused)
// domain when there is none.
var ErrNoDomain = errors.New("no running or paused domain")

// DirtyRate returns the domain's memory dirty rate, at most
// dirtyRateMaxAge old. MegabytesPerSecondSet is false when QEMU gave no
// figure.
func (m *Manager) DirtyRate(ctx context.Context) (StatsDirtyRate, error) {
	return m.stats.dirtyRate.get(ctx, nil)
}

// measureDirtyRate starts a measurement, waits for its period and reads
// the result. A measurement that does not start (one under way already,
// from a caller that gave up) is read all the same, as KubeVirt does;
// the start's error is reported only when no measurement comes.
//
// KubeVirt reads the stats it took before starting the measurement, so
// it answers the previous measurement (and fails the first); this reads
// the one it started.
func (src *statsSource) measureDirtyRate(ctx context.Context) (StatsDirtyRate, error) {
	ctx, cancel := context.WithTimeout(ctx, dirtyRateTimeout)
	defer cancel()
	l, d, ok, err := src.lookup(ctx)
	if err != nil {
		return StatsDirtyRate{}, err
	}
	if !ok {
		return StatsDirtyRate{}, ErrNoDomain
	}
	startErr := bounded.Call(ctx, "start dirty rate calculation of "+d.Name, func() error {
		return l.DomainStartDirtyRateCalc(d, int32(dirtyRatePeriod/time.Second), uint32(libvirt.DomainDirtyrateModePageSampling))
	})
	if startErr != nil {
		if ctx.Err() != nil {
			return StatsDirtyRate{}, startErr
		}
		src.log.Warn("dirty rate calculation did not start", "err", startErr)
	}
	select {
	case <-time.After(dirtyRatePeriod):
	case <-ctx.Done():
		return StatsDirtyRate{}, fmt.Errorf("dirty rate of %s: %w", d.Name, ctx.Err())
	}
	settle, cancelSettle := context.WithTimeout(ctx, dirtyRateSettle)
	defer cancelSettle()
	var dr StatsDirtyRate
	var readErr error
	measured, err := bounded.PollUntil(settle, func() (bool, error) {
		dr, readErr = readDirtyRate(settle, l, d)
		// A failed read is retried, as KubeVirt does, until the window ends.
		return readErr == nil && dr.CalcStatus == int(libvirt.DomainDirtyrateMeasured), nil
	})
	switch {
	case err != nil:
		return StatsDirtyRate{}, err
	case measured:
		return dr, nil
	case readErr != nil:
		return StatsDirtyRate{}, readErr
	case startErr != nil:
		return StatsDirtyRate{}, fmt.Errorf("dirty rate calculation status is %s: %w",
			libvirt.DomainDirtyRateStatus(dr.CalcStatus), startErr)
	default:
		return StatsDirtyRate{}, fmt.Errorf("dirty rate calculation status is %s %v after its %v period",
			libvirt.DomainDirtyRateStatus(dr.CalcStatus), dirtyRateSettle, dirtyRatePeriod)
	}
}

// readDirtyRate reads the dirtyrate group of the domain's bulk stats;
// a record without the calculation's status is an error.
func readDirtyRate(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) (StatsDirtyRate, error) {
	var dr StatsDirtyRate
	err := bounded.Call(ctx, "dirty rate of "+d.Name, func() error {
		recs, err := l.ConnectGetAllDomainStats([]libvirt.Domain{d}, uint32(libvirt.DomainStatsDirtyrate),
			uint32(libvirt.ConnectGetAllDomainsStatsRunning|libvirt.ConnectGetAllDomainsStatsPaused))
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return ErrNoDomain
		}
		dr = dirtyRateFromParams(recs[0].Params)
		if !dr.CalcStatusSet {
			return errors.New("the calculation status is not set")
		}
		return nil
	})
	return dr, err
}

// dirtyRateFromParams is the dirtyrate group of a bulk stats record, as
// libvirt-go and KubeVirt's statsconv convert it.
func dirtyRateFromParams(params []libvirt.TypedParam) StatsDirtyRate {
	var dr StatsDirtyRate
	for _, p := range params {
		u, ok := paramUint(p)
		if !ok {
			continue
		}
		switch p.Field {
		case libvirt.DomainStatsDirtyrateCalcStatus:
			dr.CalcStatus, dr.CalcStatusSet = int(int32(u)), true
		case libvirt.DomainStatsDirtyrateCalcStartTime:
			dr.CalcStartTime, dr.CalcStartTimeSet = int64(u), true
		case libvirt.DomainStatsDirtyrateCalcPeriod:
			dr.CalcPeriod, dr.CalcPeriodSet = int(int32(u)), true
		case libvirt.DomainStatsDirtyrateMegabytesPerSecond:
			dr.MegabytesPerSecond, dr.MegabytesPerSecondSet = int64(u), true
		}
	}
	return dr
}
