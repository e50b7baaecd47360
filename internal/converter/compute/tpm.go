package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// TPM adds an emulated TPM 2.0 when devices.tpm is present and not disabled:
// tpm-tis normally, tpm-crb with persistent state when persistent is set.
type TPM struct{}

func (TPM) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	t := vmi.Spec.Domain.Devices.TPM
	if t == nil || (t.Enabled != nil && !*t.Enabled) {
		return nil
	}
	tpm := libvirtxml.DomainTPM{
		Model: "tpm-tis",
		Backend: &libvirtxml.DomainTPMBackend{
			Emulator: &libvirtxml.DomainTPMBackendEmulator{Version: "2.0"},
		},
	}
	if t.Persistent != nil && *t.Persistent {
		tpm.Model = "tpm-crb"
		tpm.Backend.Emulator.PersistentState = "yes"
	}
	devices(dom).TPMs = append(devices(dom).TPMs, tpm)
	return nil
}
