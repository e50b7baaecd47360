package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestGraphics(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "vnc socket and vga", Contains: []string{`<listen type="socket" socket="` + priv + `/virt-vnc">`, `<model type="vga" heads="1" vram="16384">`}},
		{Name: "off", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachGraphicsDevice = convtest.Ptr(false)
		},
			Absent: []string{"<graphics", "<video"}},
		{Name: "spec video type", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Video = &v1.VideoDevice{Type: "virtio"} },
			Contains: []string{`<model type="virtio" heads="1">`}},
		{Name: "arm64 virtio video and usb inputs", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Architecture = "arm64"
			v.Spec.Domain.Machine.Type = "virt"
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: convtest.Ptr(false)}}
		}, Contains: []string{`<model type="virtio" heads="1">`, `<input type="tablet" bus="usb">`, `<input type="keyboard" bus="usb">`, `model="qemu-xhci"`}},
		{Name: "no uid", VMI: func(v *v1.VirtualMachineInstance) { v.UID = "" }, Err: "metadata.uid"},
	})
}
