package compute_test

// Table tests of the small device configurators: one test per file
// (tpm.go, channels.go, rng.go, input.go, balloon.go, graphics.go, sound.go,
// watchdog.go, console.go, panic.go, usbredir.go, reboot.go, hypervisor.go,
// vsock.go).

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
)

const priv = "/var/run/kubevirt-private/" + convtest.UID

func TestTPM(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<tpm"}},
		{Name: "tis", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.TPM = &v1.TPMDevice{} },
			Contains: []string{`<tpm model="tpm-tis">`, `<backend type="emulator" version="2.0">`}},
		{Name: "persistent crb", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Persistent: convtest.Ptr(true)}
		},
			Contains: []string{`<tpm model="tpm-crb">`, `persistent_state="yes"`}},
		{Name: "disabled", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Enabled: convtest.Ptr(false)}
		},
			Absent: []string{"<tpm"}},
	})
}

func TestChannels(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "guest agent", Contains: []string{`<channel type="unix">`, `<target type="virtio" name="org.qemu.guest_agent.0">`}, Absent: []string{"vhostmd"}},
		{Name: "downward metrics", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.DownwardMetrics = &v1.DownwardMetrics{} },
			Contains: []string{`<source mode="bind" path="/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock">`, `name="org.github.vhostmd.1"`}},
	})
}

func TestRNG(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<rng"}},
		{Name: "urandom", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Rng = &v1.Rng{} },
			Contains: []string{`<rng model="virtio-non-transitional">`, `<backend model="random">/dev/urandom</backend>`}},
		{Name: "transitional", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Rng = &v1.Rng{}
			v.Spec.Domain.Devices.UseVirtioTransitional = convtest.Ptr(true)
		}, Contains: []string{`<rng model="virtio-transitional">`}},
	})
}

func TestInput(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none on amd64", Absent: []string{"<input"}, Contains: []string{`<controller type="usb" index="0" model="none">`}},
		{Name: "usb tablet needs xhci", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "tablet", Type: v1.InputTypeTablet, Bus: v1.InputBusUSB}}
		}, Contains: []string{`<input type="tablet" bus="usb">`, `<alias name="ua-tablet">`, `<controller type="usb" index="0" model="qemu-xhci">`}},
		{Name: "virtio tablet", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "t", Type: v1.InputTypeTablet, Bus: v1.InputBusVirtio}}
		}, Contains: []string{`<input type="tablet" bus="virtio" model="virtio">`, `model="none"`}},
		{Name: "keyboard refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "k", Type: v1.InputTypeKeyboard}}
		}, Err: `spec.domain.devices.inputs[0].type: "keyboard" is not supported`},
		{Name: "bad bus", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "t", Type: v1.InputTypeTablet, Bus: "ps2"}}
		}, Err: "spec.domain.devices.inputs[0].bus"},
	})
}

func TestBalloon(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "default", Contains: []string{`<memballoon model="virtio-non-transitional" freePageReporting="on">`, `<stats period="10">`}},
		{Name: "off", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.AutoattachMemBalloon = convtest.Ptr(false) },
			Contains: []string{`<memballoon model="none">`}, Absent: []string{"<stats"}},
		{Name: "no stats, no reporting", Ctx: func(c *facts.Context) { c.MemBalloonStatsPeriod = 0; c.FreePageReportingDisabled = true },
			Contains: []string{`freePageReporting="off"`}, Absent: []string{"<stats"}},
		{Name: "annotation disables reporting", VMI: func(v *v1.VirtualMachineInstance) {
			v.Annotations = map[string]string{"kubevirt.io/free-page-reporting-disabled": "true"}
		}, Contains: []string{`freePageReporting="off"`}},
		{Name: "dedicated cpus disable reporting", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.DedicatedCPUPlacement = true },
			Ctx: func(c *facts.Context) { c.CPUSet = []uint{2} }, Contains: []string{`freePageReporting="off"`}},
	})
}

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

func TestSound(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "ich9 default", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "audio"} },
			Contains: []string{`<sound model="ich9">`, `<alias name="ua-audio">`}},
		{Name: "ac97", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "a", Model: "ac97"}
		},
			Contains: []string{`<sound model="ac97">`}},
		{Name: "unknown", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "a", Model: "sb16"}
		},
			Err: "spec.domain.devices.sound.model"},
	})
}

