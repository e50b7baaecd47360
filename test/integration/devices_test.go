package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestGuestSeesDevices boots the test guest with a disk at a PCI address
// of its own, a tagged interface, its cloud-init on a ConfigDrive, Ignition
// data and a pvpanic device, and reads what the guest found: the disk at
// the spec's address, the ConfigDrive's meta_data.json naming the tagged
// interface at the address the guest sees it at, the Ignition data in
// fw_cfg. Then the guest panics: the launcher sends the GuestPanicked
// event and a Domain counting one panic, as KubeVirt's does.
func TestGuestSeesDevices(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "devs", podOpts{SharedCaps: true, Network: true})
	// The console shows the script too: each marker is split in it.
	p.ExtraUserData = []string{
		// The guest names virtio disks in the order it finds them on the
		// PCI buses, not by libvirt's target names: the disk is found by
		// its serial.
		`for b in /sys/block/vd*; do [ "$(cat $b/serial)" = scratch-pci ] && echo "VL-""PCI scratch $(basename $(readlink -f $b/device/..))"; done`,
		`echo "VL-""PCI eth0 $(basename $(readlink -f /sys/class/net/eth0/device/..))"`,
		`echo "VL-""IGNITION $(cat /sys/firmware/qemu_fw_cfg/by_name/opt/com.coreos/config/raw 2>&1)"`,
		`echo "VL-""PVPANIC $(ls /sys/bus/platform/drivers/pvpanic-mmio 2>&1 | tr '\n' ' ')"`,
		"sleep 1",
		"echo c >/proc/sysrq-trigger",
	}
	p.Start()
	p.WaitReady(30 * time.Second)
	s := p.Notify(notifytest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("devs-1")
	const ignition = `{"ignition":{"version":"3.3.0"}}`
	v.Annotations = map[string]string{v1.IgnitionAnnotation: ignition}
	for i := range v.Spec.Domain.Devices.Disks {
		if d := &v.Spec.Domain.Devices.Disks[i]; d.Name == "scratch" {
			d.Disk.PciAddress = "0000:00:0a.0"
			d.Serial = "scratch-pci"
		}
	}
	v.Spec.Domain.Devices.Interfaces[0].Tag = "frontend"
	for i := range v.Spec.Volumes {
		if vol := &v.Spec.Volumes[i]; vol.CloudInitNoCloud != nil {
			vol.CloudInitConfigDrive = &v1.CloudInitConfigDriveSource{UserData: vol.CloudInitNoCloud.UserData}
			vol.CloudInitNoCloud = nil
		}
	}
	v.Spec.Domain.Devices.PanicDevices = []v1.PanicDevice{{}}
	launchertest.Must(t, c.Sync(ctx, v, nil))

	p.WaitConsole("VL-PVPANIC", 2*bootTimeout)
	out := p.Console()
	if got, _ := testguest.FindMarker(out, "VL-PCI scratch"); strings.TrimSpace(got) != "0000:00:0a.0" {
		t.Errorf("the guest sees the scratch disk at %q, want the spec's 0000:00:0a.0", got)
	}
	eth0, _ := testguest.FindMarker(out, "VL-PCI eth0")
	eth0 = strings.TrimSpace(eth0)
	meta, ok := testguest.Between(out, testguest.MarkerMetaDataBegin, testguest.MarkerMetaDataEnd)
	var md struct {
		Devices []struct {
			Type, Bus, Address, MAC string
			Tags                    []string
		}
	}
	if !ok || json.Unmarshal([]byte(strings.TrimSpace(meta)), &md) != nil || len(md.Devices) != 1 {
		t.Fatalf("meta_data.json as the guest read it: %q", meta)
	}
	if d := md.Devices[0]; d.Type != "nic" || d.Bus != "pci" || d.Address != eth0 || d.MAC == "" || strings.Join(d.Tags, ",") != "frontend" {
		t.Errorf("device metadata %+v; the guest sees eth0 at %q", d, eth0)
	}
	if got, _ := testguest.FindMarker(out, "VL-IGNITION"); strings.TrimSpace(got) != ignition {
		t.Errorf("fw_cfg opt/com.coreos/config: %q, want %q", got, ignition)
	}
	if got, _ := testguest.FindMarker(out, "VL-PVPANIC"); !strings.Contains(got, "QEMU0001") {
		t.Errorf("no pvpanic device bound in the guest: %q", got)
	}

	// The panic: one GuestPanicked event, and the Domain counts it.
	waitEvent(t, s, 0, "a Domain with PanicCount 1", func(e notifytest.Event) bool {
		return e.Domain.Status.PanicCount == 1 && e.Domain.Status.GuestPanicInfo != nil && e.Domain.Status.GuestPanicInfo.Type == "unknown"
	})
	var panics []string
	for _, e := range s.Events() {
		if e.K8s != nil && e.K8s.Reason == "GuestPanicked" {
			panics = append(panics, e.K8s.Type+" "+e.K8s.Message)
		}
	}
	if len(panics) != 1 || panics[0] != "Warning GuestPanicked (details unavailable)" {
		t.Errorf("GuestPanicked events %q, want one Warning with KubeVirt's message", panics)
	}
	// The crashed domain is destroyed (libvirt's on_crash default): the
	// launcher ends as after any abnormal end of QEMU.
	if code := p.ExitCode(60 * time.Second); code != 1 {
		t.Errorf("launcher exit status %d after the guest crashed, want 1", code)
	}
	p.AssertNothingLeft()
}
