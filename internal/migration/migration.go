// Package migration holds live migration's pure decisions, as KubeVirt
// v1.8.2's launcher makes them (docs/migration.md): the options
// virt-handler sends, libvirt's flags and parameters, which disks are
// copied, how long a migration may take, and how the Domain's migration
// metadata moves from start to result. It touches nothing: the domain
// manager feeds it what it read and acts on what it answers.
package migration

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// Options is KubeVirt's cmdclient.MigrationOptions, as virt-handler sends
// it in MigrationRequest.options (JSON with the Go field names).
type Options struct {
	Bandwidth               resource.Quantity
	ProgressTimeout         int64 // seconds without progress before the abort
	CompletionTimeoutPerGiB int64 // seconds per GiB of data before the abort; 0: none
	// MaxDowntimeMs is the longest the guest may be paused at the
	// switch-over (v1.9; its handler sends 900 unless a policy says
	// otherwise). Only the stall detector applies it.
	MaxDowntimeMs     uint64
	UnsafeMigration   bool
	AllowAutoConverge bool
	AllowPostCopy     bool
	// ParallelMigrationThreads: nil for one connection.
	ParallelMigrationThreads *uint
	AllowWorkloadDisruption  bool
	// StallDetectorOptions, when set, replace the progress-timeout monitor
	// with v1.9's stall detector (feature gate MigrationStallDetection).
	StallDetectorOptions *StallDetectorOptions
	// Compression is the memory stream's compression method: nil, "" or
	// "none" for none, "zstd" (v1.9's only other value).
	Compression *string
}

// StallDetectorOptions are KubeVirt v1.9's cmdclient.StallDetectorOptions,
// the tuning of the stall detector (Stall).
type StallDetectorOptions struct {
	// StallMargin is the fraction by which the remaining data must drop
	// below the best reading older than StallProgressTimeout not to be a
	// stall (the handler sends the policy's percent / 100; default 0.04).
	StallMargin float64
	// StallProgressTimeout is the window, in seconds of the job's time,
	// over which progress is judged (default 40).
	StallProgressTimeout uint64
	// SwitchoverTimeout is how long, in seconds, a switch-over the
	// detector asked for may take before the completion deadline applies
	// again (default 60).
	SwitchoverTimeout uint64
	// EwmaAlpha weighs each new bandwidth sample in the moving average
	// (default 0.4).
	EwmaAlpha float64
	// PrecopyPossibleFactor is how far beyond MaxDowntimeMs an estimated
	// downtime may go and still be accepted (default 1.5).
	PrecopyPossibleFactor float64
	// PatienceWindowDecayFactor shrinks the wait before the next
	// relaxation of the best remaining data (default 0.5).
	PatienceWindowDecayFactor float64
	// SearchLocalMinima: act only at a reading near the best one (default
	// true).
	SearchLocalMinima bool
	// CompletionTimeoutFactor scales the completion limit into the
	// deadline the estimates are held to (default 2).
	CompletionTimeoutFactor float64
}

// ErrNoOptions is KubeVirt's answer to a request without options.
var ErrNoOptions = errors.New("migration options object not present in command server request")

// ParseOptions decodes MigrationRequest.options.
func ParseOptions(b []byte) (Options, error) {
	var o Options
	if len(b) == 0 {
		return o, ErrNoOptions
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("migration options: %w", err)
	}
	if o.Bandwidth.Sign() < 0 {
		return o, fmt.Errorf("migration options: Bandwidth %s is negative", o.Bandwidth.String())
	}
	if err := o.StallDetectorOptions.validate(); err != nil {
		return o, fmt.Errorf("migration options: StallDetectorOptions.%w", err)
	}
	return o, nil
}

// validate refuses what KubeVirt's policy admission refuses (the factors'
// ranges) and what would make the detector's arithmetic meaningless.
func (s *StallDetectorOptions) validate() error {
	if s == nil {
		return nil
	}
	for _, f := range []struct {
		name     string
		v        float64
		min, max float64
		openMin  bool
	}{
		{"StallMargin", s.StallMargin, 0, 1, false},
		{"EwmaAlpha", s.EwmaAlpha, 0, 1, true},
		{"PrecopyPossibleFactor", s.PrecopyPossibleFactor, 1, math.MaxFloat64, false},
		{"PatienceWindowDecayFactor", s.PatienceWindowDecayFactor, 0, 1, false},
		{"CompletionTimeoutFactor", s.CompletionTimeoutFactor, 1, math.MaxFloat64, false},
	} {
		switch {
		case math.IsNaN(f.v) || math.IsInf(f.v, 0):
			return fmt.Errorf("%s %v is not a number", f.name, f.v)
		case f.openMin && f.v <= f.min:
			return fmt.Errorf("%s %v must be greater than %g", f.name, f.v, f.min)
		case !f.openMin && f.v < f.min:
			return fmt.Errorf("%s %v must be at least %g", f.name, f.v, f.min)
		case f.v > f.max:
			return fmt.Errorf("%s %v must be at most %g", f.name, f.v, f.max)
		}
	}
	return nil
}

