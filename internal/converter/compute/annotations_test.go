package compute_test

import (
	"fmt"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func annotate(kv ...string) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		if v.Annotations == nil {
			v.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// TestPCIHole64: kubevirt.io/disablePCIHole64 "true" (any case) gives the
// pcie-root controller a 64-bit PCI hole of 0 KiB, on amd64 only.
func TestPCIHole64(t *testing.T) {
	root := `<controller type="pci" index="0" model="pcie-root">`
	hole := `<pcihole64 unit="KiB">0</pcihole64>`
	convtest.Run(t, []convtest.Case{
		{Name: "true", VMI: annotate(v1.DisablePCIHole64, "true"), Contains: []string{root + "\n      " + hole}},
		{Name: "True", VMI: annotate(v1.DisablePCIHole64, "True"), Contains: []string{hole}},
		{Name: "false", VMI: annotate(v1.DisablePCIHole64, "false"), Absent: []string{"pcihole64", root}},
		{Name: "none", Absent: []string{"pcihole64"}},
		{Name: "arm64", VMI: func(v *v1.VirtualMachineInstance) {
			annotate(v1.DisablePCIHole64, "true")(v)
			v.Spec.Architecture = "arm64"
			v.Spec.Domain.Machine.Type = "virt"
		}, Ctx: func(c *facts.Context) { c.EFI = facts.EFI{Code: "/AAVMF_CODE.fd", Vars: "/AAVMF_VARS.fd"} }, Absent: []string{"pcihole64"}},
	})
}

// TestRootComplex: kubevirt.io/placePCIDevicesOnRootComplex "true" puts
// every PCI device without an address on bus 0, slots from 2 up in
// KubeVirt's order (interfaces, host devices, controllers, virtio disks,
// virtio inputs, watchdogs, RNG, balloon), skipping 0x1b and 0x1f and the
// slots given in the spec; no pcie-root-ports are added.
func TestRootComplex(t *testing.T) {
	slotOf := func(a *libvirtxml.DomainAddress) string {
		if a == nil || a.PCI == nil {
			return "none"
		}
		return fmt.Sprintf("%d:%#x", *a.PCI.Bus, *a.PCI.Slot)
	}
	convtest.Run(t, []convtest.Case{
		{Name: "placed", VMI: func(v *v1.VirtualMachineInstance) {
			annotate(v1.PlacePCIDevicesOnRootComplex, "true")(v)
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks,
				v1.Disk{Name: "fixed", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio, PciAddress: "0000:00:03.0"}}},
				v1.Disk{Name: "sata", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}})
			v.Spec.Volumes = append(v.Spec.Volumes,
				v1.Volume{Name: "fixed", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}},
				v1.Volume{Name: "sata", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}})
			v.Spec.Domain.Devices.Rng = &v1.Rng{}
		}, Absent: []string{"pcie-root-port"}, Check: func(t *testing.T, d *libvirtxml.Domain) {
			got := map[string]string{}
			for _, c := range d.Devices.Controllers {
				got[c.Type] = slotOf(c.Address)
			}
			for _, dk := range d.Devices.Disks {
				got[dk.Target.Dev] = slotOf(dk.Address)
			}
			got["rng"] = slotOf(d.Devices.RNGs[0].Address)
			got["balloon"] = slotOf(d.Devices.MemBalloon.Address)
			// The USB controller of model none takes slot 2 without an
			// address (libvirt drops one on it, KubeVirt writes it).
			want := map[string]string{"usb": "none", "scsi": "0:0x4", "virtio-serial": "0:0x5", "vda": "0:0x6", "vdb": "0:0x3",
				"sda": "none", "rng": "0:0x7", "balloon": "0:0x8"}
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%s at %s, want %s (all: %v)", k, got[k], w, got)
				}
			}
		}},
		{Name: "false", VMI: annotate(v1.PlacePCIDevicesOnRootComplex, "false"), Contains: []string{"pcie-root-port"}},
	})
}

// TestIgnition: an ignition annotation holding "ignition" is handed to the
// guest as QEMU's fw_cfg entry opt/com.coreos/config, read from the file the
// launcher writes under the ephemeral disk directory.
func TestIgnition(t *testing.T) {
	data := `{"ignition":{"version":"3.3.0"}}`
	convtest.Run(t, []convtest.Case{
		{Name: "ignition", VMI: annotate(v1.IgnitionAnnotation, data), Contains: []string{
			`<commandline xmlns="http://libvirt.org/schemas/domain/qemu/1.0">`,
			`<arg value="-fw_cfg"></arg>`,
			`<arg value="name=opt/com.coreos/config,file=/var/run/kubevirt-ephemeral-disks/ignition-data/default/testvmi/data.ign"></arg>`}},
		{Name: "not ignition", VMI: annotate(v1.IgnitionAnnotation, `{"foo":1}`), Absent: []string{"commandline", "fw_cfg"}},
		{Name: "none", Absent: []string{"commandline"}},
	})
}

// TestRefusedAnnotations: annotations of KubeVirt's launcher that change
// what it does and that this launcher does not do fail the conversion,
// naming the annotation.
func TestRefusedAnnotations(t *testing.T) {
	var cases []convtest.Case
	for _, a := range []string{v1.FuncTestForceLauncherMigrationFailureAnnotation, v1.FuncTestBlockLauncherPrepareMigrationTargetAnnotation,
		v1.FuncTestMemoryHotplugFailAnnotation} {
		cases = append(cases, convtest.Case{Name: a, VMI: annotate(a, ""), Err: "metadata.annotations[" + a + "]: not supported"})
	}
	convtest.Run(t, cases)
}
