package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Features maps domain.features: ACPI, APIC, SMM, Hyper-V enlightenments,
// KVM hiding and pvspinlock; amd64 always gets vmport off. Secure boot needs
// SMM, so SMM is switched on for it unless the VMI turned it off explicitly,
// which is an error.
type Features struct{ Ctx *facts.Context }

func (f Features) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	out := features(dom)
	spec := vmi.Spec.Domain.Features
	if spec == nil {
		spec = &v1.Features{}
		if arch(vmi, f.Ctx) == "s390x" {
			spec.ACPI.Enabled = new(bool)
		}
	}
	if spec.ACPI.Enabled == nil || *spec.ACPI.Enabled {
		out.ACPI = &libvirtxml.DomainFeature{}
	}
	if spec.APIC != nil && enabled(&spec.APIC.FeatureState) {
		out.APIC = &libvirtxml.DomainFeatureAPIC{}
		if spec.APIC.EndOfInterrupt {
			out.APIC.EOI = "on"
		}
	}
	if enabled(spec.SMM) {
		out.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	if secureBoot(vmi) {
		if spec.SMM != nil && !enabled(spec.SMM) {
			return fmt.Errorf("spec.domain.features.smm: secure boot needs SMM, but it is disabled")
		}
		out.SMM = &libvirtxml.DomainFeatureSMM{State: "on"}
	}
	if h := spec.Hyperv; h != nil {
		hv, err := hyperv(h)
		if err != nil {
			return err
		}
		out.HyperV = hv
	} else if p := spec.HypervPassthrough; p != nil && (p.Enabled == nil || *p.Enabled) {
		out.HyperV = &libvirtxml.DomainFeatureHyperV{Mode: "passthrough"}
	}
	if spec.KVM != nil {
		out.KVM = &libvirtxml.DomainFeatureKVM{
			Hidden: &libvirtxml.DomainFeatureState{State: onOffBool(spec.KVM.Hidden)},
		}
	}
	if spec.Pvspinlock != nil {
		out.PVSpinlock = &libvirtxml.DomainFeatureState{State: onOff(spec.Pvspinlock)}
	}
	if arch(vmi, f.Ctx) == "amd64" {
		out.VMPort = &libvirtxml.DomainFeatureState{State: "off"}
	}
	return nil
}

func onOffBool(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func state(f *v1.FeatureState) *libvirtxml.DomainFeatureState {
	if f == nil {
		return nil
	}
	return &libvirtxml.DomainFeatureState{State: onOff(f)}
}

// hyperv emits an element for every Hyper-V field present in the spec.
func hyperv(h *v1.FeatureHyperv) (*libvirtxml.DomainFeatureHyperV, error) {
	out := &libvirtxml.DomainFeatureHyperV{
		Relaxed:         state(h.Relaxed),
		VAPIC:           state(h.VAPIC),
		VPIndex:         state(h.VPIndex),
		Runtime:         state(h.Runtime),
		Synic:           state(h.SyNIC),
		Reset:           state(h.Reset),
		Frequencies:     state(h.Frequencies),
		ReEnlightenment: state(h.Reenlightenment),
		IPI:             state(h.IPI),
		EVMCS:           state(h.EVMCS),
	}
	if s := h.Spinlocks; s != nil {
		out.Spinlocks = &libvirtxml.DomainFeatureHyperVSpinlocks{
			DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(&s.FeatureState)},
		}
		if enabled(&s.FeatureState) {
			out.Spinlocks.Retries = 4096
			if s.Retries != nil {
				out.Spinlocks.Retries = uint(*s.Retries)
			}
		}
	}
	if t := h.SyNICTimer; t != nil {
		out.STimer = &libvirtxml.DomainFeatureHyperVSTimer{
			DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(&t.FeatureState)},
			Direct:             state(t.Direct),
		}
	}
	if v := h.VendorID; v != nil {
		out.VendorId = &libvirtxml.DomainFeatureHyperVVendorId{
			DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(&v.FeatureState)},
		}
		if enabled(&v.FeatureState) {
			out.VendorId.Value = v.VendorID
		}
	}
	if t := h.TLBFlush; t != nil {
		// libvirt 9.0 knows no direct/extended flushes: refuse them when
		// asked for; left off they are the default anyway.
		if enabled(t.Direct) {
			return nil, fmt.Errorf("spec.domain.features.hyperv.tlbflush.direct: not supported by libvirt 9.0")
		}
		if enabled(t.Extended) {
			return nil, fmt.Errorf("spec.domain.features.hyperv.tlbflush.extended: not supported by libvirt 9.0")
		}
		out.TLBFlush = &libvirtxml.DomainFeatureHyperVTLBFlush{
			DomainFeatureState: libvirtxml.DomainFeatureState{State: onOff(&t.FeatureState)},
		}
	}
	return out, nil
}

// secureBoot reports whether the VMI boots EFI with secure boot (nil
// secureBoot counts as true, as in KubeVirt).
func secureBoot(vmi *v1.VirtualMachineInstance) bool {
	if !isEFI(vmi) {
		return false
	}
	sb := vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot
	return sb == nil || *sb
}
