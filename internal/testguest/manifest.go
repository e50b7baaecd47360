package testguest

import (
	"fmt"
	"slices"
	"strings"
)

// Device says whether the manifest has a device (EFI firmware, a TPM),
// and whether its state persists (KubeVirt's persistent: true).
type Device int

const (
	// Off leaves the device out.
	Off Device = iota
	// On adds it, its state not kept.
	On
	// Persistent adds it with persistent: true.
	Persistent
)

// Manifest is the test guest as a VirtualMachineInstance manifest: its
// kernel booted from a kernelBoot container, its root file system a
// containerDisk, optionally a scratch emptyDisk, a cloud-init NoCloud
// user-data script and the pod network, and what the feature tests add to
// it (metadata, CPU and memory, a claim for the root disk, virtiofs
// shares, GPUs). vlctl testguest, the pod harness (internal/launchertest),
// the standalone and e2e tests render it here, as a VMI or (VMYAML) a
// VirtualMachine.
type Manifest struct {
	Meta
	Boot
	Sizing
	Disks
	Network
	// NodeSelector is spec.nodeSelector.
	NodeSelector map[string]string
	// Grace is terminationGracePeriodSeconds; 0 leaves it out.
	Grace int
	// Shares are ConfigMaps shared with the guest by virtiofs, each a
	// filesystem and a volume of the share's name, the guest mounting it
	// by that name.
	Shares []Share
	// GPUs are devices.gpus, passed through from the host.
	GPUs []GPU
}

// Meta is a Manifest's object metadata.
type Meta struct {
	Name, Namespace, UID string
	// Labels and Annotations are the metadata's (a VirtualMachine's
	// template's, in VMYAML).
	Labels, Annotations map[string]string
}

// Boot is how a Manifest's guest boots.
type Boot struct {
	// Kernel is the kernelBoot container's image (a directory for vlctl
	// run, a reference where a handler mounts it); KernelPath and
	// InitrdPath are the files in it, default /vmlinuz and /initrd.img.
	Kernel, KernelPath, InitrdPath string
	// Cmdline is the kernel's arguments; "" leaves kernelArgs out.
	Cmdline string
	// EFI boots by EFI firmware (secure boot off) instead of BIOS; TPM adds
	// devices.tpm.
	EFI, TPM Device
}

// Sizing is a Manifest's memory and CPUs.
type Sizing struct {
	// Memory is the memory request, default 256Mi.
	Memory string
	// GuestMemory states Memory as spec.domain.memory.guest, the guest's
	// size, instead of the request.
	GuestMemory bool
	// MemoryLimit, if set, is the memory limit; equal to the request it
	// gives the launcher pod the Guaranteed QoS class.
	MemoryLimit string
	// DedicatedCores, if set, is the number of cores, each on a CPU of the
	// node's own (dedicatedCpuPlacement).
	DedicatedCores int
}

// Disks are a Manifest's root disk and the disks beside it.
type Disks struct {
	// RootName is the root disk's name, default "rootdisk"; Root its
	// containerDisk image and RootPath, if set, its containerDisk.path.
	RootName, Root, RootPath string
	// RootClaim, if set, is the PersistentVolumeClaim holding the root
	// disk, in place of Root's containerDisk.
	RootClaim string
	// Scratch adds an emptyDisk "scratch" of 64Mi.
	Scratch bool
	// UserData, if set, is the cloud-init NoCloud user-data (disk
	// "cloudinit").
	UserData string
	// UserDataCDROM puts the cloud-init disk on a SATA CD-ROM instead of a
	// virtio disk: KubeVirt live-migrates a read-only CD-ROM without
	// copying it.
	UserDataCDROM bool
}

// Network is a Manifest's interfaces.
type Network struct {
	// Pod is the interface "default" on the pod network; without it the
	// VMI has no interface (autoattachPodInterface: false) unless
	// AutoattachPod leaves the interface KubeVirt attaches by default
	// (masquerade on the pod network).
	Pod           *Interface
	AutoattachPod bool
	// Multus, with Pod, adds the interface "second", bridged, on this
	// Multus network.
	Multus string
}

// Share is a ConfigMap shared with the guest by virtiofs.
type Share struct {
	// Name is the filesystem's and the volume's.
	Name string
	// ConfigMap is the ConfigMap's name.
	ConfigMap string
}

// GPU is a GPU of the guest's.
type GPU struct {
	// Name is the device's name; DeviceName the resource naming its kind
	// (vendor.com/MODEL).
	Name, DeviceName string
}

// Interface is how the manifest's pod network interface is bound.
type Interface struct {
	// Binding is a binding method of KubeVirt's own: masquerade when
	// empty, bridge, passt.
	Binding string
	// Plugin binds it to this network binding plugin instead.
	Plugin string
	// Ports are the ports it declares.
	Ports []int
}

// YAML renders the manifest.
func (m Manifest) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: %s\n", m.Name)
	if m.Namespace != "" {
		fmt.Fprintf(&b, "  namespace: %s\n", m.Namespace)
	}
	if m.UID != "" {
		fmt.Fprintf(&b, "  uid: %s\n", m.UID)
	}
	b.WriteString(m.labels("  "))
	b.WriteString("spec:\n")
	b.WriteString(m.spec())
	return b.String()
}

// VMYAML renders the manifest as a VirtualMachine of that run strategy
// whose template is the VMI: the VM has the VMI's name and namespace, the
// template its labels, annotations and spec.
func (m Manifest) VMYAML(runStrategy string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\n", m.Name)
	if m.Namespace != "" {
		fmt.Fprintf(&b, "  namespace: %s\n", m.Namespace)
	}
	fmt.Fprintf(&b, "spec:\n  runStrategy: %s\n  template:\n", runStrategy)
	if l := m.labels("      "); l != "" {
		b.WriteString("    metadata:\n" + l)
	}
	b.WriteString("    spec:\n")
	for _, l := range strings.SplitAfter(strings.TrimSuffix(m.spec(), "\n"), "\n") {
		b.WriteString("    " + strings.TrimSuffix(l, "\n") + "\n")
	}
	return b.String()
}

