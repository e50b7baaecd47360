package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestFeatures(t *testing.T) {
	on := &v1.FeatureState{Enabled: convtest.Ptr(true)}
	off := &v1.FeatureState{Enabled: convtest.Ptr(false)}
	convtest.Run(t, []convtest.Case{
		{Name: "acpi and vmport", Contains: []string{"<acpi></acpi>", `<vmport state="off">`}, Absent: []string{"<apic", "<smm", "<hyperv"}},
		{Name: "acpi off", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Features.ACPI.Enabled = convtest.Ptr(false) },
			Absent: []string{"<acpi>"}},
		{Name: "nil features keep acpi", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Features = nil },
			Contains: []string{"<acpi></acpi>"}},
		{Name: "apic smm pvspinlock kvm", VMI: func(v *v1.VirtualMachineInstance) {
			f := v.Spec.Domain.Features
			f.APIC = &v1.FeatureAPIC{EndOfInterrupt: true}
			f.SMM = on
			f.Pvspinlock = off
			f.KVM = &v1.FeatureKVM{Hidden: true}
		}, Contains: []string{`<apic eoi="on">`, `<smm state="on">`, `<pvspinlock state="off">`, `<kvm>`, `<hidden state="on">`}},
		{Name: "disabled apic and smm are left out", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Features.APIC = &v1.FeatureAPIC{FeatureState: *off}
			v.Spec.Domain.Features.SMM = off
		}, Absent: []string{"<apic", "<smm"}},
		{Name: "hyperv", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{
				Relaxed: on, VAPIC: on, VPIndex: on, Runtime: off, SyNIC: on, Reset: on, Frequencies: on, Reenlightenment: on, IPI: on, EVMCS: off,
				Spinlocks:  &v1.FeatureSpinlocks{FeatureState: *on, Retries: convtest.Ptr(uint32(8191))},
				SyNICTimer: &v1.SyNICTimer{FeatureState: *on, Direct: on},
				VendorID:   &v1.FeatureVendorID{FeatureState: *on, VendorID: "KVMKVMKVM"},
				TLBFlush:   &v1.TLBFlush{FeatureState: *on, Direct: off, Extended: off},
			}
		}, Contains: []string{`<relaxed state="on">`, `<vapic state="on">`, `<spinlocks state="on" retries="8191">`, `<runtime state="off">`,
			`<stimer state="on">`, `<direct state="on">`, `<vendor_id state="on" value="KVMKVMKVM">`, `<tlbflush state="on">`, `<evmcs state="off">`}},
		{Name: "tlbflush direct refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{TLBFlush: &v1.TLBFlush{FeatureState: *on, Direct: on}}
		}, Err: "spec.domain.features.hyperv.tlbflush.direct: not supported"},
		{Name: "spinlocks default retries", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{Spinlocks: &v1.FeatureSpinlocks{}}
		}, Contains: []string{`<spinlocks state="on" retries="4096">`}},
		{Name: "hyperv passthrough", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Features.HypervPassthrough = &v1.HyperVPassthrough{Enabled: convtest.Ptr(true)}
		}, Contains: []string{`<hyperv mode="passthrough">`}},
		{Name: "secure boot switches smm on", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
		}, Contains: []string{`<smm state="on">`, `secure="yes"`}},
		{Name: "secure boot with smm off", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: convtest.Ptr(true)}}
			v.Spec.Domain.Features.SMM = off
		}, Err: "spec.domain.features.smm: secure boot needs SMM"},
		{Name: "no vmport on arm64", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Architecture = "arm64"
			v.Spec.Domain.Machine.Type = "virt"
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: convtest.Ptr(false)}}
		}, Absent: []string{"vmport"}},
	})
}