// compressionMethods are the methods KubeVirt's launcher asks libvirt for,
// by the name the options give.
var compressionMethods = map[string]string{"zstd": "zstd"}

// compression is the libvirt compression method the options ask for; ""
// for none (nil, "", "none", or a method KubeVirt does not know, which it
// ignores with a warning).
func (o Options) compression() string {
	if o.Compression == nil {
		return ""
	}
	return compressionMethods[*o.Compression]
}

// parallel says whether the migration uses several connections, and how
// many: never with post-copy (libvirt refuses the two together).
func (o Options) parallel() (bool, int) {
	if o.AllowPostCopy || o.ParallelMigrationThreads == nil {
		return false, 0
	}
	return true, int(*o.ParallelMigrationThreads)
}

// BandwidthMiB is the bandwidth cap in MiB/s, rounded as KubeVirt rounds
// it (anything below 1 MiB/s but above 0 is 1); 0: no cap.
func (o Options) BandwidthMiB() uint64 {
	b := o.Bandwidth.Value()
	switch {
	case b <= 0:
		return 0
	case b < 1<<20:
		return 1
	}
	return uint64(float64(b)/(1<<20) + 0.5)
}

// Flags are libvirt's migration flags: always live, peer to peer (the
// source daemon drives the destination through the proxy) and persistent
// on the destination; the source definition stays until the source pod
// goes, as KubeVirt leaves it.
func Flags(o Options, block, paused bool) libvirt.DomainMigrateFlags {
	f := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest
	if block {
		f |= libvirt.MigrateNonSharedInc
	}
	if o.UnsafeMigration {
		f |= libvirt.MigrateUnsafe
	}
	if o.AllowAutoConverge {
		f |= libvirt.MigrateAutoConverge
	}
	if o.AllowPostCopy {
		f |= libvirt.MigratePostcopy
	}
	if paused {
		f |= libvirt.MigratePaused
	}
	if ok, _ := o.parallel(); ok {
		f |= libvirt.MigrateParallel
	}
	if o.compression() != "" {
		f |= libvirt.MigrateCompressed
	}
	return f
}

// DestinationURI is the libvirt connection the source daemon opens to the
// target's: the proxy socket of the VMI uid in the source pod, which
// virt-handler pipes to the target pod's daemon; session mode for a
// non-root VMI.
func DestinationURI(l layout.Layout, uid string, root bool) string {
	mode := "session"
	if root {
		mode = "system"
	}
	return fmt.Sprintf("qemu+unix:///%s?socket=%s", mode, l.MigrationSocket(uid, 0))
}

// Request is what the migration call is made of (Params renders it).
type Request struct {
	Layout layout.Layout
	UID    string
	// XML is the domain's migratable XML (DomainXMLMigratable), for the
	// destination's live and persistent definitions.
	XML string
	// Name is the destination domain's name, <namespace>_<name>.
	Name string
	// Disks are the target devices whose contents are copied.
	Disks   []string
	Options Options
	// LibvirtVersion is the source daemon's (major*1e6+minor*1e3+micro):
	// parameters it does not know make it refuse the whole call.
	LibvirtVersion uint64
}

// detectZeroesSince is the first libvirt that knows
// migrate_disks_detect_zeroes, which KubeVirt sends.
const detectZeroesSince = 10_009_000

