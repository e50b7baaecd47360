package vmi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"

	"github.com/google/uuid"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"
)

// Limits Validate enforces. Where KubeVirt has a limit we keep it; where it
// has none we pick one that no real guest reaches and that keeps absurd
// input away from QEMU and the disk-preparation code.
const (
	// MaxNameLength bounds metadata.name: the launcher builds socket paths,
	// libvirt domain names (<namespace>_<name>) and NVRAM file names from it.
	MaxNameLength = 63
	// MaxGuestMemoryBytes bounds guest memory (16 TiB).
	MaxGuestMemoryBytes int64 = 16 << 40
	// MaxVCPUs bounds sockets×cores×threads, booted and hotplug maximum
	// (KubeVirt's own bound when it derives maxSockets).
	MaxVCPUs = maxVCPUs
	// MaxDiskCapacityBytes bounds emptyDisk and hostDisk capacities (1 PiB).
	MaxDiskCapacityBytes int64 = 1 << 50
	// MaxCloudInitBytes bounds each of userData and networkData (decoded, for
	// the base64 forms). KubeVirt's webhook allows only 2 KiB inline and
	// expects larger data in a Secret; standalone there is no Secret to point
	// at, and the NoCloud/ConfigDrive ISO has no small limit, so we allow
	// 256 KiB.
	MaxCloudInitBytes = 256 << 10
	// maxItems is KubeVirt's arrayLenMax for disks, volumes, interfaces and
	// networks.
	maxItems = 256
	// maxSerialLength is KubeVirt's bound on a disk serial.
	maxSerialLength = 256
	// minSpinlockRetries is the smallest Hyper-V spinlock retry count KubeVirt
	// accepts.
	minSpinlockRetries = 4096
	// reservedMasqueradeMAC belongs to the in-pod bridge of the masquerade
	// binding.
	reservedMasqueradeMAC = "02:00:00:00:00:00"
)

var (
	// KubeVirt's rule for interface (and so network) names.
	ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// KubeVirt's rule for a disk serial.
	serialRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)
	// PCI address dddd:bb:ss.f, as KubeVirt's hardware.ParsePciAddress reads it.
	pciAddressRE = regexp.MustCompile(`^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$`)
)

var validInterfaceModels = map[string]bool{
	"": true, "virtio": true, "e1000": true, "e1000e": true, "ne2k_pci": true, "pcnet": true, "rtl8139": true,
}

// Validate checks a defaulted VMI. All problems are returned, joined; each
// is a *FieldError naming the field path and the reason.
func Validate(vmi *v1.VirtualMachineInstance) error {
	if vmi == nil {
		return errors.New("no VMI")
	}
	v := &validator{vmi: vmi, spec: &vmi.Spec}
	v.metadata()
	v.architecture()
	v.cpu()
	v.memory()
	v.resources()
	v.firmware()
	v.features()
	v.volumes()
	v.disks()
	v.filesystems()
	v.networks()
	v.interfaces()
	v.bootOrders()
	v.inputs()
	v.clock()
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		v.fail("spec.terminationGracePeriodSeconds", "must not be negative, got %d", *g)
	}
	return errors.Join(v.errs...)
}

type validator struct {
	vmi  *v1.VirtualMachineInstance
	spec *v1.VirtualMachineInstanceSpec
	errs []error
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, fieldErr(path, format, args...))
}

func idx(base string, i int, field string) string {
	p := fmt.Sprintf("%s[%d]", base, i)
	if field != "" {
		p += "." + field
	}
	return p
}

func (v *validator) metadata() {
	name := v.vmi.Name
	switch {
	case name == "":
		v.fail("metadata.name", "required")
	case len(name) > MaxNameLength:
		v.fail("metadata.name", "%q is %d characters, at most %d allowed", truncate(name, 80), len(name), MaxNameLength)
	default:
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			v.fail("metadata.name", "%q is not a valid name: %s", name, msg)
		}
	}
	if ns := v.vmi.Namespace; ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			v.fail("metadata.namespace", "%q is not a valid namespace: %s", truncate(ns, 80), msg)
		}
	}
	if v.vmi.UID == "" {
		v.fail("metadata.uid", "required (SetDefaults derives one from namespace and name)")
	}
}

func (v *validator) architecture() {
	switch v.spec.Architecture {
	case "", "amd64", "arm64", "s390x":
	default:
		v.fail("spec.architecture", "%q is not supported: want amd64, arm64 or s390x", v.spec.Architecture)
	}
}

