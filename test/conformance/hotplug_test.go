package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// hotplugVMI is the VMI as virt-handler sends it during a volume hotplug
// (`virtctl addvolume`): the disk and the hotpluggable PVC in the spec, and
// the volume's status with its phase (MountedToPod once virt-handler has
// mounted the volume into the pod's hotplug-disks directory).
type hotplugVMI struct {
	base []byte // the VMI without hotplugged volumes
}

type hotVolume struct {
	name   string
	disk   v1.Disk
	phase  v1.VolumePhase
	target string // the status's target, once virt-handler has read it
	// pvcSize, when set, is the PVC's capacity and request in the
	// status (the file system overhead 0), as virt-controller reports it.
	pvcSize string
}

func (b hotplugVMI) with(t *testing.T, vols ...hotVolume) []byte {
	t.Helper()
	var v v1.VirtualMachineInstance
	launchertest.Must(t, json.Unmarshal(b.base, &v))
	for _, hv := range vols {
		d := hv.disk
		d.Name = hv.name
		if _, ok := diskNamed(v.Spec.Domain.Devices.Disks, hv.name); !ok {
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, d)
		}
		v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: hv.name, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true,
				PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: hv.name + "-claim"}}}})
		st := v1.VolumeStatus{Name: hv.name, Phase: hv.phase, Target: hv.target,
			HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-volume-" + hv.name}}
		if hv.pvcSize != "" {
			q, zero := resource.MustParse(hv.pvcSize), v1.Percent("0")
			st.PersistentVolumeClaimInfo = &v1.PersistentVolumeClaimInfo{ClaimName: hv.name + "-claim", FilesystemOverhead: &zero,
				Capacity: k8sv1.ResourceList{k8sv1.ResourceStorage: q}, Requests: k8sv1.ResourceList{k8sv1.ResourceStorage: q}}
		}
		v.Status.VolumeStatus = append(v.Status.VolumeStatus, st)
	}
	out, err := json.Marshal(&v)
	launchertest.Must(t, err)
	return out
}

func diskNamed(disks []v1.Disk, name string) (v1.Disk, bool) {
	for _, d := range disks {
		if d.Name == name {
			return d, true
		}
	}
	return v1.Disk{}, false
}

// hotplugImage places a volume's image in the pod's hotplug-disks
// directory as virt-handler mounts it there (owned by QEMU's user), filled
// with fill at its start.
func hotplugImage(t *testing.T, p *pod, name string, size int64, fill []byte) string {
	t.Helper()
	path := p.Layout.HotplugFile(name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	launchertest.Must(t, err)
	_, err = f.Write(fill)
	launchertest.Must(t, err)
	launchertest.Must(t, f.Truncate(size))
	launchertest.Must(t, f.Close())
	launchertest.Must(t, os.Chown(path, int(env.Cred.Uid), int(env.Cred.Gid)))
	return path
}

// domainDisk finds a disk by its VMI name in GetDomain's answer.
func domainDisk(t *testing.T, h *handler, name string) (kvshape.Disk, bool) {
	t.Helper()
	data, err := h.getDomain(t)
	launchertest.Must(t, err)
	d, err := kvshape.Decode([]byte(data))
	launchertest.Must(t, err)
	for _, disk := range d.Spec.Devices.Disks {
		if disk.Alias != nil && disk.Alias.Name == name {
			return disk, true
		}
	}
	return kvshape.Disk{}, false
}

// guestAnswer types cmd on the guest's console until re matches what the
// console printed after the first try, and returns the submatches. The
// command's own echo must not match re (build re from the output only).
func guestAnswer(t *testing.T, p *pod, what, cmd string, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	from := len(p.Console())
	deadline := time.Now().Add(timeout)
	for {
		typeOnConsole(t, p, cmd+"\n")
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
			if m := re.FindStringSubmatch(p.Console()[from:]); m != nil {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the guest did not answer %s within %v; console:\n%s", what, re, timeout, launchertest.Tail(p.Console(), 2000))
		}
	}
}

// qemuHasOpen reports whether QEMU holds path open.
func qemuHasOpen(t *testing.T, p *pod, path string) bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", p.QemuPid())
	ents, err := os.ReadDir(dir)
	launchertest.Must(t, err)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == path {
			return true
		}
	}
	return false
}