// Params are the typed parameters of the migration call: the memory
// stream's and the disks' unix sockets in the source pod (the same paths
// the destination's QEMU and NBD server listen on in the target pod), the
// XML, the name, the bandwidth and the connections when set.
func Params(r Request) []libvirt.TypedParam {
	str := func(field, v string) libvirt.TypedParam {
		return libvirt.TypedParam{Field: field, Value: *libvirt.NewTypedParamValueString(v)}
	}
	ps := []libvirt.TypedParam{
		str(libvirt.MigrateParamURI, "unix://"+r.Layout.MigrationSocket(r.UID, layout.DirectMigrationPort)),
		str(libvirt.MigrateParamDestXML, r.XML),
		str(libvirt.MigrateParamPersistXML, r.XML),
		str(libvirt.MigrateParamDestName, r.Name),
	}
	if mib := r.Options.BandwidthMiB(); mib > 0 {
		ps = append(ps, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidth, Value: *libvirt.NewTypedParamValueUllong(mib)})
	}
	if ok, n := r.Options.parallel(); ok {
		ps = append(ps, libvirt.TypedParam{Field: libvirt.MigrateParamParallelConnections, Value: *libvirt.NewTypedParamValueInt(int32(n))})
	}
	if c := r.Options.compression(); c != "" {
		ps = append(ps, str(libvirt.MigrateParamCompression, c))
	}
	if len(r.Disks) > 0 {
		for _, d := range r.Disks {
			ps = append(ps, str(libvirt.MigrateParamMigrateDisks, d))
		}
		ps = append(ps, str(libvirt.MigrateParamDisksURI, "unix://"+r.Layout.MigrationSocket(r.UID, layout.BlockMigrationPort)))
		if r.LibvirtVersion >= detectZeroesSince {
			for _, d := range r.Disks {
				ps = append(ps, str(libvirt.MigrateParamMigrateDisksDetectZeroes, d))
			}
		}
	}
	return ps
}

// CopyDisks lists the target devices of the domain's disks whose contents
// are copied (KubeVirt's getDiskTargetsForMigration): no CD-ROM, no
// read-only disk unless the launcher generated it (its target pod makes an
// empty one of the same size), only files and block devices, and no
// shared volume (a PVC, DataVolume or shared hostDisk not listed in
// status.migratedVolumes: both pods see the same one).
func CopyDisks(vmi *v1.VirtualMachineInstance, disks []libvirtxml.DomainDisk) []string {
	migrated := map[string]bool{}
	for _, mv := range vmi.Status.MigratedVolumes {
		migrated[mv.VolumeName] = true
	}
	shared, generated := map[string]bool{}, map[string]bool{}
	for _, vol := range vmi.Spec.Volumes {
		s := vol.VolumeSource
		switch {
		case s.PersistentVolumeClaim != nil || s.DataVolume != nil:
			shared[vol.Name] = !migrated[vol.Name]
		case s.HostDisk != nil:
			shared[vol.Name] = !migrated[vol.Name] && s.HostDisk.Shared != nil && *s.HostDisk.Shared
		case s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.ServiceAccount != nil ||
			s.CloudInitNoCloud != nil || s.CloudInitConfigDrive != nil || s.ContainerDisk != nil:
			generated[vol.Name] = true
		}
	}
	var out []string
	for _, d := range disks {
		alias := ""
		if d.Alias != nil {
			alias = domainjson.NewAlias(d.Alias.Name).Name
		}
		switch {
		case d.Device == "cdrom":
		case d.ReadOnly != nil && !generated[alias]:
		case d.Source == nil || (d.Source.File == nil && d.Source.Block == nil):
		case shared[alias]:
		case d.Target == nil:
		default:
			out = append(out, d.Target.Dev)
		}
	}
	return out
}

// DataSize is what a migration moves, in whole GB (KubeVirt's
// getVMIMigrationDataSize): the guest memory (the memory request, or
// memory.guest when set), plus the ephemeral disks for a block migration
// (ephemeral bytes), plus the migrated volumes.
func DataSize(vmi *v1.VirtualMachineInstance, ephemeral int64) int64 {
	var mem resource.Quantity
	if q, ok := vmi.Spec.Domain.Resources.Requests[k8sv1.ResourceMemory]; ok {
		mem = q.DeepCopy()
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		mem = m.Guest.DeepCopy()
	}
	if vmi.IsBlockMigration() {
		mem.Add(*resource.NewScaledQuantity(ephemeral, 0))
	}
	for _, mv := range vmi.Status.MigratedVolumes {
		if mv.SourcePVCInfo != nil {
			if q, ok := mv.SourcePVCInfo.Capacity[k8sv1.ResourceStorage]; ok {
				mem.Add(q)
			}
		}
	}
	return mem.ScaledValue(resource.Giga)
}

// Acceptable is how long the migration may take before it is aborted:
// CompletionTimeoutPerGiB for each GB of DataSize; 0: no limit.
func Acceptable(o Options, sizeGB int64) time.Duration {
	return time.Duration(o.CompletionTimeoutPerGiB*sizeGB) * time.Second
}

