package compute

import (
	"bytes"
	"encoding/xml"
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Metadata names the domain "<namespace>_<name>" and records the VMI's UID and
// grace period in a KubeVirt metadata block, so that a restarted launcher can
// recover them from the domain itself.
type Metadata struct{}

type kubevirtMetadata struct {
	XMLName     xml.Name `xml:"http://kubevirt.io kubevirt"`
	UID         string   `xml:"uid"`
	GracePeriod struct {
		Seconds int64 `xml:"deletionGracePeriodSeconds"`
	} `xml:"graceperiod"`
}

func (Metadata) Configure(v *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if v.Name == "" {
		return fmt.Errorf("metadata.name: must not be empty")
	}
	ns := v.Namespace
	if ns == "" {
		ns = "default"
	}
	dom.Name = ns + "_" + v.Name

	md := kubevirtMetadata{UID: string(v.UID)}
	if g := v.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		return fmt.Errorf("spec.terminationGracePeriodSeconds: %d is negative", *g)
	}
	md.GracePeriod.Seconds = vmi.GracePeriodSeconds(v)
	var buf bytes.Buffer
	if err := xml.NewEncoder(&buf).Encode(md); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	dom.Metadata = &libvirtxml.DomainMetadata{XML: buf.String()}
	return nil
}
