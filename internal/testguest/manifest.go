package testguest

import (
	"fmt"
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
// user-data script and the pod network. vlctl testguest, the pod harness
// (internal/launchertest) and the tests that patch a running manifest
// render it here.
type Manifest struct {
	Name, Namespace, UID string
	// Grace is terminationGracePeriodSeconds; 0 leaves it out.
	Grace int
	// Kernel is the kernelBoot container's image (a directory for vlctl
	// run, a reference where a handler mounts it); KernelPath and
	// InitrdPath are the files in it, default /vmlinuz and /initrd.img.
	Kernel, KernelPath, InitrdPath string
	// Cmdline is the kernel's arguments; "" leaves kernelArgs out.
	Cmdline string
	// EFI boots by EFI firmware (secure boot off) instead of BIOS; TPM adds
	// devices.tpm.
	EFI, TPM Device
	// Memory is the memory request, default 256Mi.
	Memory string
	// RootName is the root disk's name, default "rootdisk"; Root its
	// containerDisk image and RootPath, if set, its containerDisk.path.
	RootName, Root, RootPath string
	// Scratch adds an emptyDisk "scratch" of 64Mi.
	Scratch bool
	// UserData, if set, is the cloud-init NoCloud user-data (disk
	// "cloudinit").
	UserData string
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
	w("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: %s\n", m.Name)
	if m.Namespace != "" {
		w("  namespace: %s\n", m.Namespace)
	}
	if m.UID != "" {
		w("  uid: %s\n", m.UID)
	}
	w("spec:\n")
	if m.Grace > 0 {
		w("  terminationGracePeriodSeconds: %d\n", m.Grace)
	}
	w("  domain:\n    firmware:\n")
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
		w("      - name: %s\n        disk:\n          bus: virtio\n", d)
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
	w("    resources:\n      requests:\n        memory: %s\n", m.Memory)
	if m.Pod != nil {
		w("  networks:\n  - name: default\n    pod: {}\n")
		if m.Multus != "" {
			w("  - name: second\n    multus:\n      networkName: %s\n", m.Multus)
		}
	}
	w("  volumes:\n  - name: %s\n    containerDisk:\n      image: %s\n", m.RootName, m.Root)
	if m.RootPath != "" {
		w("      path: %q\n", m.RootPath)
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
	return b.String()
}
