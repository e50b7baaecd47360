package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// DetachWait bounds how long one Sync waits for QEMU to release a detached
// disk. virt-handler gives a Sync 20 s; a disk the guest has not let go of
// by then is waited for again by the next Sync.
const DetachWait = 15 * time.Second

// detachDisk unplugs a hotplugged disk and returns only once it is gone
// from the running domain: virt-handler unmounts the volume as soon as the
// Sync succeeds, and QEMU must not have it open then. A virtio disk needs
// the guest to let go of its PCI device (libvirt waits 5 s for that and
// then leaves it pending); a SCSI disk goes at once.
func (a *Applier) detachDisk(ctx context.Context, disk libvirtxml.DomainDisk) error {
	name, _ := userAlias(disk.Alias)
	a.Log.Info("detaching disk", "disk", name, "target", disk.Target.Dev, "source", diskSourcePath(&disk))
	return a.detachDevice(ctx, "disk", name, &disk, func(dom *libvirtxml.Domain) bool {
		_, there := findDisk(dom.Devices.Disks, name)
		return there
	})
}

// detachDevice unplugs dev (the disk or interface kind named name) from
// the running domain and its definition, and waits until present no
// longer finds it in the running domain (Client.XML's, Devices set), up to
// DetachWait. A device the
// definition has lost already was asked for by an earlier Sync whose guest
// had not let go: it is asked again, live only.
func (a *Applier) detachDevice(ctx context.Context, kind, name string, dev interface{ Marshal() (string, error) }, present func(*libvirtxml.Domain) bool) error {
	x, err := dev.Marshal()
	if err != nil {
		return fmt.Errorf("sync: %s %q: %w", kind, name, err)
	}
	def, err := a.Client.XML(ctx, true)
	if err != nil {
		return fmt.Errorf("sync: %s %q: %w", kind, name, err)
	}
	inConfig := present(def)
	t0 := time.Now()
	var callErr error
	if inConfig {
		callErr = a.Client.Detach(ctx, "detach the "+kind, x, LiveAndConfig)
		if callErr != nil {
			return a.detachRefused(ctx, kind, name, x, present, callErr)
		}
	} else {
		// QEMU refusing a second request while the first is pending is no
		// failure; the wait below decides.
		callErr = a.Client.Detach(ctx, "detach the "+kind, x, Live)
		if callErr != nil {
			a.Log.Info("detach request repeated", kind, name, "err", callErr.Error())
		}
	}
	wctx, cancel := context.WithTimeout(ctx, a.detachWait())
	defer cancel()
	gone, _ := bounded.PollUntil(wctx, func() (bool, error) {
		live, err := a.Client.XML(wctx, false)
		if err != nil {
			return false, nil // read again
		}
		return !present(live), nil
	})
	if gone {
		a.Log.Info(kind+" detached", kind, name, "took", time.Since(t0).String(), "retry", !inConfig)
		return nil
	}
	msg := fmt.Sprintf("sync: %s %q: detach requested, but QEMU still has it after %s (the guest has not released it)", kind, name, time.Since(t0).Round(time.Millisecond))
	if callErr != nil {
		return fmt.Errorf("%s: %w", msg, callErr)
	}
	return errors.New(msg)
}

// detachRefused decides a detach libvirt refused. A daemon that died
// during an earlier detach leaves the device half gone: QEMU let go of it,
// and the restarted daemon, reconnecting, drops it from the running domain
// in the background (libvirt 9.0 does so after it accepts connections
// again), while the definition, which it writes last, still has it. The
// refusal ("disk sda not found") then means the unplug is done: the
// definition is brought along and the detach counts as done. A device the
// running domain still has is a real refusal.
func (a *Applier) detachRefused(ctx context.Context, kind, name, x string, present func(*libvirtxml.Domain) bool, callErr error) error {
	refused := fmt.Errorf("sync: %s %q: %w", kind, name, callErr)
	live, err := a.Client.XML(ctx, false)
	if err != nil || present(live) {
		return refused
	}
	a.Log.Info(kind+" already gone from the running domain (a detach the daemon finished after its restart)", kind, name, "refusal", callErr.Error())
	def, err := a.Client.XML(ctx, true)
	if err != nil {
		return fmt.Errorf("sync: %s %q: %w", kind, name, err)
	}
	if !present(def) {
		return nil
	}
	if err := a.Client.Detach(ctx, "detach the "+kind+" from the definition", x, Config); err != nil {
		return fmt.Errorf("sync: %s %q: gone from the running domain, but the definition keeps it: %w", kind, name, err)
	}
	return nil
}