func (v *validator) cpu() {
	cpu := v.spec.Domain.CPU
	if cpu == nil {
		return
	}
	const p = "spec.domain.cpu"
	one := func(n uint32) uint64 {
		if n == 0 {
			return 1
		}
		return uint64(n)
	}
	for _, f := range []struct {
		name string
		val  uint32
	}{{"sockets", cpu.Sockets}, {"cores", cpu.Cores}, {"threads", cpu.Threads}, {"maxSockets", cpu.MaxSockets}} {
		if f.val > MaxVCPUs {
			v.fail(p+"."+f.name, "%d is more than %d", f.val, MaxVCPUs)
		}
	}
	perSocket := one(cpu.Cores) * one(cpu.Threads)
	if n := one(cpu.Sockets) * perSocket; n > MaxVCPUs {
		v.fail(p, "sockets×cores×threads is %d vCPUs, more than %d", n, MaxVCPUs)
	}
	if cpu.MaxSockets != 0 {
		if cpu.MaxSockets < cpu.Sockets {
			v.fail(p+".maxSockets", "%d is less than sockets (%d)", cpu.MaxSockets, cpu.Sockets)
		}
		if n := uint64(cpu.MaxSockets) * perSocket; n > MaxVCPUs {
			v.fail(p+".maxSockets", "maxSockets×cores×threads is %d vCPUs, more than %d", n, MaxVCPUs)
		}
	}
	for i, f := range cpu.Features {
		if f.Name == "" {
			v.fail(idx(p+".features", i, "name"), "required")
		}
		switch f.Policy {
		case "", "force", "require", "optional", "disable", "forbid":
		default:
			v.fail(idx(p+".features", i, "policy"), "%q is not one of force, require, optional, disable, forbid", f.Policy)
		}
	}
	if cpu.IsolateEmulatorThread && !cpu.DedicatedCPUPlacement {
		v.fail(p+".isolateEmulatorThread", "requires dedicatedCpuPlacement")
	}
}

func (v *validator) memory() {
	const p = "spec.domain.memory"
	m := v.spec.Domain.Memory
	if m == nil || m.Guest == nil {
		v.fail(p+".guest", "required: set memory.guest or resources.requests.memory")
		return
	}
	guest := boundedValue(*m.Guest, MaxGuestMemoryBytes+1)
	switch {
	case guest > MaxGuestMemoryBytes:
		v.fail(p+".guest", "%s is more than the %d bytes (16Ti) allowed", m.Guest.String(), MaxGuestMemoryBytes)
	case m.Guest.Sign() <= 0:
		v.fail(p+".guest", "must be positive, got %s", m.Guest.String())
	}
	if m.MaxGuest != nil {
		switch {
		case m.MaxGuest.Cmp(*m.Guest) < 0:
			v.fail(p+".maxGuest", "%s is less than guest (%s)", m.MaxGuest.String(), m.Guest.String())
		case m.MaxGuest.Cmp(*resource.NewQuantity(MaxGuestMemoryBytes, resource.BinarySI)) > 0:
			v.fail(p+".maxGuest", "%s is more than the %d bytes (16Ti) allowed", m.MaxGuest.String(), MaxGuestMemoryBytes)
		}
	}
	if hp := m.Hugepages; hp != nil {
		q, err := resource.ParseQuantity(hp.PageSize)
		switch {
		case hp.PageSize == "":
			v.fail(p+".hugepages.pageSize", "required")
		case err != nil:
			v.fail(p+".hugepages.pageSize", "%q is not a size: %v", truncate(hp.PageSize, 40), err)
		default:
			size := boundedValue(q, 32<<30)
			if size < 4096 || size > 16<<30 || size&(size-1) != 0 {
				v.fail(p+".hugepages.pageSize", "%q is not a power of two between 4Ki and 16Gi", hp.PageSize)
			} else if guest > 0 && guest%size != 0 {
				v.fail(p+".guest", "%s is not a multiple of the hugepage size %s", m.Guest.String(), hp.PageSize)
			}
		}
	}
}