// MigrationUID is the migration a VMI names: migrationState.migrationUID,
// or its source state's in a decentralized migration.
func MigrationUID(vmi *v1.VirtualMachineInstance) (string, error) {
	ms := vmi.Status.MigrationState
	if ms == nil {
		return "", errors.New("cannot migrate VMI until migrationState is ready")
	}
	if ms.SourceState != nil && ms.SourceState.MigrationUID != "" {
		return string(ms.SourceState.MigrationUID), nil
	}
	return string(ms.MigrationUID), nil
}

// Start decides a migration's start (KubeVirt's
// initializeMigrationMetadata) from the metadata now: next is the new
// metadata; running says the same migration runs already (nothing to do);
// one that ended is never run again.
func Start(now *domainjson.MigrationMetadata, uid string, at time.Time) (next *domainjson.MigrationMetadata, running bool, err error) {
	if now != nil && now.UID == uid {
		if now.EndTimestamp == nil {
			return now, true, nil
		}
		return now, false, fmt.Errorf("migration job %s already executed, finished at %s, failed: %t, abortStatus: %s",
			now.UID, now.EndTimestamp.UTC().Format(time.RFC3339), now.Failed, now.AbortStatus)
	}
	t := metav1.NewTime(at)
	return &domainjson.MigrationMetadata{UID: uid, StartTimestamp: &t, Mode: string(v1.MigrationPreCopy)}, false, nil
}

// ErrAbortInProgress is Result's answer when an abort is under way and
// the result is not its end.
var ErrAbortInProgress = errors.New("migration abort is in progress")

// Result records a migration's outcome (KubeVirt's
// setMigrationResultHelper): failed with reason, and the abort status
// ("" when none). An end already recorded stays; the end is recorded
// unless an abort is still in progress or failed.
func Result(now *domainjson.MigrationMetadata, failed bool, reason string, abort v1.MigrationAbortStatus, at time.Time) (*domainjson.MigrationMetadata, error) {
	if now == nil {
		return nil, nil // nothing to report
	}
	inProgress := now.AbortStatus == string(v1.MigrationAbortInProgress)
	if abort == v1.MigrationAbortInProgress && inProgress {
		return now, ErrAbortInProgress
	}
	if inProgress && !slices.Contains([]v1.MigrationAbortStatus{v1.MigrationAbortFailed, v1.MigrationAbortSucceeded}, abort) {
		return now, ErrAbortInProgress
	}
	if now.EndTimestamp != nil {
		return now, nil
	}
	next := *now
	if failed {
		next.Failed, next.FailureReason = true, reason
	}
	next.AbortStatus = string(abort)
	if abort == "" || abort == v1.MigrationAbortSucceeded {
		t := metav1.NewTime(at)
		next.EndTimestamp = &t
	}
	return &next, nil
}

// WithoutPostCopy is o with post-copy not allowed: libvirt's flag is not
// set, and the monitor's workload-disruption assist pauses the guest.
func (o Options) WithoutPostCopy() Options {
	o.AllowPostCopy = false
	return o
}

// Facts are what the source knows, when a migration starts, of its
// domain and of the QEMU and libvirt both pods run (the same image).
type Facts struct {
	Paused bool
	// QEMUVersion is the hypervisor's version as libvirt gives it
	// (major*1e6+minor*1e3+micro); 0: unknown.
	QEMUVersion uint64
	// LibvirtVersion is the daemon's, the same way; 0: unknown.
	LibvirtVersion uint64
}

// multifdPeekSince is the first QEMU whose incoming side tells a parallel
// migration's channels apart by their first bytes. QEMU 7.2 takes the
// first connection it accepts for the main stream and every later one for
// a memory channel. Virt-handler's proxies connect each connection they
// accept on their own, so the order is not kept, and a channel arriving
// first fails the migration ("multifd: received packet magic 5145564d
// expected 11223344" in the target's QEMU log; "client socket is closed"
// at the source). Seen here under load through proxies shaped like
// virt-handler's.
const multifdPeekSince = 8_000_000

// multifdCompressionSince is the first libvirt that takes zlib or zstd as
// a migration's compression method (QEMU's multifd-compression); older
// ones know only "mt" and "xbzrle" and refuse the whole call.
const multifdCompressionSince = 9_004_000