// labels renders the labels and annotations at indent.
func (m Manifest) labels(indent string) string {
	var b strings.Builder
	for _, f := range []struct {
		key string
		m   map[string]string
	}{{"labels", m.Labels}, {"annotations", m.Annotations}} {
		if len(f.m) > 0 {
			b.WriteString(indent + f.key + ":\n" + mapYAML(f.m, indent+"  "))
		}
	}
	return b.String()
}

// mapYAML renders a map of strings, its keys sorted, at indent.
func mapYAML(m map[string]string, indent string) string {
	var b strings.Builder
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s%s: %q\n", indent, k, m[k])
	}
	return b.String()
}

// spec renders the VMI's spec, below its spec: line.
func (m Manifest) spec() string {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&m.KernelPath, "/vmlinuz")
	def(&m.InitrdPath, "/initrd.img")
	def(&m.Memory, "256Mi")
	def(&m.RootName, "rootdisk")
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	if len(m.NodeSelector) > 0 {
		w("  nodeSelector:\n%s", mapYAML(m.NodeSelector, "    "))
	}
	if m.Grace > 0 {
		w("  terminationGracePeriodSeconds: %d\n", m.Grace)
	}
	w("  domain:\n")
	if m.DedicatedCores > 0 {
		w("    cpu: {cores: %d, dedicatedCpuPlacement: true}\n", m.DedicatedCores)
	}
	if m.GuestMemory {
		w("    memory:\n      guest: %s\n", m.Memory)
	}
	w("    firmware:\n")
	if m.EFI != Off {
		w("      bootloader:\n        efi: {secureBoot: false, persistent: %v}\n", m.EFI == Persistent)
	}
	w("      kernelBoot:\n")
	if m.Cmdline != "" {
		w("        kernelArgs: %q\n", m.Cmdline)
	}
	w("        container:\n          image: %s\n          kernelPath: %s\n          initrdPath: %s\n", m.Kernel, m.KernelPath, m.InitrdPath)
	w("    devices:\n")
	switch m.TPM {
	case On:
		w("      tpm: {}\n")
	case Persistent:
		w("      tpm: {persistent: true}\n")
	}
	if m.Pod == nil && !m.AutoattachPod {
		w("      autoattachPodInterface: false\n")
	}
	w("      disks:\n")
	disks := []string{m.RootName}
	if m.Scratch {
		disks = append(disks, "scratch")
	}
	if m.UserData != "" {
		disks = append(disks, "cloudinit")
	}
	for _, d := range disks {
		if d == "cloudinit" && m.UserDataCDROM {
			w("      - name: %s\n        cdrom:\n          bus: sata\n", d)
			continue
		}
		w("      - name: %s\n        disk:\n          bus: virtio\n", d)
	}
	if len(m.Shares) > 0 {
		w("      filesystems:\n")
		for _, s := range m.Shares {
			w("      - name: %s\n        virtiofs: {}\n", s.Name)
		}
	}
	if len(m.GPUs) > 0 {
		w("      gpus:\n")
		for _, g := range m.GPUs {
			w("      - name: %s\n        deviceName: %s\n", g.Name, g.DeviceName)
		}
	}
	if p := m.Pod; p != nil {
		w("      interfaces:\n      - name: default\n")
		switch {
		case p.Plugin != "":
			w("        binding: {name: %q}\n", p.Plugin)
		case p.Binding != "":
			w("        %s: {}\n", p.Binding)
		default:
			w("        masquerade: {}\n")
		}
		if len(p.Ports) > 0 {
			w("        ports:\n")
			for _, port := range p.Ports {
				w("        - port: %d\n", port)
			}
		}
		if m.Multus != "" {
			w("      - name: second\n        bridge: {}\n")
		}
	}
	if !m.GuestMemory {
		w("    resources:\n      requests:\n        memory: %s\n", m.Memory)
		if m.MemoryLimit != "" {
			w("      limits:\n        memory: %s\n", m.MemoryLimit)
		}
	} else if m.MemoryLimit != "" {
		w("    resources:\n      limits:\n        memory: %s\n", m.MemoryLimit)
	}
	if m.Pod != nil {
		w("  networks:\n  - name: default\n    pod: {}\n")
		if m.Multus != "" {
			w("  - name: second\n    multus:\n      networkName: %s\n", m.Multus)
		}
	}
	w("  volumes:\n  - name: %s\n", m.RootName)
	if m.RootClaim != "" {
		w("    persistentVolumeClaim:\n      claimName: %s\n", m.RootClaim)
	} else {
		w("    containerDisk:\n      image: %s\n", m.Root)
		if m.RootPath != "" {
			w("      path: %q\n", m.RootPath)
		}
	}
	if m.Scratch {
		w("  - name: scratch\n    emptyDisk:\n      capacity: 64Mi\n")
	}
	if m.UserData != "" {
		w("  - name: cloudinit\n    cloudInitNoCloud:\n      userData: |\n")
		for _, l := range strings.SplitAfter(strings.TrimSuffix(m.UserData, "\n"), "\n") {
			w("        %s", strings.TrimSuffix(l, "\n")+"\n")
		}
	}
	for _, s := range m.Shares {
		w("  - name: %s\n    configMap:\n      name: %s\n", s.Name, s.ConfigMap)
	}
	return b.String()
}