// attachDisk hotplugs the disk of a volume virt-handler mounted into the
// pod, once the launcher can open its file or device (KubeVirt's launcher
// checks the same before it attaches), and confirms libvirt has it.
func (a *Applier) attachDisk(ctx context.Context, disk libvirtxml.DomainDisk) error {
	name, _ := userAlias(disk.Alias)
	if err := openable(diskSourcePath(&disk), disk.ReadOnly != nil); err != nil {
		return fmt.Errorf("sync: disk %q: volume not usable yet: %w", name, err)
	}
	x, err := disk.Marshal()
	if err != nil {
		return fmt.Errorf("sync: disk %q: %w", name, err)
	}
	t0 := time.Now()
	attach := func() error {
		return a.Client.Attach(ctx, "attach the disk", x, LiveAndConfig)
	}
	err = attach()
	// A daemon killed in the middle of an attach can leave QEMU with the
	// disk's device, its block nodes, or both: each repair clears one and
	// the attach is tried again.
	for range 2 {
		if id := orphanDevice(err, disk.Alias); id != "" {
			a.Log.Warn("QEMU holds the device of an attach a dead daemon never finished: removing it and attaching again", "disk", name, "device", id, "refusal", err.Error())
			a.dropOrphanDevice(ctx, id)
		} else if orphans := orphanNodes(err); orphans != nil {
			a.Log.Warn("QEMU holds block nodes of an attach a dead daemon never finished: removing them and attaching again", "disk", name, "nodes", orphans, "refusal", err.Error())
			a.dropOrphanNodes(ctx, orphans)
		} else {
			break
		}
		err = attach()
	}
	if err != nil {
		return fmt.Errorf("sync: disk %q (bus %s, target %s): %w", name, diskBus(&disk), disk.Target.Dev, err)
	}
	live, err := a.Client.XML(ctx, false)
	if err != nil {
		return fmt.Errorf("sync: disk %q: %w", name, err)
	}
	got, there := findDisk(live.Devices.Disks, name)
	if !there {
		return fmt.Errorf("sync: disk %q: libvirt accepted the attach, but the running domain does not have it", name)
	}
	a.Log.Info("disk attached", "disk", name, "target", got.Target.Dev, "bus", diskBus(&got), "source", diskSourcePath(&got), "took", time.Since(t0).String())
	return nil
}

// duplicateDevice is QEMU's refusal of a device_add whose id it has
// already.
var duplicateDevice = regexp.MustCompile(`Duplicate device ID '([^']+)'`)

// orphanDevice names the device to remove when err is QEMU refusing the
// attach of the disk with alias because a device of the alias's id is
// there already ("" otherwise). libvirt refuses an alias it knows before
// it asks QEMU, so a device of that id is one a dead daemon added and
// never recorded: its successor does not know it, and it holds the
// volume's block nodes.
func orphanDevice(err error, alias *libvirtxml.DomainAlias) string {
	if err == nil || alias == nil || !strings.HasPrefix(alias.Name, "ua-") {
		return ""
	}
	m := duplicateDevice.FindStringSubmatch(err.Error())
	if m == nil || m[1] != alias.Name {
		return ""
	}
	return m[1]
}

// orphanDeviceGone bounds the wait for QEMU to finish unplugging an
// orphaned device (a SCSI disk goes at once; the guest is not asked).
const orphanDeviceGone = 10 * time.Second

// dropOrphanDevice removes the device orphanDevice named, and then the
// block nodes under it, through QEMU's monitor (the daemon has no call of
// its own for a device it does not know). What cannot be removed is left
// for the attach after to report.
func (a *Applier) dropOrphanDevice(ctx context.Context, id string) {
	qmp := func(what, cmd string) (string, error) { return a.Client.Monitor(ctx, what, cmd) }
	path := "/machine/peripheral/" + id
	drive, err := qmp("read the orphaned device's drive", fmt.Sprintf(`{"execute":"qom-get","arguments":{"path":%q,"property":"drive"}}`, path))
	node := ""
	if err == nil {
		var r struct{ Return string }
		if json.Unmarshal([]byte(drive), &r) == nil {
			node = r.Return
		}
	}
	_, err = qmp("remove the orphaned device", fmt.Sprintf(`{"execute":"device_del","arguments":{"id":%q}}`, id))
	a.Log.Info("orphaned device removed", "device", id, "drive", node, "err", fmt.Sprint(err))
	deadline := time.Now().Add(orphanDeviceGone)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := qmp("look for the orphaned device", fmt.Sprintf(`{"execute":"qom-get","arguments":{"path":%q,"property":"type"}}`, path)); err != nil {
			break // gone
		}
		time.Sleep(100 * time.Millisecond)
	}
	if nodes := nodesUnder(node); nodes != nil {
		a.dropOrphanNodes(ctx, nodes)
	}
}