// ForDomain is the options a migration runs with, given the facts, and why
// they differ from o (nothing when they do not):
//   - A paused domain is migrated without post-copy: libvirt refuses the
//     two together ("post-copy migration is not supported with non-live or
//     paused migration"), which would fail the whole migration as
//     KubeVirt's does, and a paused guest's memory does not change, so
//     pre-copy converges.
//   - With a QEMU older than multifdPeekSince the memory goes over one
//     connection instead of ParallelMigrationThreads (KubeVirt asks for 8
//     by default): its channels could be taken for one another.
//   - Compression is dropped when the method is not one KubeVirt knows (as
//     KubeVirt drops it), when the daemon is older than
//     multifdCompressionSince, or when the memory does not go over
//     parallel connections (zstd compresses multifd channels only): libvirt
//     would refuse the whole migration.
func ForDomain(o Options, f Facts) (Options, []string) {
	var why []string
	if f.Paused && o.AllowPostCopy {
		o = o.WithoutPostCopy()
		why = append(why, "the domain is paused: libvirt refuses post-copy for a paused migration, and pre-copy converges for a guest that does not run")
	}
	if ok, n := o.parallel(); ok && f.QEMUVersion != 0 && f.QEMUVersion < multifdPeekSince {
		o.ParallelMigrationThreads = nil
		why = append(why, fmt.Sprintf("one connection instead of %d parallel ones: QEMU %s takes the first connection it accepts for the main stream, and the migration proxies do not keep the order (QEMU 8.0 and later tell the channels apart)", n, versionString(f.QEMUVersion)))
	}
	if o.Compression != nil {
		asked := *o.Compression
		parallel, _ := o.parallel()
		switch {
		case asked == "" || asked == "none":
			o.Compression = nil
		case o.compression() == "":
			o.Compression = nil
			why = append(why, fmt.Sprintf("no compression: method %q is not one KubeVirt knows (zstd)", asked))
		case f.LibvirtVersion != 0 && f.LibvirtVersion < multifdCompressionSince:
			o.Compression = nil
			why = append(why, fmt.Sprintf("no compression: libvirt %s knows only the mt and xbzrle methods, not %s (9.4 and later)", versionString(f.LibvirtVersion), asked))
		case !parallel:
			o.Compression = nil
			why = append(why, fmt.Sprintf("no compression: %s compresses parallel connections only, and this migration uses one", asked))
		}
	}
	return o, why
}

// tcgDirtyLogFixedSince is the first QEMU whose migration keeps an
// emulated (TCG) guest's memory whole. Before it, clearing the migration's
// dirty bitmap for whole words left TCG's TLB as it was, so the guest's
// stores through it were not logged until the TLB was next flushed, and a
// page so written last before the switch-over went to the target stale
// (QEMU commit 03bfc2188f, "physmem: Fix migration dirty bitmap coherency
// with TCG memory access", in 9.0). Seen here with QEMU 7.2: a guest
// rewriting its memory while the machine was busy found 338 stale pages
// after its migration (TestMigrationMemoryIntegrity), and guests so
// migrated crashed ("list_del corruption").
const tcgDirtyLogFixedSince = 9_000_000

// Hazards are what may go wrong with a migration of a domain of this type
// (libvirt's domain type: "kvm", or "qemu" for emulation) on this QEMU that
// the launcher cannot prevent; the migration goes on (KubeVirt's launcher
// migrates such a domain the same way), and the source says so in its log.
func Hazards(domainType string, qemuVersion uint64) []string {
	var h []string
	if domainType == "qemu" && qemuVersion != 0 && qemuVersion < tcgDirtyLogFixedSince {
		h = append(h, fmt.Sprintf("the guest is emulated (TCG) and QEMU %s can lose the guest's last memory writes before the switch-over (fixed in QEMU 9.0, commit 03bfc2188f): a guest writing its memory fast may crash or misbehave in the target", versionString(qemuVersion)))
	}
	return h
}

// versionString renders libvirt's major*1e6+minor*1e3+micro.
func versionString(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1_000_000, v/1000%1000, v%1000)
}

// PostCopyUnavailable says whether a migration failed because the
// target's QEMU cannot do post-copy: it checks for userfaultfd when
// libvirt enables the postcopy-ram capability there, and the kernel
// refuses userfaultfd to an unprivileged process unless
// vm.unprivileged_userfaultfd=1 (QEMU 7.2 does not use /dev/userfaultfd).
// The failure comes before anything is sent: the migration can run again
// without post-copy.
func PostCopyUnavailable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Postcopy is not supported")
}
