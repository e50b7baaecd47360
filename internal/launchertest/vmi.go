package launchertest

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// VMISpec names what varies in the test VMI.
type VMISpec struct {
	Name, Namespace, UID string
	Token                string // the user-data script prints "token <Token>"
	// PodNetwork adds a masquerade interface on the pod network; without
	// it the VMI has no interface (autoattachPodInterface: false).
	PodNetwork bool
	// Plugin, with PodNetwork, binds the pod network's interface to this
	// network binding plugin instead of masquerade.
	Plugin string
	// ExtraUserData lines are appended to the user-data script.
	ExtraUserData []string
	// KernelArgs are appended to the test guest's default command line
	// (without DHCP).
	KernelArgs []string
	// DiskPath is the root volume's containerDisk.path (default: none).
	DiskPath string
	// KernelPath and InitrdPath are the kernelBoot container's paths
	// (default /vmlinuz and /initrd.img).
	KernelPath, InitrdPath string
	// EFI boots by EFI firmware (OVMF, secure boot off) instead of BIOS,
	// with the guest's EFI-stub kernel; PersistentEFI also sets
	// efi.persistent (NVRAM on the backend-storage volume in KubeVirt).
	EFI, PersistentEFI bool
	// TPM adds devices.tpm: {}; PersistentTPM makes it persistent: true.
	TPM, PersistentTPM bool
}

// VMIYAML is the test VMI (testguest.Manifest): the test guest from a
// containerDisk with kernelBoot, an emptyDisk "scratch" and a cloud-init
// NoCloud volume.
func VMIYAML(s VMISpec) string {
	m := testguest.Manifest{
		Meta:   testguest.Meta{Name: s.Name, Namespace: s.Namespace, UID: s.UID},
		Boot:   testguest.Boot{Kernel: "registry.example/testguest-kernel:v1", KernelPath: s.KernelPath, InitrdPath: s.InitrdPath, Cmdline: strings.Join(append([]string{testguest.DefaultCmdline, testguest.OptNoDHCP}, s.KernelArgs...), " ")},
		Sizing: testguest.Sizing{Memory: "128Mi"},
		Disks:  testguest.Disks{RootName: "root", Root: "registry.example/testguest-root:v1", RootPath: s.DiskPath, Scratch: true, UserData: fmt.Sprintf("#!/bin/sh\necho \"token %s\"\n", s.Token) + strings.Join(s.ExtraUserData, "\n")},
		Grace:  30,
	}
	if s.PodNetwork {
		m.Pod = &testguest.Interface{Plugin: s.Plugin}
	}
	if s.EFI || s.PersistentEFI {
		// OVMF loading the kernel faults with 128 MiB.
		m.EFI, m.Memory = testguest.On, "256Mi"
		if s.KernelPath == "" {
			m.KernelPath = "/" + testguest.EFIKernelName
		}
		if s.PersistentEFI {
			m.EFI = testguest.Persistent
		}
	}
	switch {
	case s.PersistentTPM:
		m.TPM = testguest.Persistent
	case s.TPM:
		m.TPM = testguest.On
	}
	return m.YAML()
}

// VMIYAML is the pod's test VMI (its name, namespace, uid, network and
// extra user data) printing token.
func (p *Pod) VMIYAML(token string, kernelArgs ...string) string {
	s := VMISpec{Name: p.Name, Namespace: p.NS, UID: p.UID, Token: token,
		PodNetwork: p.opts.Network, Plugin: p.opts.NetworkPlugin, ExtraUserData: p.ExtraUserData, KernelArgs: kernelArgs}
	if iv := p.opts.ImageVolume; iv != nil {
		s.DiskPath, s.KernelPath, s.InitrdPath = iv.DiskPath, iv.KernelPath, iv.InitrdPath
	}
	return VMIYAML(s)
}

// VMI is VMIYAML loaded as virt-api would store it.
func (p *Pod) VMI(token string, kernelArgs ...string) *v1.VirtualMachineInstance {
	p.T.Helper()
	v, err := vmiLoad(p.VMIYAML(token, kernelArgs...))
	if err != nil {
		p.T.Fatal(err)
	}
	return v
}

// VMIWith is the pod's test VMI as s describes it, s's identity, network
// and extra user data taken from the pod; loaded as virt-api would store it.
func (p *Pod) VMIWith(s VMISpec) *v1.VirtualMachineInstance {
	p.T.Helper()
	s.Name, s.Namespace, s.UID = p.Name, p.NS, p.UID
	s.PodNetwork, s.Plugin, s.ExtraUserData = p.opts.Network, p.opts.NetworkPlugin, p.ExtraUserData
	v, err := vmiLoad(VMIYAML(s))
	if err != nil {
		p.T.Fatal(err)
	}
	return v
}
