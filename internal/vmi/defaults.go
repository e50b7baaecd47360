package vmi

import (
	"math"
	"strings"

	"github.com/google/uuid"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

// Options are the cluster settings KubeVirt's webhook would read from the
// KubeVirt CR; standalone, the caller chooses them.
type Options struct {
	// DefaultBinding is the binding of the auto-attached pod interface:
	// "masquerade" (the standalone default, used when empty) or "bridge"
	// (KubeVirt's cluster default).
	DefaultBinding string
	// Namespace used when metadata.namespace is empty ("default" when this
	// is empty).
	Namespace string
	// Arch in GOARCH spelling; "amd64" when empty.
	Arch string
	// Expander expands a VirtualMachine's instancetype and preference
	// (internal/instancetype); without one, a VM naming either is refused.
	Expander Expander
}

// Expander expands a VirtualMachine's instancetype and preference into the
// VMI it starts, in KubeVirt's two steps: Prepare before the VMI gets its
// default interface and input device (preferred architecture, machine type
// and auto-attached devices), Apply after (everything else).
type Expander interface {
	Prepare(vm *v1.VirtualMachine, spec *v1.VirtualMachineInstanceSpec) error
	Apply(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) error
}

const (
	// BindingMasquerade and BindingBridge are the values of
	// Options.DefaultBinding.
	BindingMasquerade = "masquerade"
	BindingBridge     = "bridge"

	// DefaultGracePeriodSeconds is what the launcher uses when
	// spec.terminationGracePeriodSeconds is nil (KubeVirt does not default
	// the field), and so also the default of its --grace-period-seconds
	// and the grace period a new domain manager starts with.
	DefaultGracePeriodSeconds int64 = 30

	// MaxGracePeriodSeconds caps a termination grace period (68 years):
	// larger values are taken as this one, so that a grace period in
	// seconds never overflows a time.Duration or the launcher's flag (a
	// grace period of 2^62 s wrapped to 0 and skipped the ACPI shutdown).
	MaxGracePeriodSeconds int64 = math.MaxInt32

	// RuntimeUser is the non-root qemu user id KubeVirt records in
	// status.runtimeUser.
	RuntimeUser = 107

	// PCITopologyAnnotation marks VMIs whose PCIe layout leaves hotplug
	// ports (KubeVirt's v3 topology).
	PCITopologyAnnotation = "kubevirt.io/pci-topology-version"
	pciTopologyVersion    = "v3"

	// maxHotplugRatio is KubeVirt's LiveUpdateConfiguration.maxHotplugRatio
	// default.
	maxHotplugRatio = 4
	// maxVCPUs is the bound KubeVirt puts on sockets×cores×threads when it
	// derives maxSockets.
	maxVCPUs = 512

	memoryBlockAlignment   int64 = 2 << 20 // 2 MiB: QEMU's virtio-mem block
	memory1GiPageAlignment int64 = 1 << 30
)

// firmwareUUIDNamespace is the UUIDv5 namespace KubeVirt's VM controller
// derives stable firmware UUIDs from (pkg/virt-controller/watch/vm).
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// FirmwareUUID is the firmware UUID KubeVirt gives a VM named name:
// UUIDv5 of the name alone (not the namespace).
func FirmwareUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(name)).String())
}

// StableUID is the metadata.uid given to a VMI that has none: UUIDv5 of
// "namespace/name", so reruns of the same manifest get the same UID.
func StableUID(namespace, name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte("uid:"+namespace+"/"+name)).String())
}

// AnnotationLauncherRestarts on a VMI switches the restarts of a launcher
// that died by accident off for it ("off"), or leaves them on ("on", the
// default). A cluster runs one launcher image with one environment; a VM
// whose owner wants KubeVirt's behaviour (the VMI fails with its
// launcher) says so itself. Validate refuses any other value.
const AnnotationLauncherRestarts = "virtlauncher.io/launcher-restarts"

// LauncherRestartsOff reports whether the VMI asks for no launcher
// restarts.
func LauncherRestartsOff(vmi *v1.VirtualMachineInstance) bool {
	return vmi.Annotations[AnnotationLauncherRestarts] == "off"
}

