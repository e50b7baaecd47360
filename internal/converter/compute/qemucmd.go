package compute

import (
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Ignition hands the kubevirt.io/ignitiondata annotation to the guest as
// QEMU's fw_cfg entry opt/com.coreos/config, where Ignition (Fedora CoreOS,
// RHCOS) looks for its configuration. As in KubeVirt, only data containing
// "ignition" is passed; the launcher writes the file (disks.Prepare) before
// the define. KubeVirt's API server accepts the annotation only with the
// ExperimentalIgnitionSupport feature gate; its launcher does not check.
type Ignition struct{ Ctx *facts.Context }

func (g Ignition) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	data := vmi.Annotations[v1.IgnitionAnnotation]
	if data == "" || !strings.Contains(data, "ignition") {
		return nil
	}
	if dom.QEMUCommandline == nil {
		dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
	}
	dom.QEMUCommandline.Args = append(dom.QEMUCommandline.Args,
		libvirtxml.DomainQEMUCommandlineArg{Value: "-fw_cfg"},
		libvirtxml.DomainQEMUCommandlineArg{Value: "name=opt/com.coreos/config,file=" + g.Ctx.Layout.IgnitionFile(vmi.Namespace, vmi.Name)})
	return nil
}