func TestWatchdog(t *testing.T) {
	wd := func(a v1.WatchdogAction) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd", WatchdogDevice: v1.WatchdogDevice{I6300ESB: &v1.I6300ESBWatchdog{Action: a}}}
		}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "reset default", VMI: wd(""), Contains: []string{`<watchdog model="i6300esb" action="reset">`, `<alias name="ua-wd">`}},
		{Name: "poweroff", VMI: wd(v1.WatchdogActionPoweroff), Contains: []string{`action="poweroff"`}},
		{Name: "bad action", VMI: wd("explode"), Err: "spec.domain.devices.watchdog.action"},
		{Name: "no model", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd"} },
			Err: "spec.domain.devices.watchdog: no watchdog model supported on amd64"},
	})
}

func TestConsole(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "serial with log", Contains: []string{`<source mode="bind" path="` + priv + `/virt-serial0">`,
			`<log file="` + priv + `/virt-serial0-log" append="on">`, `<console type="pty">`, `<target type="serial" port="0">`,
			`<controller type="virtio-serial" index="0"`}},
		{Name: "cluster disables the log", Ctx: func(c *facts.Context) { c.SerialConsoleLogDisabled = true }, Absent: []string{"<log"}},
		{Name: "vmi disables the log", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.LogSerialConsole = convtest.Ptr(false) }, Absent: []string{"<log"}},
		{Name: "vmi enables the log over the cluster", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.LogSerialConsole = convtest.Ptr(true) },
			Ctx: func(c *facts.Context) { c.SerialConsoleLogDisabled = true }, Contains: []string{"<log"}},
		{Name: "off", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachSerialConsole = convtest.Ptr(false)
		},
			Absent: []string{"<serial", "<console", "virtio-serial"}},
	})
}

func TestPanic(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "models", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.PanicDevices = []v1.PanicDevice{{Model: convtest.Ptr(v1.Isa)}, {Model: convtest.Ptr(v1.Hyperv)}}
		}, Contains: []string{`<panic model="isa">`, `<panic model="hyperv">`}},
		{Name: "bad model", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.PanicDevices = []v1.PanicDevice{{Model: convtest.Ptr(v1.PanicDeviceModel("s390"))}}
		}, Err: "spec.domain.devices.panicDevices[0].model"},
	})
}

func TestUSBRedir(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "four sockets", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.ClientPassthrough = &v1.ClientPassthroughDevices{}
		},
			Contains: []string{`<redirdev type="unix" bus="usb">`, `path="` + priv + `/virt-usbredir-0"`, `path="` + priv + `/virt-usbredir-3"`, `model="qemu-xhci"`},
			Absent:   []string{"virt-usbredir-4"}},
	})
}

func TestRebootPolicy(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "unset", Absent: []string{"on_reboot"}},
		{Name: "terminate", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicyTerminate)
		},
			Contains: []string{"<on_reboot>destroy</on_reboot>"}},
		{Name: "reboot", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicyReboot) },
			Contains: []string{"<on_reboot>restart</on_reboot>"}},
		{Name: "bad", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicy("Later"))
		},
			Err: "spec.domain.rebootPolicy"},
	})
}

func TestHypervisor(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "kvm", Contains: []string{`<domain type="kvm">`}},
		{Name: "emulation", Emulation: true, Contains: []string{`<domain type="qemu">`}},
		{Name: "launch security refused", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.LaunchSecurity = &v1.LaunchSecurity{SEV: &v1.SEV{}} },
			Err: "spec.domain.launchSecurity: not supported"},
		{Name: "virtiofs refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "fs", Virtiofs: &v1.FilesystemVirtiofs{}}}
		}, Err: "spec.domain.devices.filesystems: virtiofs is not supported"},
	})
}

func TestVSOCK(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<vsock"}},
		{Name: "cid from status", VMI: func(v *v1.VirtualMachineInstance) { v.Status.VSOCKCID = convtest.Ptr(uint32(123)) },
			Contains: []string{`<vsock model="virtio-non-transitional">`, `<cid auto="no" address="123">`}},
		{Name: "reserved cid", VMI: func(v *v1.VirtualMachineInstance) { v.Status.VSOCKCID = convtest.Ptr(uint32(2)) },
			Err: "status.VSOCKCID: 2 is reserved"},
	})
}