// GracePeriodSeconds is the VMI's termination grace period, 30 when unset,
// at most MaxGracePeriodSeconds (and never negative: Validate refuses
// that).
func GracePeriodSeconds(vmi *v1.VirtualMachineInstance) int64 {
	if vmi == nil || vmi.Spec.TerminationGracePeriodSeconds == nil {
		return DefaultGracePeriodSeconds
	}
	return min(max(*vmi.Spec.TerminationGracePeriodSeconds, 0), MaxGracePeriodSeconds)
}

// SetDefaults applies what KubeVirt's admission webhook applies when a VMI is
// created (kubevirt-conversion.md A.1, in that order), plus the two things
// the VM controller does for VM-owned VMIs (stable firmware UUID, input
// auto-attach). Running it again changes nothing.
//
// Only for VMIs that did not come through a KubeVirt cluster: a VMI sent by
// virt-handler is already defaulted, and the cluster's choices (runtime user,
// CPU model, binding) must not be second-guessed.
//
// An unknown Options.DefaultBinding falls back to masquerade; Load rejects it.
func SetDefaults(vmi *v1.VirtualMachineInstance, o Options) {
	if vmi == nil {
		return
	}
	spec := &vmi.Spec
	setIdentity(vmi, o)

	// 1. architecture
	if spec.Architecture == "" {
		spec.Architecture = o.arch()
	}
	// 2. machine type
	if spec.Domain.Machine == nil {
		spec.Domain.Machine = &v1.Machine{}
	}
	if spec.Domain.Machine.Type == "" {
		spec.Domain.Machine.Type = defaultMachineType(spec.Architecture)
	}
	// 3. resource requests: a CPU limit alone also becomes the request. The
	// cluster cpuRequest (100m by default) stays on the pod, not the VMI.
	res := &spec.Domain.Resources
	if !res.Limits.Cpu().IsZero() && res.Requests.Cpu().IsZero() {
		if res.Requests == nil {
			res.Requests = k8sv1.ResourceList{}
		}
		res.Requests[k8sv1.ResourceCPU] = res.Limits[k8sv1.ResourceCPU]
	}
	// 4. guest memory
	setGuestMemory(spec)
	// 5. CPU topology
	setCPUTopology(spec)
	// 6. containerDisk pull policy
	for i := range spec.Volumes {
		cd := spec.Volumes[i].ContainerDisk
		if cd == nil || cd.ImagePullPolicy != "" {
			continue
		}
		cd.ImagePullPolicy = DefaultPullPolicy(cd.Image)
	}
	// 7. eviction strategy: the cluster default is None, i.e. nil; nothing to do.
	// 8. default network and interface
	setDefaultNetwork(spec, o)
	// 9. a disk for every volume without a disk or filesystem
	setVolumeDisks(spec)
	// 10. s390x: ACPI is off unless asked for
	if spec.Architecture == "s390x" {
		if spec.Domain.Features == nil {
			spec.Domain.Features = &v1.Features{}
		}
		if spec.Domain.Features.ACPI.Enabled == nil {
			spec.Domain.Features.ACPI.Enabled = boolPtr(false)
		}
	}
	// The VM controller's input auto-attach, which precedes the webhook.
	autoAttachInput(spec)
	// 11. generated object defaults. The firmware UUID is fixed first, by the
	// VM controller's stable rule, so the generated code does not draw a
	// random one.
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &v1.Firmware{}
	}
	if spec.Domain.Firmware.UUID == "" {
		spec.Domain.Firmware.UUID = FirmwareUUID(vmi.Name)
	}
	v1.SetObjectDefaults_VirtualMachineInstance(vmi)
	// 12. Hyper-V dependencies
	setHypervDependencies(spec)
	// 13. arch defaults
	switch spec.Architecture {
	case "arm64":
		setArm64Defaults(spec)
	case "s390x":
		setDiskBuses(spec, v1.DiskBusVirtio)
		if w := spec.Domain.Devices.Watchdog; w != nil {
			if w.Diag288 == nil {
				w.Diag288 = &v1.Diag288Watchdog{}
			}
			if w.Diag288.Action == "" {
				w.Diag288.Action = v1.WatchdogActionReset
			}
		}
	default:
		setDiskBuses(spec, v1.DiskBusSATA)
		if w := spec.Domain.Devices.Watchdog; w != nil {
			if w.I6300ESB == nil {
				w.I6300ESB = &v1.I6300ESBWatchdog{}
			}
			if w.I6300ESB.Action == "" {
				w.I6300ESB.Action = v1.WatchdogActionReset
			}
		}
	}
	// 14. CPU model
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &v1.CPU{}
	}
	if spec.Domain.CPU.Model == "" {
		spec.Domain.CPU.Model = v1.DefaultCPUModel
	}
	// 15. status
	if m := spec.Domain.Memory; m != nil && m.Guest != nil {
		vmi.Status.Memory = &v1.MemoryStatus{
			GuestAtBoot:    quantityPtr(*m.Guest),
			GuestCurrent:   quantityPtr(*m.Guest),
			GuestRequested: quantityPtr(*m.Guest),
		}
	}
	if vmi.Status.CurrentCPUTopology == nil {
		cpu := spec.Domain.CPU
		vmi.Status.CurrentCPUTopology = &v1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
	}
	// 16. hotplug maxima (rollout strategy LiveUpdate, KubeVirt's default)
	if spec.Architecture != "arm64" {
		setCPUHotplug(spec)
		setMemoryHotplug(spec)
	}
	// 17. PCIe hotplug topology marker
	if supportsPCIeHotplug(spec) {
		if vmi.Annotations == nil {
			vmi.Annotations = map[string]string{}
		}
		if _, ok := vmi.Annotations[PCITopologyAnnotation]; !ok {
			vmi.Annotations[PCITopologyAnnotation] = pciTopologyVersion
		}
	}
	// 18. runtime user (non-root, KubeVirt's default)
	if vmi.Status.RuntimeUser == 0 {
		vmi.Status.RuntimeUser = RuntimeUser
	}
}