// TestHotplug plays `virtctl addvolume` / `removevolume` as
// virt-handler drives them: a hotplugged PVC's disk appears in
// the running guest with its size and serial, data the guest writes
// survives an unplug (made while the guest writes to it: the Sync answers
// only after QEMU has let go of the file) and a replug; the disk grows in
// the guest when its PVC is expanded; a virtio disk comes and goes the
// same way, and a block-mode volume (a loop device), grown too; a vCPU is added (SyncVirtualMachineCPUs), and memory
// (SyncVirtualMachineMemory, virtio-mem); a CD-ROM medium is
// inserted into an empty drive and ejected; a change that is not possible
// fails the Sync naming the disk and leaves the domain as it was.
func TestHotplug(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	p := startPod(t, "conf-hotplug", false)
	h, s := start(t, p)
	// The VMI has an empty CD-ROM drive from the start, as a VM made
	// for declarative CD-ROM hotplug does.
	// It can also take memory: 256 MiB at boot (a guest NUMA node and the
	// hotplug range need more than the 128 MiB the test guest has by
	// default), up to 512 MiB (the guest onlines what is plugged).
	var v v1.VirtualMachineInstance
	launchertest.Must(t, json.Unmarshal(handlerVMI(t, p, testguest.OptNoAgent, "memhp_default_state=online"), &v))
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "cd",
		DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}}})
	boot, maxGuest := resource.MustParse("256Mi"), resource.MustParse("512Mi")
	v.Spec.Domain.Memory = &v1.Memory{Guest: &boot, MaxGuest: &maxGuest}
	v.Status.Memory = &v1.MemoryStatus{GuestAtBoot: &boot, GuestCurrent: &boot}
	base, err := json.Marshal(&v)
	launchertest.Must(t, err)
	b := hotplugVMI{base: base}

	if err := h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, base); err != nil {
		t.Fatalf("%v", err)
	}
	s.wait(t, 0, "MODIFIED Running", bootTimeout, func(d *kvshape.Domain) bool { return d.Status.Status == "Running" })
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	t.Logf("guest ready after %v", time.Since(t0))

	const size = 32 << 20
	marker := fmt.Sprintf("VL-HP-DATA-%d", time.Now().UnixNano()%1e9)
	img := hotplugImage(t, p, "hp", size, nil)
	scsi := v1.Disk{Serial: "VLHP1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}}

	// Not possible: a hotplug on the sata bus. Nothing changes.
	sata := v1.Disk{DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}}
	err = h.vmiCall(t, "SyncVirtualMachine (hotplug on sata)", h.cmd.SyncVirtualMachine,
		b.with(t, hotVolume{name: "hp", disk: sata, phase: v1.HotplugVolumeMounted}))
	if err == nil || !strings.Contains(err.Error(), `disk "hp": hotplug on bus sata`) {
		t.Errorf("Sync of a hotplug on sata: %v, want a failure naming the disk and the bus", err)
	}
	if _, there := domainDisk(t, h, "hp"); there {
		t.Errorf("the refused disk is in the domain")
	}

	// Not mounted into the pod yet: nothing to attach, nothing refused.
	if err := h.vmiCall(t, "SyncVirtualMachine (volume attached to the node)", h.cmd.SyncVirtualMachine,
		b.with(t, hotVolume{name: "hp", disk: scsi, phase: v1.HotplugVolumeAttachedToNode})); err != nil {
		t.Errorf("%v", err)
	}
	if _, there := domainDisk(t, h, "hp"); there {
		t.Errorf("a disk whose volume is not in the pod yet is in the domain")
	}

	// Mounted: attached, on the scsi bus, reported with its target.
	plugged := b.with(t, hotVolume{name: "hp", disk: scsi, phase: v1.HotplugVolumeMounted})
	if err := h.vmiCall(t, "SyncVirtualMachine (hotplug)", h.cmd.SyncVirtualMachine, plugged); err != nil {
		t.Fatalf("%v", err)
	}
	disk, there := domainDisk(t, h, "hp")
	if !there || disk.Target.Bus != "scsi" || !strings.HasPrefix(disk.Target.Device, "sd") || disk.Source.File != img {
		t.Fatalf("the Domain's disk hp after the hotplug: %+v (present %v), want scsi, an sd target, source %s", disk, there, img)
	}
	target := disk.Target.Device
	// A repeated Sync (virt-handler's next reconcile, status caught up)
	// changes nothing.
	pinned := b.with(t, hotVolume{name: "hp", disk: scsi, phase: v1.VolumeReady, target: target})
	if err := h.vmiCall(t, "SyncVirtualMachine (hotplugged, ready)", h.cmd.SyncVirtualMachine, pinned); err != nil {
		t.Errorf("%v", err)
	}

	// The guest sees it: its size and serial.
	findDisk := `d=; for b in /sys/block/sd*; do grep -q VLHP1 $b/device/vpd_pg80 2>/dev/null && d=${b##*/}; done`
	m := guestAnswer(t, p, "hotplugged disk", findDisk+`; echo VL-T-HP1-$d-$(cat /sys/block/$d/size)X`,
		regexp.MustCompile(`VL-T-HP1-(sd[a-z]+)-(\d+)X`), 60*time.Second)
	dev := m[1]
	if m[2] != fmt.Sprint(size/512) {
		t.Errorf("the guest sees %s with %s sectors, want %d", dev, m[2], size/512)
	}
	t.Logf("guest sees the hotplugged disk as %s (libvirt target %s) after %v", dev, target, time.Since(t0))

	// The guest writes the marker to the start, then keeps writing further
	// on while the volume is unplugged.
	guestAnswer(t, p, "write the marker", fmt.Sprintf(`echo %s | dd of=/dev/%s bs=512 count=1 conv=fsync 2>/dev/null && echo VL-T-WROTE-$?X`, marker, dev),
		regexp.MustCompile(`VL-T-WROTE-0X`), 30*time.Second)
	// One dd, direct I/O to the end of the disk: a loop of dd's racing
	// the guest's removal of the device with new opens left the guest's
	// SCSI layer stuck in some runs (its business, not the launcher's).
	typeOnConsole(t, p, fmt.Sprintf(`(dd if=/dev/zero of=/dev/%s bs=4096 seek=1024 oflag=direct 2>/dev/null; echo VL-T-WRITER-$?-STOPPEDX) &`+"\n", dev))
	time.Sleep(time.Second)
	if !qemuHasOpen(t, p, img) {
		t.Errorf("QEMU does not have %s open while the disk is attached", img)
	}

	// Unplug (removevolume): the Sync answers once QEMU has let go.
	beforeUnplug := len(p.Console())
	if err := h.vmiCall(t, "SyncVirtualMachine (unplug)", h.cmd.SyncVirtualMachine, base); err != nil {
		t.Fatalf("%v", err)
	}
	if qemuHasOpen(t, p, img) {
		t.Errorf("the unplug Sync succeeded while QEMU still has %s open", img)
	}
	if _, there := domainDisk(t, h, "hp"); there {
		t.Errorf("the Domain still has disk hp after the unplug")
	}
	// The writer ends with an error when its disk goes (1), or
	// earlier at the end of the disk (also 1, on a fast machine): logged,
	// not judged. The launcher's part is that QEMU let go before the Sync
	// answered, checked above.
	stopped := regexp.MustCompile(`VL-T-WRITER-(\d+)-STOPPEDX`)
	for deadline := time.Now().Add(10 * time.Second); stopped.FindString(p.Console()[beforeUnplug:]) == "" && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("guest writer: %q after the unplug (ended before it: %v)", stopped.FindString(p.Console()[beforeUnplug:]),
		stopped.MatchString(p.Console()[:beforeUnplug]))
	guestAnswer(t, p, "disk gone from the guest", fmt.Sprintf(`echo VL-T-GONE-$(ls /sys/block | grep -c '^%s$')X`, dev),
		regexp.MustCompile(`VL-T-GONE-0X`), 30*time.Second)
	head := make([]byte, len(marker))
	f, err := os.Open(img)
	launchertest.Must(t, err)
	_, err = f.ReadAt(head, 0)
	f.Close()
	launchertest.Must(t, err)
	if string(head) != marker {
		t.Errorf("the image starts with %q after the unplug, want the guest's %q", head, marker)
	}

	// Replug: the guest reads back what it wrote.
	if err := h.vmiCall(t, "SyncVirtualMachine (replug)", h.cmd.SyncVirtualMachine, plugged); err != nil {
		t.Fatalf("%v", err)
	}
	m = guestAnswer(t, p, "replugged disk", findDisk+fmt.Sprintf(`; echo VL-T-HP2-$(head -c %d /dev/$d | tr -dc A-Z0-9-)X`, len(marker)),
		regexp.MustCompile(`VL-T-HP2-(VL-HP-DATA-\d+)X`), 60*time.Second)
	if m[1] != marker {
		t.Errorf("the guest reads %q from the replugged disk, want %q", m[1], marker)
	}

	// The PVC grew (online expansion): the disk grows in the running
	// guest; a repeated Sync leaves it so.
	const grown = 48 << 20
	expanded := b.with(t, hotVolume{name: "hp", disk: scsi, phase: v1.VolumeReady, pvcSize: "48Mi"})
	for i := 0; i < 2; i++ {
		if err := h.vmiCall(t, "SyncVirtualMachine (volume expanded)", h.cmd.SyncVirtualMachine, expanded); err != nil {
			t.Fatalf("%v", err)
		}
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != grown {
		t.Errorf("the image after the expansion: %v, %v; want %d bytes", fi, err, grown)
	}
	guestAnswer(t, p, "grown disk", findDisk+`; echo VL-T-GROWN-$(cat /sys/block/$d/size)X`,
		regexp.MustCompile(fmt.Sprintf(`VL-T-GROWN-%dX`, grown/512)), 60*time.Second)

	// The disk goes from the running domain without a Sync (as when QEMU
	// finishes an unplug after libvirt's call returned, or a restarted
	// daemon finds it finished): the Domain follows at once, from
	// libvirt's device-removed event; the Sync after it brings the
	// definition along and answers success.
	detachBehindLauncher(t, p, "ua-hp")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, there := domainDisk(t, h, "hp"); !there {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Domain still has disk hp 10 s after the running domain lost it")
		}
	}
	if err := h.vmiCall(t, "SyncVirtualMachine (unplug again)", h.cmd.SyncVirtualMachine, base); err != nil {
		t.Errorf("%v", err)
	}
	if !strings.Contains(p.Stderr.String(), "detaching it in the definition") {
		t.Errorf("the Sync after the disk went did not bring the definition along")
	}

	checkVirtioHotplug(t, p, h, b)
	checkBlockHotplug(t, p, h, b)
	checkCDROMMedia(t, p, h, b)
	checkVCPUs(t, p, h, b.base)
	checkMemory(t, p, h, b.base)
	t.Logf("hotplug done after %v", time.Since(t0))

	shutdownAndDelete(t, p, h, s, base, 0)
	if _, err := os.Stat(img); err != nil {
		t.Errorf("the hotplugged volume's image is gone after the pod: %v (it belongs to virt-handler)", err)
	}
}