// nodesUnder is the pair of libvirt block nodes whose format node is
// format ("libvirt-<n>-format"), format node first; nil for other names.
func nodesUnder(format string) []string {
	n, ok := strings.CutPrefix(format, "libvirt-")
	if !ok {
		return nil
	}
	n, ok = strings.CutSuffix(n, "-format")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return nil
	}
	return []string{format, "libvirt-" + n + "-storage"}
}

// duplicateNode is QEMU's refusal of a blockdev-add whose node name it
// has already, with libvirt's node name "libvirt-<n>-<role>".
var duplicateNode = regexp.MustCompile(`Duplicate nodes with node-name='libvirt-(\d+)-[a-z]+'`)

// orphanNodes names the block nodes to remove when err is QEMU refusing
// an attach's node name as a duplicate (nil otherwise). A daemon killed
// in the middle of an attach leaves QEMU with the volume's storage node
// (and maybe its format node on top) that no status file recorded; its
// successor picks the same names for the next attach, and QEMU refuses
// them, the orphans holding the volume's file open meanwhile. The node
// names are the ones the daemon has just chosen as free, so it tracks no
// node of them. The format node comes first: it uses the storage node.
func orphanNodes(err error) []string {
	if err == nil {
		return nil
	}
	m := duplicateNode.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	return []string{"libvirt-" + m[1] + "-format", "libvirt-" + m[1] + "-storage"}
}

// dropOrphanNodes removes the block nodes orphanNodes named, through
// QEMU's monitor (libvirt taints the domain as having had a custom
// monitor command; the daemon has no call of its own for nodes it does
// not know). A node that is not there is no failure: the attach after
// decides.
func (a *Applier) dropOrphanNodes(ctx context.Context, nodes []string) {
	for _, n := range nodes {
		cmd := fmt.Sprintf(`{"execute":"blockdev-del","arguments":{"node-name":%q}}`, n)
		_, err := a.Client.Monitor(ctx, "remove block node "+n, cmd)
		a.Log.Info("orphaned block node removed", "node", n, "err", fmt.Sprint(err))
	}
}

// changeMedium inserts or ejects a CD-ROM's medium (disk is the live drive
// with its new source) and confirms libvirt reports it.
func (a *Applier) changeMedium(ctx context.Context, disk libvirtxml.DomainDisk) error {
	name, _ := userAlias(disk.Alias)
	src := diskSourcePath(&disk)
	verb := "insert"
	if src == "" {
		verb = "eject"
	} else if err := openable(src, true); err != nil {
		return fmt.Errorf("sync: disk %q: medium not usable yet: %w", name, err)
	}
	x, err := disk.Marshal()
	if err != nil {
		return fmt.Errorf("sync: disk %q: %w", name, err)
	}
	if err := a.Client.Update(ctx, verb+" the CD-ROM medium", x, LiveAndConfig); err != nil {
		return fmt.Errorf("sync: disk %q: %w", name, err)
	}
	live, err := a.Client.XML(ctx, false)
	if err != nil {
		return fmt.Errorf("sync: disk %q: %w", name, err)
	}
	got, there := findDisk(live.Devices.Disks, name)
	switch {
	case !there:
		return fmt.Errorf("sync: disk %q: gone from the domain after the medium changed", name)
	case diskSourcePath(&got) != src:
		return fmt.Errorf("sync: disk %q: %s asked, libvirt reports medium %q", name, verb, diskSourcePath(&got))
	}
	a.Log.Info("CD-ROM medium changed", "disk", name, "action", verb, "source", src)
	return nil
}

// openable checks that the launcher (QEMU's user) can open a volume's file
// or block device as QEMU will: read-write unless read-only. A volume
// virt-handler has not finished mounting or handing over fails here with
// the reason, instead of in QEMU.
func openable(path string, readOnly bool) error {
	if path == "" {
		return errors.New("no source path")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	mode := os.O_RDWR
	if readOnly || fi.Mode()&fs.ModeDevice != 0 {
		// A block device is opened read-only here, as KubeVirt does:
		// another opener may hold it exclusively for writing.
		mode = os.O_RDONLY
	}
	f, err := os.OpenFile(path, mode|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	return f.Close()
}