func (o Options) arch() string {
	if o.Arch == "" {
		return "amd64"
	}
	return o.Arch
}

// setIdentity fills namespace and UID, which the launcher needs and a
// cluster would have assigned.
func setIdentity(vmi *v1.VirtualMachineInstance, o Options) {
	if vmi.Namespace == "" {
		vmi.Namespace = o.Namespace
		if vmi.Namespace == "" {
			vmi.Namespace = "default"
		}
	}
	if vmi.UID == "" && vmi.Name != "" {
		vmi.UID = StableUID(vmi.Namespace, vmi.Name)
	}
}

func defaultMachineType(arch string) string {
	switch arch {
	case "arm64":
		return "virt"
	case "s390x":
		return "s390-ccw-virtio"
	default:
		return "q35"
	}
}

func setGuestMemory(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.Memory != nil && spec.Domain.Memory.Guest != nil {
		return
	}
	if spec.Domain.Memory == nil {
		spec.Domain.Memory = &v1.Memory{}
	}
	res := spec.Domain.Resources
	switch {
	case !res.Requests.Memory().IsZero():
		spec.Domain.Memory.Guest = res.Requests.Memory()
	case !res.Limits.Memory().IsZero():
		spec.Domain.Memory.Guest = res.Limits.Memory()
	case spec.Domain.Memory.Hugepages != nil:
		if q, err := resource.ParseQuantity(spec.Domain.Memory.Hugepages.PageSize); err == nil {
			spec.Domain.Memory.Guest = &q
		}
	}
}

// setCPUTopology puts the vCPU count into sockets when the user gave no
// topology. The CPU quantity is rounded up (1500m is 2 sockets).
func setCPUTopology(spec *v1.VirtualMachineInstanceSpec) {
	cpu := spec.Domain.CPU
	if cpu != nil && (cpu.Sockets != 0 || cpu.Cores != 0 || cpu.Threads != 0) {
		return
	}
	if cpu == nil {
		cpu = &v1.CPU{}
		spec.Domain.CPU = cpu
	}
	sockets := uint32(1)
	res := spec.Domain.Resources
	if q, ok := res.Limits[k8sv1.ResourceCPU]; ok {
		sockets = clampUint32(boundedValue(q, math.MaxUint32))
	} else if q, ok := res.Requests[k8sv1.ResourceCPU]; ok {
		sockets = clampUint32(boundedValue(q, math.MaxUint32))
	}
	cpu.Sockets, cpu.Cores, cpu.Threads = sockets, 1, 1
}

