package compute

import (
	"fmt"
	"strconv"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// VSOCK adds a virtio vsock device with the CID virt-controller allocated
// (status.VSOCKCID), which it does only for VMIs with autoattachVSOCK.
type VSOCK struct{ Ctx *facts.Context }

func (s VSOCK) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	cid := vmi.Status.VSOCKCID
	if cid == nil {
		return nil
	}
	if *cid < 3 {
		return fmt.Errorf("status.VSOCKCID: %d is reserved (guest CIDs start at 3)", *cid)
	}
	devices(dom).VSock = &libvirtxml.DomainVSock{
		Model: virtioModel(vmi, s.Ctx),
		CID:   &libvirtxml.DomainVSockCID{Auto: "no", Address: strconv.FormatUint(uint64(*cid), 10)},
	}
	return nil
}