// detachBehindLauncher detaches the disk with alias from the running
// domain only, over a libvirt connection of the test's own.
func detachBehindLauncher(t *testing.T, p *pod, alias string) {
	t.Helper()
	l := p.Libvirt()
	d, err := l.DomainLookupByName(p.DomainName())
	launchertest.Must(t, err)
	x, err := l.DomainGetXMLDesc(d, 0)
	launchertest.Must(t, err)
	var dom libvirtxml.Domain
	launchertest.Must(t, dom.Unmarshal(x))
	i := slices.IndexFunc(dom.Devices.Disks, func(disk libvirtxml.DomainDisk) bool { return disk.Alias != nil && disk.Alias.Name == alias })
	if i < 0 {
		t.Fatalf("the running domain has no disk %s", alias)
	}
	dx, err := dom.Devices.Disks[i].Marshal()
	launchertest.Must(t, err)
	launchertest.Must(t, l.DomainDetachDeviceFlags(d, dx, uint32(libvirt.DomainAffectLive)))
}

// checkCDROMMedia inserts a medium (a hotplugged volume) into the empty
// CD-ROM drive "cd", has the guest read it, and ejects it again.
func checkCDROMMedia(t *testing.T, p *pod, h *handler, b hotplugVMI) {
	t.Helper()
	label := []byte("VL-T-CDROM-MEDIUM")
	img := hotplugImage(t, p, "cd", 1<<20, bytes.Repeat(label, 2048/len(label)+1)[:2048])
	cd, _ := diskNamed(mustVMI(t, b.base).Spec.Domain.Devices.Disks, "cd")
	inserted := b.with(t, hotVolume{name: "cd", disk: cd, phase: v1.HotplugVolumeMounted})
	if err := h.vmiCall(t, "SyncVirtualMachine (insert the CD-ROM medium)", h.cmd.SyncVirtualMachine, inserted); err != nil {
		t.Fatalf("%v", err)
	}
	if d, there := domainDisk(t, h, "cd"); !there || d.Source.File != img || d.Device != "cdrom" {
		t.Errorf("the Domain's CD-ROM after the insert: %+v (present %v), want medium %s", d, there, img)
	}
	guestAnswer(t, p, "CD-ROM medium", `echo VL-T-CD-$(dd if=/dev/sr0 bs=2048 count=1 2>/dev/null | head -c 17)X`,
		regexp.MustCompile(`VL-T-CD-VL-T-CDROM-MEDIUMX`), 60*time.Second)
	if err := h.vmiCall(t, "SyncVirtualMachine (eject the CD-ROM medium)", h.cmd.SyncVirtualMachine, b.base); err != nil {
		t.Fatalf("%v", err)
	}
	if d, there := domainDisk(t, h, "cd"); !there || d.Source.File != "" || d.Source.Dev != "" {
		t.Errorf("the Domain's CD-ROM after the eject: %+v (present %v), want an empty drive", d, there)
	}
	if qemuHasOpen(t, p, img) {
		t.Errorf("QEMU still has the ejected medium %s open", img)
	}
	guestAnswer(t, p, "CD-ROM ejected", `echo VL-T-NOCD-$(dd if=/dev/sr0 bs=2048 count=1 2>/dev/null | wc -c)X`,
		regexp.MustCompile(`VL-T-NOCD-0X`), 60*time.Second)
}