// clampUint32 keeps absurd quantities absurd (so validation rejects them)
// instead of letting them wrap around to small numbers.
func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	default:
		return uint32(v)
	}
}

func setDefaultNetwork(spec *v1.VirtualMachineInstanceSpec, o Options) {
	if a := spec.Domain.Devices.AutoattachPodInterface; a != nil && !*a {
		return
	}
	if len(spec.Networks) != 0 || len(spec.Domain.Devices.Interfaces) != 0 {
		return
	}
	iface := v1.DefaultMasqueradeNetworkInterface()
	if o.DefaultBinding == BindingBridge {
		iface = v1.DefaultBridgeNetworkInterface()
	}
	spec.Domain.Devices.Interfaces = []v1.Interface{*iface}
	spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
}

func setVolumeDisks(spec *v1.VirtualMachineInstanceSpec) {
	used := map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		used[d.Name] = true
	}
	for _, fs := range spec.Domain.Devices.Filesystems {
		used[fs.Name] = true
	}
	for _, vol := range spec.Volumes {
		if !used[vol.Name] {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, v1.Disk{
				Name:       vol.Name,
				DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{}},
			})
			used[vol.Name] = true
		}
	}
}

func setDiskBuses(spec *v1.VirtualMachineInstanceSpec, bus v1.DiskBus) {
	for i := range spec.Domain.Devices.Disks {
		d := &spec.Domain.Devices.Disks[i].DiskDevice
		if d.Disk != nil && d.Disk.Bus == "" {
			d.Disk.Bus = bus
		}
		if d.CDRom != nil && d.CDRom.Bus == "" {
			d.CDRom.Bus = bus
		}
		if d.LUN != nil && d.LUN.Bus == "" {
			d.LUN.Bus = bus
		}
	}
}

func setArm64Defaults(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &v1.CPU{}
	}
	if spec.Domain.CPU.Model == "" {
		spec.Domain.CPU.Model = v1.CPUModeHostPassthrough
	}
	fw := spec.Domain.Firmware // non-nil after step 11
	if fw.Bootloader == nil {
		fw.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
	}
	if fw.Bootloader.EFI != nil && fw.Bootloader.EFI.SecureBoot == nil {
		fw.Bootloader.EFI.SecureBoot = boolPtr(false)
	}
	setDiskBuses(spec, v1.DiskBusVirtio)
}

// setHypervDependencies switches on the Hyper-V features an enabled feature
// needs, when the user left them out (A.5). A need the user explicitly
// disabled is left for Validate to reject.
func setHypervDependencies(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.Features == nil || spec.Domain.Features.Hyperv == nil {
		return
	}
	h := spec.Domain.Features.Hyperv
	var synicTimer *bool
	if h.SyNICTimer != nil {
		synicTimer = h.SyNICTimer.Enabled
	}
	// Leaves first, like KubeVirt: synictimer may switch on synic, which then
	// needs vpindex.
	require := func(enabled *bool, need **v1.FeatureState) bool {
		if enabled == nil || !*enabled {
			return true
		}
		if *need == nil || (*need).Enabled == nil {
			if *need == nil {
				*need = &v1.FeatureState{}
			}
			(*need).Enabled = boolPtr(true)
			return true
		}
		return *(*need).Enabled
	}
	state := func(fs *v1.FeatureState) *bool {
		if fs == nil {
			return nil
		}
		return fs.Enabled
	}
	var tlb *bool
	if h.TLBFlush != nil {
		tlb = h.TLBFlush.Enabled
	}
	steps := []func() bool{
		func() bool { return require(state(h.EVMCS), &h.VAPIC) },
		func() bool { return require(state(h.IPI), &h.VPIndex) },
		func() bool { return require(tlb, &h.VPIndex) },
		func() bool { return require(synicTimer, &h.SyNIC) },
		func() bool { return require(state(h.SyNIC), &h.VPIndex) },
	}
	for _, step := range steps {
		if !step() {
			break // KubeVirt stops at the first unmet need; the validator reports it
		}
	}
	if h.EVMCS != nil && (h.EVMCS.Enabled == nil || *h.EVMCS.Enabled) {
		if spec.Domain.CPU == nil {
			spec.Domain.CPU = &v1.CPU{}
		}
		found := false
		for i := range spec.Domain.CPU.Features {
			if spec.Domain.CPU.Features[i].Name == "vmx" {
				spec.Domain.CPU.Features[i].Policy = "require"
				found = true
				break
			}
		}
		if !found {
			spec.Domain.CPU.Features = append(spec.Domain.CPU.Features, v1.CPUFeature{Name: "vmx", Policy: "require"})
		}
	}
}