func (v *validator) resources() {
	const p = "spec.domain.resources"
	r := v.spec.Domain.Resources
	for _, list := range []struct {
		name string
		rl   k8sv1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for name, q := range list.rl {
			if q.Sign() < 0 {
				v.fail(fmt.Sprintf("%s.%s[%s]", p, list.name, name), "must not be negative, got %s", q.String())
			}
		}
	}
	if q, ok := r.Requests[k8sv1.ResourceCPU]; ok && boundedValue(q, MaxVCPUs+1) > MaxVCPUs {
		v.fail(p+".requests[cpu]", "%s is more than %d CPUs", q.String(), MaxVCPUs)
	}
	if q, ok := r.Limits[k8sv1.ResourceCPU]; ok && boundedValue(q, MaxVCPUs+1) > MaxVCPUs {
		v.fail(p+".limits[cpu]", "%s is more than %d CPUs", q.String(), MaxVCPUs)
	}
	for _, res := range []k8sv1.ResourceName{k8sv1.ResourceCPU, k8sv1.ResourceMemory} {
		req, okR := r.Requests[res]
		lim, okL := r.Limits[res]
		if okR && okL && req.Cmp(lim) > 0 {
			v.fail(fmt.Sprintf("%s.requests[%s]", p, res), "%s is more than the limit %s", req.String(), lim.String())
		}
	}
}

func (v *validator) firmware() {
	fw := v.spec.Domain.Firmware
	if fw == nil {
		return
	}
	const p = "spec.domain.firmware"
	if fw.UUID != "" {
		if _, err := uuid.Parse(string(fw.UUID)); err != nil {
			v.fail(p+".uuid", "%q is not a UUID", truncate(string(fw.UUID), 60))
		}
	}
	if bl := fw.Bootloader; bl != nil {
		if bl.BIOS != nil && bl.EFI != nil {
			v.fail(p+".bootloader", "set either bios or efi, not both")
		}
		if efi := bl.EFI; efi != nil && (efi.SecureBoot == nil || *efi.SecureBoot) {
			// KubeVirt: secure boot needs SMM (it is not switched on for you).
			smm := v.spec.Domain.Features
			if smm == nil || smm.SMM == nil || (smm.SMM.Enabled != nil && !*smm.SMM.Enabled) {
				v.fail(p+".bootloader.efi.secureBoot", "secure boot requires spec.domain.features.smm to be enabled")
			}
		}
	}
	if kb := fw.KernelBoot; kb != nil {
		kp := p + ".kernelBoot"
		c := kb.Container
		if c == nil {
			if kb.KernelArgs != "" {
				v.fail(kp+".kernelArgs", "set without a kernel (kernelBoot.container)")
			}
			return
		}
		if c.Image == "" {
			v.fail(kp+".container.image", "required")
		}
		if c.KernelPath == "" && c.InitrdPath == "" {
			v.fail(kp+".container", "needs kernelPath or initrdPath")
		}
		if kb.KernelArgs != "" && c.KernelPath == "" {
			v.fail(kp+".kernelArgs", "set without kernelPath")
		}
		v.absPath(kp+".container.kernelPath", c.KernelPath, false)
		v.absPath(kp+".container.initrdPath", c.InitrdPath, false)
	}
}

// absPath requires an absolute, clean path without relative components.
func (v *validator) absPath(field, p string, required bool) {
	if p == "" {
		if required {
			v.fail(field, "required")
		}
		return
	}
	if p == "/" {
		v.fail(field, "must not be the root directory")
		return
	}
	if !strings.HasPrefix(p, "/") || path.Clean(p) != strings.TrimSuffix(p, "/") || strings.ContainsRune(p, 0) {
		v.fail(field, "%q must be an absolute path without relative components", truncate(p, 80))
	}
}

func (v *validator) features() {
	f := v.spec.Domain.Features
	if f == nil || f.Hyperv == nil {
		return
	}
	const p = "spec.domain.features.hyperv"
	h := f.Hyperv
	on := func(fs *v1.FeatureState) bool { return fs != nil && (fs.Enabled == nil || *fs.Enabled) }
	needs := func(name string, enabled bool, needName string, need *v1.FeatureState) {
		if enabled && !on(need) {
			v.fail(p+"."+name, "requires %s.%s, which is disabled", p, needName)
		}
	}
	needs("synic", on(h.SyNIC), "vpindex", h.VPIndex)
	needs("ipi", on(h.IPI), "vpindex", h.VPIndex)
	needs("tlbflush", h.TLBFlush != nil && on(&h.TLBFlush.FeatureState), "vpindex", h.VPIndex)
	needs("synictimer", h.SyNICTimer != nil && on(&h.SyNICTimer.FeatureState), "synic", h.SyNIC)
	needs("evmcs", on(h.EVMCS), "vapic", h.VAPIC)
	if s := h.Spinlocks; s != nil && on(&s.FeatureState) && s.Retries != nil && *s.Retries < minSpinlockRetries {
		v.fail(p+".spinlocks.spinlocks", "%d is less than %d", *s.Retries, minSpinlockRetries)
	}
	if vid := h.VendorID; vid != nil && on(&vid.FeatureState) && len(vid.VendorID) > 12 {
		v.fail(p+".vendorid.vendorid", "%q is longer than 12 characters", truncate(vid.VendorID, 40))
	}
}