func mustVMI(t *testing.T, b []byte) *v1.VirtualMachineInstance {
	t.Helper()
	var v v1.VirtualMachineInstance
	launchertest.Must(t, json.Unmarshal(b, &v))
	return &v
}

// checkVirtioHotplug: a disk hotplugged on the virtio bus takes a spare
// PCIe root port; its unplug needs the guest to let go of the PCI device
// (pciehp), and the Sync answers only once it has.
func checkVirtioHotplug(t *testing.T, p *pod, h *handler, b hotplugVMI) {
	t.Helper()
	img := hotplugImage(t, p, "hv", 16<<20, nil)
	virtio := v1.Disk{Serial: "VLHV1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}
	if err := h.vmiCall(t, "SyncVirtualMachine (virtio hotplug)", h.cmd.SyncVirtualMachine,
		b.with(t, hotVolume{name: "hv", disk: virtio, phase: v1.HotplugVolumeMounted})); err != nil {
		t.Fatalf("%v", err)
	}
	if d, there := domainDisk(t, h, "hv"); !there || d.Target.Bus != "virtio" || d.Source.File != img {
		t.Fatalf("the Domain's disk hv after the hotplug: %+v (present %v)", d, there)
	}
	m := guestAnswer(t, p, "virtio disk", `d=; for b in /sys/block/vd*; do grep -q VLHV1 $b/serial 2>/dev/null && d=${b##*/}; done; echo VL-T-HV-$d-$(cat /sys/block/$d/size)X`,
		regexp.MustCompile(`VL-T-HV-(vd[a-z]+)-(\d+)X`), 60*time.Second)
	if m[2] != fmt.Sprint(16<<20/512) {
		t.Errorf("the guest sees %s with %s sectors, want %d", m[1], m[2], 16<<20/512)
	}
	t0 := time.Now()
	err := h.vmiCall(t, "SyncVirtualMachine (virtio unplug)", h.cmd.SyncVirtualMachine, b.base)
	for i := 0; err != nil && strings.Contains(err.Error(), "QEMU still has it") && i < 3; i++ {
		// The guest is slow under emulation: the next reconcile waits on.
		t.Logf("unplug not done within one Sync: %v", err)
		err = h.vmiCall(t, "SyncVirtualMachine (virtio unplug, again)", h.cmd.SyncVirtualMachine, b.base)
	}
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Logf("virtio unplug answered after %v", time.Since(t0))
	if qemuHasOpen(t, p, img) {
		t.Errorf("the virtio unplug Sync succeeded while QEMU still has %s open", img)
	}
	if _, there := domainDisk(t, h, "hv"); there {
		t.Errorf("the Domain still has disk hv after the unplug")
	}
	guestAnswer(t, p, "virtio disk gone", fmt.Sprintf(`echo VL-T-HVGONE-$(ls /sys/block | grep -c '^%s$')X`, m[1]),
		regexp.MustCompile(`VL-T-HVGONE-0X`), 30*time.Second)

	// More virtio disks at once than the VM has free root ports (a few,
	// by KubeVirt's rule): refused before any is plugged, naming the
	// ones that do not fit.
	var many []hotVolume
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("hm%d", i)
		hotplugImage(t, p, name, 1<<20, nil)
		many = append(many, hotVolume{name: name, disk: v1.Disk{DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}, phase: v1.HotplugVolumeMounted})
	}
	err = h.vmiCall(t, "SyncVirtualMachine (12 virtio disks)", h.cmd.SyncVirtualMachine, b.with(t, many...))
	if err == nil || !strings.Contains(err.Error(), `disk "hm11": no free PCIe root port`) || strings.Contains(err.Error(), `disk "hm0"`) {
		t.Errorf("Sync of 12 virtio hotplugs: %v, want a failure naming the disks that do not fit (hm11, not hm0) and the missing port", err)
	} else {
		t.Logf("12 virtio hotplugs: %v", err)
	}
	for _, hv := range many {
		if _, there := domainDisk(t, h, hv.name); there {
			t.Errorf("disk %s is in the domain after the refused Sync", hv.name)
		}
	}
}