func setCPUHotplug(spec *v1.VirtualMachineInstanceSpec) {
	cpu := spec.Domain.CPU
	if cpu.MaxSockets != 0 {
		return
	}
	maxSockets := uint64(cpu.Sockets) * maxHotplugRatio
	perSocket := uint64(cpu.Cores) * uint64(cpu.Threads)
	if maxSockets*perSocket > maxVCPUs && perSocket != 0 {
		maxSockets = max(maxVCPUs/perSocket, uint64(cpu.Sockets))
	}
	cpu.MaxSockets = uint32(min(maxSockets, math.MaxUint32))
}

func setMemoryHotplug(spec *v1.VirtualMachineInstanceSpec) {
	m := spec.Domain.Memory
	if m == nil || m.MaxGuest != nil || m.Guest == nil {
		return
	}
	if cpu := spec.Domain.CPU; cpu != nil && (cpu.Realtime != nil || (cpu.NUMA != nil && cpu.NUMA.GuestMappingPassthrough != nil)) {
		return
	}
	if spec.Domain.LaunchSecurity != nil || spec.Architecture != "amd64" {
		return
	}
	align := memoryBlockAlignment
	if m.Hugepages != nil && m.Hugepages.PageSize == "1Gi" {
		align = memory1GiPageAlignment
	}
	guest := boundedValue(*m.Guest, math.MaxInt64/maxHotplugRatio+1)
	if guest < 1<<30 || guest%align != 0 || guest > math.MaxInt64/maxHotplugRatio {
		return
	}
	m.MaxGuest = resource.NewQuantity(guest*maxHotplugRatio, resource.BinarySI)
}

// supportsPCIeHotplug is KubeVirt's SupportsPCIeHotplug: PCIe machine types
// on amd64 and arm64.
func supportsPCIeHotplug(spec *v1.VirtualMachineInstanceSpec) bool {
	switch spec.Architecture {
	case "amd64", "arm64", "":
	default:
		return false
	}
	if m := spec.Domain.Machine; m != nil && !strings.Contains(m.Type, "q35") && !strings.HasPrefix(m.Type, "virt") {
		return false
	}
	return true
}

// boundedValue is q rounded up to an integer, or limit when q is larger.
// Quantity.Value silently wraps (9e30 gives 0), so every size taken from a
// manifest goes through here.
func boundedValue(q resource.Quantity, limit int64) int64 {
	if q.Cmp(*resource.NewQuantity(limit, resource.DecimalSI)) > 0 {
		return limit
	}
	if q.Sign() < 0 {
		return -1
	}
	return q.Value()
}

func boolPtr(b bool) *bool { return &b }

func quantityPtr(q resource.Quantity) *resource.Quantity { return &q }

// DefaultPullPolicy is the pull policy of an image given none, as the
// kubelet (and KubeVirt, for containerDisks) decides it: Always for the
// latest tag or no tag or digest at all, IfNotPresent otherwise. A
// registry's port is not a tag.
func DefaultPullPolicy(image string) k8sv1.PullPolicy {
	last := image[strings.LastIndex(image, "/")+1:]
	if strings.Contains(image, "@") || (strings.Contains(last, ":") && !strings.HasSuffix(last, ":latest")) {
		return k8sv1.PullIfNotPresent
	}
	return k8sv1.PullAlways
}

// autoAttachInput is the VM controller's input auto-attach.
func autoAttachInput(spec *v1.VirtualMachineInstanceSpec) {
	if d := &spec.Domain.Devices; d.AutoattachInputDevice != nil && *d.AutoattachInputDevice && len(d.Inputs) == 0 {
		d.Inputs = []v1.Input{{Name: "default-0"}}
	}
}