func volumeSourceCount(vol v1.Volume) int {
	s := vol.VolumeSource
	n := 0
	for _, set := range []bool{
		s.HostDisk != nil, s.PersistentVolumeClaim != nil, s.CloudInitNoCloud != nil,
		s.CloudInitConfigDrive != nil, s.Sysprep != nil, s.ContainerDisk != nil, s.Ephemeral != nil,
		s.EmptyDisk != nil, s.DataVolume != nil, s.ConfigMap != nil, s.Secret != nil,
		s.DownwardAPI != nil, s.ServiceAccount != nil, s.DownwardMetrics != nil, s.MemoryDump != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

func (v *validator) volumes() {
	const p = "spec.volumes"
	vols := v.spec.Volumes
	if len(vols) > maxItems {
		v.fail(p, "%d volumes, at most %d allowed", len(vols), maxItems)
	}
	seen := map[string]int{}
	for i, vol := range vols {
		vp := idx(p, i, "")
		v.dnsLabel(vp+".name", vol.Name)
		if j, dup := seen[vol.Name]; dup && vol.Name != "" {
			v.fail(vp+".name", "%q is already the name of %s", vol.Name, idx(p, j, ""))
		} else {
			seen[vol.Name] = i
		}
		switch n := volumeSourceCount(vol); {
		case n == 0:
			v.fail(vp, "no volume source set (e.g. containerDisk, emptyDisk, cloudInitNoCloud, persistentVolumeClaim)")
			continue
		case n > 1:
			v.fail(vp, "%d volume sources set; want exactly one", n)
			continue
		}
		s := vol.VolumeSource
		switch {
		case s.ContainerDisk != nil:
			if s.ContainerDisk.Image == "" {
				v.fail(vp+".containerDisk.image", "required")
			}
			v.absPath(vp+".containerDisk.path", s.ContainerDisk.Path, false)
		case s.HostDisk != nil:
			hd := s.HostDisk
			v.absPath(vp+".hostDisk.path", hd.Path, true)
			switch hd.Type {
			case v1.HostDiskExists:
			case v1.HostDiskExistsOrCreate:
				if hd.Capacity.Sign() <= 0 {
					v.fail(vp+".hostDisk.capacity", "required and positive for type DiskOrCreate")
				}
			case "":
				v.fail(vp+".hostDisk.type", "required: Disk or DiskOrCreate")
			default:
				v.fail(vp+".hostDisk.type", "%q is not Disk or DiskOrCreate", truncate(string(hd.Type), 40))
			}
			v.capacity(vp+".hostDisk.capacity", hd.Capacity, false)
		case s.EmptyDisk != nil:
			v.capacity(vp+".emptyDisk.capacity", s.EmptyDisk.Capacity, true)
		case s.CloudInitNoCloud != nil:
			c := s.CloudInitNoCloud
			v.cloudInit(vp+".cloudInitNoCloud", c.UserData, c.UserDataBase64, c.UserDataSecretRef != nil,
				c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef != nil)
		case s.CloudInitConfigDrive != nil:
			c := s.CloudInitConfigDrive
			v.cloudInit(vp+".cloudInitConfigDrive", c.UserData, c.UserDataBase64, c.UserDataSecretRef != nil,
				c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef != nil)
		case s.PersistentVolumeClaim != nil:
			if s.PersistentVolumeClaim.ClaimName == "" {
				v.fail(vp+".persistentVolumeClaim.claimName", "required")
			}
		case s.Ephemeral != nil:
			if s.Ephemeral.PersistentVolumeClaim == nil || s.Ephemeral.PersistentVolumeClaim.ClaimName == "" {
				v.fail(vp+".ephemeral.persistentVolumeClaim.claimName", "required")
			}
		case s.DataVolume != nil:
			if s.DataVolume.Name == "" {
				v.fail(vp+".dataVolume.name", "required")
			}
		case s.ConfigMap != nil:
			if s.ConfigMap.Name == "" {
				v.fail(vp+".configMap.name", "required")
			}
		case s.Secret != nil:
			if s.Secret.SecretName == "" {
				v.fail(vp+".secret.secretName", "required")
			}
		}
	}
}

func (v *validator) capacity(field string, q resource.Quantity, required bool) {
	switch {
	case q.IsZero() && !required:
	case q.Sign() <= 0:
		v.fail(field, "must be positive, got %s", q.String())
	case q.Cmp(*resource.NewQuantity(MaxDiskCapacityBytes, resource.BinarySI)) > 0:
		v.fail(field, "%s is more than the 1Pi allowed", q.String())
	}
}

func (v *validator) cloudInit(p, user, user64 string, userRef bool, network, network64 string, networkRef bool) {
	check := func(kind, plain, b64 string, ref bool, plainField, b64Field, refField string) {
		n := 0
		for _, set := range []bool{plain != "", b64 != "", ref} {
			if set {
				n++
			}
		}
		if n > 1 {
			v.fail(p, "set only one of %s, %s and %s", plainField, b64Field, refField)
		}
		size := len(plain)
		field := p + "." + plainField
		if b64 != "" {
			field = p + "." + b64Field
			dec, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				v.fail(field, "invalid base64: %v", err)
				return
			}
			size = len(dec)
		}
		if size > MaxCloudInitBytes {
			v.fail(field, "%s is %d bytes, more than the %d allowed", kind, size, MaxCloudInitBytes)
		}
	}
	check("user data", user, user64, userRef, "userData", "userDataBase64", "secretRef")
	check("network data", network, network64, networkRef, "networkData", "networkDataBase64", "networkDataSecretRef")
	if user == "" && user64 == "" && !userRef && network == "" && network64 == "" && !networkRef {
		v.fail(p, "needs userData or networkData (inline, base64 or a Secret reference)")
	}
}

func (v *validator) dnsLabel(field, name string) {
	if name == "" {
		v.fail(field, "required")
		return
	}
	for _, msg := range validation.IsDNS1123Label(name) {
		v.fail(field, "%q is not a valid name: %s", truncate(name, 80), msg)
	}
}

func diskTarget(d v1.Disk) (kind string, bus v1.DiskBus, n int) {
	if d.LUN != nil {
		kind, bus, n = "lun", d.LUN.Bus, n+1
	}
	if d.CDRom != nil {
		kind, bus, n = "cdrom", d.CDRom.Bus, n+1
	}
	if d.Disk != nil {
		kind, bus, n = "disk", d.Disk.Bus, n+1
	}
	return kind, bus, n
}

func (v *validator) disks() {
	const p = "spec.domain.devices.disks"
	disks := v.spec.Domain.Devices.Disks
	if len(disks) > maxItems {
		v.fail(p, "%d disks, at most %d allowed", len(disks), maxItems)
	}
	volumes := map[string]bool{}
	for _, vol := range v.spec.Volumes {
		volumes[vol.Name] = true
	}
	seen := map[string]int{}
	for i, d := range disks {
		dp := idx(p, i, "")
		v.dnsLabel(dp+".name", d.Name)
		if j, dup := seen[d.Name]; dup && d.Name != "" {
			v.fail(dp+".name", "%q is already the name of %s", d.Name, idx(p, j, ""))
		} else {
			seen[d.Name] = i
		}
		kind, bus, n := diskTarget(d)
		if n > 1 {
			v.fail(dp, "set only one of disk, cdrom and lun")
		}
		if !volumes[d.Name] && d.Name != "" && kind != "cdrom" {
			v.fail(dp+".name", "%q has no matching volume", d.Name)
		}
		if kind != "" {
			bp := dp + "." + kind + ".bus"
			switch bus {
			case "": // not defaulted yet
			case v1.DiskBusVirtio:
				if kind == "cdrom" {
					v.fail(bp, "virtio is not valid for a CD-ROM (use sata or scsi)")
				}
			case v1.DiskBusSATA:
				if d.Disk != nil && d.Disk.ReadOnly {
					v.fail(dp+".disk.readonly", "a sata disk cannot be read-only (use virtio or scsi, or a cdrom)")
				}
			case v1.DiskBusSCSI, v1.DiskBusUSB:
			default:
				v.fail(bp, "%q is not one of virtio, sata, scsi, usb", truncate(string(bus), 40))
			}
			if d.DedicatedIOThread != nil && *d.DedicatedIOThread && bus != v1.DiskBusVirtio && bus != "" {
				v.fail(dp+".dedicatedIOThread", "needs the virtio bus, not %s", bus)
			}
		}
		if d.Disk != nil && d.Disk.PciAddress != "" {
			if bus != v1.DiskBusVirtio && bus != "" {
				v.fail(dp+".disk.pciAddress", "only possible on the virtio bus")
			}
			if !pciAddressRE.MatchString(d.Disk.PciAddress) {
				v.fail(dp+".disk.pciAddress", "%q is not a PCI address of the form 0000:00:1f.0", truncate(d.Disk.PciAddress, 40))
			}
		}
		if d.Serial != "" {
			if !serialRE.MatchString(d.Serial) {
				v.fail(dp+".serial", "%q may contain only A-Z a-z 0-9 _ . + -", truncate(d.Serial, 40))
			}
			if len(d.Serial) > maxSerialLength {
				v.fail(dp+".serial", "longer than %d characters", maxSerialLength)
			}
		}
		switch d.Cache {
		case "", v1.CacheNone, v1.CacheWriteThrough, v1.CacheWriteBack:
		default:
			v.fail(dp+".cache", "%q is not one of none, writethrough, writeback", truncate(string(d.Cache), 40))
		}
		switch d.IO {
		case "", v1.IONative, v1.IOThreads:
		default:
			v.fail(dp+".io", "%q is not one of native, threads", truncate(string(d.IO), 40))
		}
		if ep := d.ErrorPolicy; ep != nil {
			switch *ep {
			case v1.DiskErrorPolicyStop, v1.DiskErrorPolicyIgnore, v1.DiskErrorPolicyReport, v1.DiskErrorPolicyEnospace:
			default:
				v.fail(dp+".errorPolicy", "%q is not one of stop, ignore, report, enospace", truncate(string(*ep), 40))
			}
		}
		if d.CDRom != nil {
			switch d.CDRom.Tray {
			case "", v1.TrayStateOpen, v1.TrayStateClosed:
			default:
				v.fail(dp+".cdrom.tray", "%q is not open or closed", truncate(string(d.CDRom.Tray), 40))
			}
		}
		if bs := d.BlockSize; bs != nil && bs.Custom != nil {
			c := bs.Custom
			for _, s := range []struct {
				name string
				val  uint
			}{{"logical", c.Logical}, {"physical", c.Physical}} {
				if s.val < 512 || s.val > 2<<20 || s.val&(s.val-1) != 0 {
					v.fail(dp+".blockSize.custom."+s.name, "%d is not a power of two between 512 and 2Mi", s.val)
				}
			}
			if c.Logical > c.Physical {
				v.fail(dp+".blockSize.custom.logical", "%d is more than physical (%d)", c.Logical, c.Physical)
			}
		}
	}
}

func (v *validator) filesystems() {
	const p = "spec.domain.devices.filesystems"
	volumes := map[string]bool{}
	for _, vol := range v.spec.Volumes {
		volumes[vol.Name] = true
	}
	disks := map[string]bool{}
	for _, d := range v.spec.Domain.Devices.Disks {
		disks[d.Name] = true
	}
	seen := map[string]bool{}
	for i, fs := range v.spec.Domain.Devices.Filesystems {
		fp := idx(p, i, "")
		v.dnsLabel(fp+".name", fs.Name)
		switch {
		case seen[fs.Name]:
			v.fail(fp+".name", "%q is used by another filesystem", fs.Name)
		case fs.Name != "" && !volumes[fs.Name]:
			v.fail(fp+".name", "%q has no matching volume", fs.Name)
		case disks[fs.Name]:
			v.fail(fp+".name", "volume %q is used by a disk too", fs.Name)
		}
		seen[fs.Name] = true
		if fs.Virtiofs == nil {
			v.fail(fp+".virtiofs", "required")
		}
	}
}

func (v *validator) networks() {
	const p = "spec.networks"
	nets := v.spec.Networks
	if len(nets) > maxItems {
		v.fail(p, "%d networks, at most %d allowed", len(nets), maxItems)
	}
	ifaces := map[string]bool{}
	for _, iface := range v.spec.Domain.Devices.Interfaces {
		ifaces[iface.Name] = true
	}
	seen := map[string]bool{}
	pods, multusDefault := 0, 0
	for i, n := range nets {
		np := idx(p, i, "")
		v.ifaceName(np+".name", n.Name)
		if seen[n.Name] {
			v.fail(np+".name", "%q is used by another network", n.Name)
		}
		seen[n.Name] = true
		if n.Name != "" && !ifaces[n.Name] {
			v.fail(np+".name", "%q has no interface of the same name in spec.domain.devices.interfaces", n.Name)
		}
		switch {
		case n.Pod == nil && n.Multus == nil:
			v.fail(np, "no network source: set pod or multus")
		case n.Pod != nil && n.Multus != nil:
			v.fail(np, "set only one of pod and multus")
		case n.Pod != nil:
			pods++
		case n.Multus != nil:
			if n.Multus.NetworkName == "" {
				v.fail(np+".multus.networkName", "required")
			}
			if n.Multus.Default {
				multusDefault++
			}
		}
	}
	if pods > 1 {
		v.fail(p, "%d pod networks; at most one allowed", pods)
	}
	if multusDefault > 1 {
		v.fail(p, "%d default multus networks; at most one allowed", multusDefault)
	}
	if pods > 0 && multusDefault > 0 {
		v.fail(p, "a pod network cannot be combined with a default multus network")
	}
}

// ifaceName applies KubeVirt's interface name rule (letters, digits, - and
// _), which also keeps the name safe in paths and device names.
func (v *validator) ifaceName(field, name string) {
	switch {
	case name == "":
		v.fail(field, "required")
	case len(name) > 63:
		v.fail(field, "%q is longer than 63 characters", truncate(name, 80))
	case !ifaceNameRE.MatchString(name):
		v.fail(field, "%q may contain only letters, digits, - and _", truncate(name, 80))
	}
}

func (v *validator) interfaces() {
	const p = "spec.domain.devices.interfaces"
	ifaces := v.spec.Domain.Devices.Interfaces
	if len(ifaces) > maxItems {
		v.fail(p, "%d interfaces, at most %d allowed", len(ifaces), maxItems)
	}
	nets := map[string]v1.Network{}
	for _, n := range v.spec.Networks {
		nets[n.Name] = n
	}
	seen := map[string]bool{}
	for i, iface := range ifaces {
		ip := idx(p, i, "")
		v.ifaceName(ip+".name", iface.Name)
		if seen[iface.Name] {
			v.fail(ip+".name", "%q is used by another interface", iface.Name)
		}
		seen[iface.Name] = true
		network, hasNet := nets[iface.Name]
		if iface.Name != "" && !hasNet {
			v.fail(ip+".name", "%q has no network of the same name in spec.networks", iface.Name)
		}
		v.binding(ip, iface, network, hasNet)
		if !validInterfaceModels[iface.Model] {
			v.fail(ip+".model", "%q is not one of virtio, e1000, e1000e, ne2k_pci, pcnet, rtl8139", truncate(iface.Model, 40))
		}
		if iface.MacAddress != "" {
			if mac, err := net.ParseMAC(iface.MacAddress); err != nil || len(mac) != 6 {
				v.fail(ip+".macAddress", "%q is not a MAC address like 02:00:00:12:34:56", truncate(iface.MacAddress, 40))
			} else if iface.Masquerade != nil && strings.EqualFold(mac.String(), reservedMasqueradeMAC) {
				v.fail(ip+".macAddress", "%s is reserved for the masquerade binding's in-pod bridge", reservedMasqueradeMAC)
			}
		}
		if iface.PciAddress != "" && !pciAddressRE.MatchString(iface.PciAddress) {
			v.fail(ip+".pciAddress", "%q is not a PCI address of the form 0000:00:1f.0", truncate(iface.PciAddress, 40))
		}
		switch iface.State {
		case "", v1.InterfaceStateAbsent, v1.InterfaceStateLinkUp, v1.InterfaceStateLinkDown:
		default:
			v.fail(ip+".state", "%q is not one of up, down, absent", truncate(string(iface.State), 40))
		}
		v.ports(ip, iface)
	}
}

// binding checks that an interface has exactly one binding and that the
// binding suits its network, as KubeVirt requires.
func (v *validator) binding(ip string, iface v1.Interface, net v1.Network, hasNet bool) {
	b := iface.InterfaceBindingMethod
	var set []string
	for _, c := range []struct {
		name string
		on   bool
	}{
		{"bridge", b.Bridge != nil}, {"masquerade", b.Masquerade != nil}, {"sriov", b.SRIOV != nil},
		{"passtBinding", b.PasstBinding != nil}, {"binding", iface.Binding != nil},
		{"slirp", b.DeprecatedSlirp != nil}, {"macvtap", b.DeprecatedMacvtap != nil}, {"passt", b.DeprecatedPasst != nil},
	} {
		if c.on {
			set = append(set, c.name)
		}
	}
	switch len(set) {
	case 0:
		v.fail(ip, "no binding: set one of masquerade, bridge, sriov, passtBinding or binding (a plugin)")
		return
	case 1:
	default:
		v.fail(ip, "%d bindings set (%s); want exactly one", len(set), strings.Join(set, ", "))
		return
	}
	switch set[0] {
	case "slirp", "macvtap", "passt":
		v.fail(ip+"."+set[0], "this binding was removed in KubeVirt v1.3")
		return
	case "binding":
		if iface.Binding.Name == "" {
			v.fail(ip+".binding.name", "required")
		}
	}
	if !hasNet {
		return // reported already
	}
	switch set[0] {
	case "masquerade":
		if net.Pod == nil {
			v.fail(ip+".masquerade", "masquerade is only possible on the pod network")
		}
	case "passtBinding":
		if net.Pod == nil {
			v.fail(ip+".passtBinding", "passt is only possible on the pod network")
		}
	case "sriov":
		if net.Multus == nil {
			v.fail(ip+".sriov", "sriov needs a multus network")
		}
	case "bridge":
		if net.Pod == nil && net.Multus == nil {
			v.fail(ip+".bridge", "bridge needs a pod or multus network")
		}
	}
}

func (v *validator) ports(ip string, iface v1.Interface) {
	type key struct {
		proto string
		port  int32
	}
	seenPort := map[key]int{}
	seenName := map[string]bool{}
	for j, port := range iface.Ports {
		pp := idx(ip+".ports", j, "")
		if port.Port < 1 || port.Port > 65535 {
			v.fail(pp+".port", "%d is not in 1..65535", port.Port)
		}
		proto := strings.ToUpper(port.Protocol)
		switch port.Protocol {
		case "":
			proto = "TCP"
		case "TCP", "UDP":
		default:
			v.fail(pp+".protocol", "%q is not TCP or UDP", truncate(port.Protocol, 20))
		}
		k := key{proto, port.Port}
		if first, dup := seenPort[k]; dup {
			v.fail(pp, "%s port %d is already listed at %s", proto, port.Port, idx(ip+".ports", first, ""))
		} else {
			seenPort[k] = j
		}
		if port.Name != "" {
			if seenName[port.Name] {
				v.fail(pp+".name", "%q is used by another port", port.Name)
			}
			seenName[port.Name] = true
			if msgs := validation.IsValidPortName(port.Name); len(msgs) > 0 {
				v.fail(pp+".name", "%q is not a valid port name: %s", truncate(port.Name, 40), msgs[0])
			}
		}
	}
}

// bootOrders requires boot orders to be positive and unique across disks
// and interfaces.
func (v *validator) bootOrders() {
	seen := map[uint]string{}
	check := func(field string, order *uint) {
		if order == nil {
			return
		}
		if *order < 1 {
			v.fail(field, "must be at least 1")
			return
		}
		if other, dup := seen[*order]; dup {
			v.fail(field, "%d is already the boot order of %s", *order, other)
			return
		}
		seen[*order] = strings.TrimSuffix(field, ".bootOrder")
	}
	for i, d := range v.spec.Domain.Devices.Disks {
		check(idx("spec.domain.devices.disks", i, "bootOrder"), d.BootOrder)
	}
	for i, iface := range v.spec.Domain.Devices.Interfaces {
		check(idx("spec.domain.devices.interfaces", i, "bootOrder"), iface.BootOrder)
	}
}

func (v *validator) inputs() {
	const p = "spec.domain.devices.inputs"
	seen := map[string]bool{}
	for i, in := range v.spec.Domain.Devices.Inputs {
		ip := idx(p, i, "")
		if in.Name == "" {
			v.fail(ip+".name", "required")
		} else if seen[in.Name] {
			v.fail(ip+".name", "%q is used by another input", in.Name)
		}
		seen[in.Name] = true
		switch in.Bus {
		case "", v1.InputBusUSB, v1.InputBusVirtio:
		default:
			v.fail(ip+".bus", "%q is not usb or virtio", truncate(string(in.Bus), 40))
		}
		switch in.Type {
		case "", v1.InputTypeTablet, v1.InputTypeKeyboard:
		default:
			v.fail(ip+".type", "%q is not tablet or keyboard", truncate(string(in.Type), 40))
		}
	}
}

func (v *validator) clock() {
	c := v.spec.Domain.Clock
	if c == nil {
		return
	}
	if c.UTC != nil && c.Timezone != nil {
		v.fail("spec.domain.clock", "set either utc or timezone, not both")
	}
}