// checkVCPUs: SyncVirtualMachineCPUs (KubeVirt's LiveUpdate of CPU
// sockets) adds a vCPU the guest brings online; more than maxSockets
// allows fails naming the figures.
func checkVCPUs(t *testing.T, p *pod, h *handler, base []byte) {
	t.Helper()
	withSockets := func(n uint32) []byte {
		v := mustVMI(t, base)
		if v.Spec.Domain.CPU == nil || v.Spec.Domain.CPU.MaxSockets != 4 || v.Spec.Domain.CPU.Sockets != 1 {
			t.Fatalf("the test VMI's CPU %+v, want 1 socket of at most 4", v.Spec.Domain.CPU)
		}
		v.Spec.Domain.CPU.Sockets = n
		b, err := json.Marshal(v)
		launchertest.Must(t, err)
		return b
	}
	if err := h.vmiCall(t, "SyncVirtualMachineCPUs (2 sockets)", h.cmd.SyncVirtualMachineCPUs, withSockets(2)); err != nil {
		t.Fatalf("%v", err)
	}
	guestAnswer(t, p, "hotplugged vCPU", `for c in /sys/devices/system/cpu/cpu[1-9]*; do echo 1 > $c/online; done 2>/dev/null; echo VL-T-CPUS-$(cat /sys/devices/system/cpu/online)X`,
		regexp.MustCompile(`VL-T-CPUS-0-1X`), 60*time.Second)
	err := h.vmiCall(t, "SyncVirtualMachineCPUs (5 sockets)", h.cmd.SyncVirtualMachineCPUs, withSockets(5))
	if err == nil || !strings.Contains(err.Error(), "asks for 5 vCPUs") || !strings.Contains(err.Error(), "more than the 4") {
		t.Errorf("SyncVirtualMachineCPUs beyond maxSockets: %v, want a failure naming 5 and 4", err)
	}
	// Not asked back: the test guest does not release a vCPU under
	// emulation (not even offlined first), and the pending eject request
	// then kept its ACPI busy, so that in a loaded full run it missed the
	// power button of the graceful stop that ends this test.
}

