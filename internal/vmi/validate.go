package vmi

import (
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
	v.dns()
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		v.fail("spec.terminationGracePeriodSeconds", "must not be negative, got %d", *g)
	}
	if s := vmi.Spec.StartStrategy; s != nil && *s != v1.StartStrategyPaused {
		v.fail("spec.startStrategy", "%q is not supported: only %q (or none)", *s, v1.StartStrategyPaused)
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
	switch uid := string(v.vmi.UID); {
	case uid == "":
		v.fail("metadata.uid", "required (SetDefaults derives one from namespace and name)")
	case !uidPattern.MatchString(uid) || strings.Contains(uid, ".."):
		// Kubernetes gives UUIDs; paths of the pod (the serial console's
		// socket, say) are made from it.
		v.fail("metadata.uid", "%q is not a valid uid: want letters, digits, '-', '_' and '.' (no \"..\"), at most 128", truncate(uid, 80))
	}
	// Kubernetes' limit on all of an object's annotations together.
	size := 0
	for k, val := range v.vmi.Annotations {
		size += len(k) + len(val)
	}
	if size > maxAnnotationsBytes {
		v.fail("metadata.annotations", "%d bytes in all, at most %d allowed", size, maxAnnotationsBytes)
	}
	if val, ok := v.vmi.Annotations[AnnotationLauncherRestarts]; ok && val != "on" && val != "off" {
		v.fail("metadata.annotations["+AnnotationLauncherRestarts+"]", "%q: want on or off", truncate(val, 80))
	}
}

// uidPattern is what a metadata.uid may look like here.
var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// maxAnnotationsBytes is Kubernetes' TotalAnnotationSizeLimitB (256 KiB).
const maxAnnotationsBytes = 256 << 10

// KubeVirt's (and Kubernetes') limits on a pod's DNS configuration.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 6
	maxDNSSearchListChars = 256
)

// dns checks the host name, subdomain and DNS configuration as KubeVirt's
// admission does: they reach the guest through DHCP and cloud-init, so a
// newline or a quote in them must never get that far.
func (v *validator) dns() {
	if h := v.spec.Hostname; h != "" {
		for _, msg := range validation.IsDNS1123Label(h) {
			v.fail("spec.hostname", "%q is not a valid host name: %s", truncate(h, 80), msg)
		}
	}
	if d := v.spec.Subdomain; d != "" {
		for _, msg := range validation.IsDNS1123Subdomain(d) {
			v.fail("spec.subdomain", "%q is not a valid subdomain: %s", truncate(d, 80), msg)
		}
	}
	c := v.spec.DNSConfig
	if v.spec.DNSPolicy == k8sv1.DNSNone && (c == nil || len(c.Nameservers) == 0) {
		v.fail("spec.dnsConfig.nameservers", "at least one is required when spec.dnsPolicy is None")
	}
	if c == nil {
		return
	}
	const p = "spec.dnsConfig"
	if len(c.Nameservers) > maxDNSNameservers {
		v.fail(p+".nameservers", "%d given, at most %d allowed", len(c.Nameservers), maxDNSNameservers)
	}
	for i, ns := range c.Nameservers {
		if net.ParseIP(ns) == nil {
			v.fail(idx(p+".nameservers", i, ""), "%q is not an IP address", truncate(ns, 80))
		}
	}
	if len(c.Searches) > maxDNSSearchPaths {
		v.fail(p+".searches", "%d given, at most %d allowed", len(c.Searches), maxDNSSearchPaths)
	}
	if n := len(strings.Join(c.Searches, " ")); n > maxDNSSearchListChars {
		v.fail(p+".searches", "%d characters with the spaces between them, at most %d allowed", n, maxDNSSearchListChars)
	}
	for i, s := range c.Searches {
		for _, msg := range validation.IsDNS1123Subdomain(s) {
			v.fail(idx(p+".searches", i, ""), "%q is not a valid search domain: %s", truncate(s, 80), msg)
		}
	}
	for i, o := range c.Options {
		if o.Name == "" {
			v.fail(idx(p+".options", i, "name"), "required")
		}
		if strings.ContainsAny(o.Name, " \t\n\r\"'") || (o.Value != nil && strings.ContainsAny(*o.Value, " \t\n\r\"'")) {
			v.fail(idx(p+".options", i, ""), "%q holds a space, quote or line break", truncate(o.Name, 80))
		}
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