// checkMemory: SyncVirtualMachineMemory (KubeVirt's LiveUpdate of
// memory.guest) plugs memory through a virtio-mem device, and the guest
// sees 64 MiB more. The device is attached on the first growth, or, on a
// QEMU older than 8.0 (Debian 12's 7.2 crashes on that attach), defined
// empty with the domain and only grown. More than maxGuest fails naming it.
func checkMemory(t *testing.T, p *pod, h *handler, base []byte) {
	t.Helper()
	withGuest := func(size string) []byte {
		v := mustVMI(t, base)
		q := resource.MustParse(size)
		v.Spec.Domain.Memory.Guest = &q
		b, err := json.Marshal(v)
		launchertest.Must(t, err)
		return b
	}
	memTotal := regexp.MustCompile(`VL-T-MEMTOTAL-(\d+)X`)
	const show = `echo VL-T-MEMTOTAL-$(awk '/^MemTotal/{print $2}' /proc/meminfo)X`
	before, err := strconv.Atoi(guestAnswer(t, p, "memory before", show, memTotal, 30*time.Second)[1])
	launchertest.Must(t, err)
	if err := h.vmiCall(t, "SyncVirtualMachineMemory (320Mi)", h.cmd.SyncVirtualMachineMemory, withGuest("320Mi")); err != nil {
		t.Fatalf("%v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		after, err := strconv.Atoi(guestAnswer(t, p, "memory after", show, memTotal, 30*time.Second)[1])
		launchertest.Must(t, err)
		if after-before >= 60<<10 {
			t.Logf("guest MemTotal %d kB -> %d kB", before, after)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's MemTotal went from %d to %d kB, want 64 MiB more", before, after)
		}
		time.Sleep(2 * time.Second)
	}
	// A repeated Sync (virt-handler retries) changes nothing.
	if err := h.vmiCall(t, "SyncVirtualMachineMemory (320Mi again)", h.cmd.SyncVirtualMachineMemory, withGuest("320Mi")); err != nil {
		t.Errorf("%v", err)
	}
	err = h.vmiCall(t, "SyncVirtualMachineMemory (1Gi)", h.cmd.SyncVirtualMachineMemory, withGuest("1Gi"))
	if err == nil || !strings.Contains(err.Error(), "more than maxGuest 512Mi") {
		t.Errorf("SyncVirtualMachineMemory beyond maxGuest: %v, want a failure naming it", err)
	}
}

// checkBlockHotplug: a block-mode volume (virt-handler makes its device
// node in hotplug-disks, named as the volume) is attached as a block disk
// the guest sees with its size and serial; when the device grows, the disk
// grows in the guest; then it is unplugged. The device is a loop device
// over a file.
func checkBlockHotplug(t *testing.T, p *pod, h *handler, b hotplugVMI) {
	t.Helper()
	testenv.Programs(t, "losetup")
	backing := filepath.Join(t.TempDir(), "block.img")
	launchertest.Must(t, os.WriteFile(backing, make([]byte, 16<<20), 0o600))
	// 4 KiB sectors: the disk asks for blockSize.matchVolume, and the
	// guest must see the device's 4096, not the default 512.
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", "4096", backing).Output()
	if err != nil {
		testenv.Need(t, "a loop device", fmt.Errorf("losetup: %w", err))
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	var st syscall.Stat_t
	launchertest.Must(t, syscall.Stat(loop, &st))
	node := p.Layout.HotplugBlock("hb")
	launchertest.Must(t, syscall.Mknod(node, syscall.S_IFBLK|0o660, int(st.Rdev)))
	launchertest.Must(t, os.Chown(node, int(env.Cred.Uid), int(env.Cred.Gid)))

	scsi := v1.Disk{Serial: "VLHB1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}},
		BlockSize: &v1.BlockSize{MatchVolume: &v1.FeatureState{}}}
	if err := h.vmiCall(t, "SyncVirtualMachine (block hotplug)", h.cmd.SyncVirtualMachine,
		b.with(t, hotVolume{name: "hb", disk: scsi, phase: v1.HotplugVolumeMounted})); err != nil {
		t.Fatalf("%v", err)
	}
	if d, there := domainDisk(t, h, "hb"); !there || d.Type != "block" || d.Source.Dev != node {
		t.Fatalf("the Domain's disk hb after the hotplug: %+v (present %v), want a block disk on %s", d, there, node)
	}
	find := `d=; for b in /sys/block/sd*; do grep -q VLHB1 $b/device/vpd_pg80 2>/dev/null && d=${b##*/}; done`
	guestAnswer(t, p, "block disk", find+`; echo VL-T-HB-$(cat /sys/block/$d/size)-$(cat /sys/block/$d/queue/logical_block_size)X`,
		regexp.MustCompile(fmt.Sprintf(`VL-T-HB-%d-4096X`, 16<<20/512)), 60*time.Second)

	// The device grows (a PVC expanded in block mode): so does the disk.
	launchertest.Must(t, os.Truncate(backing, 24<<20))
	if out, err := exec.Command("losetup", "-c", loop).CombinedOutput(); err != nil {
		t.Fatalf("losetup -c: %v: %s", err, out)
	}
	if err := h.vmiCall(t, "SyncVirtualMachine (block volume grown)", h.cmd.SyncVirtualMachine,
		b.with(t, hotVolume{name: "hb", disk: scsi, phase: v1.VolumeReady, pvcSize: "24Mi"})); err != nil {
		t.Fatalf("%v", err)
	}
	guestAnswer(t, p, "grown block disk", find+`; echo VL-T-HBGROWN-$(cat /sys/block/$d/size)X`,
		regexp.MustCompile(fmt.Sprintf(`VL-T-HBGROWN-%dX`, 24<<20/512)), 60*time.Second)

	if err := h.vmiCall(t, "SyncVirtualMachine (block unplug)", h.cmd.SyncVirtualMachine, b.base); err != nil {
		t.Fatalf("%v", err)
	}
	if qemuHasOpen(t, p, node) {
		t.Errorf("the unplug Sync succeeded while QEMU still has %s open", node)
	}
	guestAnswer(t, p, "block disk gone", find+`; echo VL-T-HBGONE-${d:-none}X`, regexp.MustCompile(`VL-T-HBGONE-noneX`), 60*time.Second)
}
