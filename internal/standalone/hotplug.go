package standalone

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// Volume hotplug on a running `vlctl run`, what `virtctl addvolume` and
// `removevolume` do in a cluster: `vlctl addvolume NAME --volume-name V
// --file PATH` and `vlctl removevolume NAME --volume-name V` ask the run
// over its control socket, and the run, which owns the VMI and the user's
// disks, plays virt-handler's part: it opens the user's file or block
// device as it opens a --volume (resolved through directories only root
// can change, an ACL entry for QEMU's user, recorded for vlctl gc), links
// it where a hotplugged volume is mounted in a launcher pod
// (hotplug-disks/<vol>.img, or hotplug-disks/<vol> for a block device),
// and syncs the launcher with the volume in the spec and its status
// MountedToPod. An unplug syncs without it (the launcher answers once QEMU
// has let go), then removes the link and takes the ACL entry back. The
// file is the user's: it is never removed.

// requestLimit bounds a request: a memory dump, which writes the guest's
// memory out, gets longer than a hotplug.
func requestLimit(req runctl.Request) time.Duration {
	if _, ok := req.(runctl.MemoryDump); ok {
		return dumpRequestLimit
	}
	return runctl.Timeout
}

// serveControl serves the control socket (runctl) until ctx ends, one
// request at a time, with client, the launcher's command client.
func (r *runner) serveControl(ctx context.Context, client *cmdclient.Client) (stop func(), err error) {
	ln, err := runctl.Listen(r.controlSocket())
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var rep relay.Reporter
	go func() {
		defer close(done)
		// Each request is bounded by runctl.Timeout, a memory dump or a
		// migration by its own limit. Only root can connect (the socket
		// is 0600 in root's work dir).
		runctl.Serve(ln, func(err error) {
			rep.Printf(r.statusf, "vlctl: control socket: %v\n", err)
		}, func(conn *net.UnixConn, peerPID int, req runctl.Request) { r.serveOne(ctx, client, conn, peerPID, req) })
	}()
	return func() { ln.Close(); <-done }, nil
}

func (r *runner) serveOne(ctx context.Context, client *cmdclient.Client, conn *net.UnixConn, peerPID int, req runctl.Request) {
	var rep runctl.Reply
	var err error
	send := func(rep runctl.Reply) error { _, err := runctl.WriteReply(conn, rep, nil); return err }
	if m, ok := req.(runctl.Migrate); ok {
		// The requester is the target's vlctl run.
		rep.Message, err = r.serveMigrate(ctx, client, conn, m, peerPID)
		if err == nil {
			// The guest is the requester's now, and so are its
			// published ports: they go with the answer.
			send = func(rep runctl.Reply) error { return r.replyMigrated(conn, rep) }
		}
	} else {
		limit := requestLimit(req)
		conn.SetDeadline(time.Now().Add(limit))
		rctx, cancel := context.WithTimeout(ctx, limit-5*time.Second)
		rep.Message, err = r.apply(rctx, client, req)
		cancel()
	}
	if err != nil {
		rep.Error = err.Error()
	}
	r.log.Info("control request", "op", req.Op(), "request", req, "err", rep.Error)
	if err := send(rep); err != nil {
		r.statusf("vlctl: control socket: %v\n", err)
	}
}

func (r *runner) apply(ctx context.Context, client *cmdclient.Client, req runctl.Request) (string, error) {
	switch req := req.(type) {
	case runctl.AddVolume:
		return r.addVolume(ctx, client, req)
	case runctl.RemoveVolume:
		return r.removeVolume(ctx, client, req)
	case runctl.AddInterface:
		return r.addInterface(ctx, client, req)
	case runctl.RemoveInterface:
		return r.removeInterface(ctx, client, req)
	case runctl.MemoryDump:
		return r.memoryDump(ctx, client, req)
	default:
		return "", fmt.Errorf("unknown request %q", req.Op())
	}
}

// addVolume hotplugs the user's file or block device as volume
// req.Volume. Nothing is left changed when it fails.
func (r *runner) addVolume(ctx context.Context, client *cmdclient.Client, req runctl.AddVolume) (_ string, err error) {
	if msgs := validation.IsDNS1123Label(req.Volume); len(msgs) > 0 {
		return "", fmt.Errorf("--volume-name %q: %s", req.Volume, msgs[0])
	}
	bus := v1.DiskBus(req.Bus)
	switch bus {
	case "":
		bus = v1.DiskBusSCSI
	case v1.DiskBusSCSI, v1.DiskBusVirtio:
	default:
		return "", fmt.Errorf("--bus %q: a hotplugged disk goes on scsi or virtio", req.Bus)
	}
	if !filepath.IsAbs(req.File) {
		return "", fmt.Errorf("--file %q: give an absolute path", req.File)
	}
	for _, vol := range r.vmi.Spec.Volumes {
		if vol.Name == req.Volume {
			return "", fmt.Errorf("--volume-name %q: the VM has a volume of that name already", req.Volume)
		}
	}
	for _, d := range r.vmi.Spec.Domain.Devices.Disks {
		if d.Name == req.Volume {
			return "", fmt.Errorf("--volume-name %q: the VM has a disk of that name already", req.Volume)
		}
	}
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	d, err := userstorage.HotplugSpec(req.Volume, req.File).Open(r.owner.User, status)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			d.Release(status)
		}
	}()
	link, err := d.Link(r.layout)
	if err != nil {
		return "", err
	}
	rel, err := r.rel(link)
	if err != nil {
		return "", err
	}
	// hotplug-disks is the launcher user's, as in a pod: root only makes
	// a link in it through the work dir's descriptor, never following one.
	if err := r.dir.Symlink(d.Real(), rel); err != nil {
		return "", fmt.Errorf("--file %s: link it for the launcher: %w", req.File, err)
	}
	defer func() {
		if err != nil {
			r.dir.Remove(rel)
		}
	}()

	next := r.vmi.DeepCopy()
	next.Spec.Domain.Devices.Disks = append(next.Spec.Domain.Devices.Disks, v1.Disk{Name: req.Volume, Serial: req.Serial,
		DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}})
	next.Spec.Volumes = append(next.Spec.Volumes, v1.Volume{Name: req.Volume, VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true,
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: req.Volume}}}})
	next.Status.VolumeStatus = append(next.Status.VolumeStatus, v1.VolumeStatus{Name: req.Volume,
		Phase: v1.HotplugVolumeMounted, HotplugVolume: &v1.HotplugVolumeStatus{}})
	if err := client.Sync(ctx, next, cmdclient.HandlerSyncOptions()); err != nil {
		// The launcher made no change it could not finish (a refused
		// Sync changes nothing); a Sync that timed out may have: the
		// VMI as it was is synced again, which unplugs it.
		if rerr := client.Sync(ctx, r.vmi, cmdclient.HandlerSyncOptions()); rerr != nil {
			err = fmt.Errorf("%w (and syncing the VM back: %v)", err, rerr)
		}
		return "", r.storage.UserPaths(fmt.Errorf("hotplug %s: %w", req.Volume, err), r.layout)
	}
	r.vmi = next
	r.storage.AddHot(d)
	if err := r.writeRecord(r.startedAs); err != nil {
		status("vlctl: %v (vlctl gc will not know the ACL entry on %s)\n", err, req.File)
	}
	status("vlctl: volume %s (%s) plugged in on the %s bus\n", req.Volume, req.File, bus)
	return fmt.Sprintf("volume %s (%s) plugged into %s/%s on the %s bus", req.Volume, req.File, r.vmi.Namespace, r.vmi.Name, bus), nil
}

// removeVolume unplugs a volume addVolume plugged: the Sync answers once
// QEMU has let go of it; only then the link goes and QEMU's access to the
// file is taken back.
func (r *runner) removeVolume(ctx context.Context, client *cmdclient.Client, req runctl.RemoveVolume) (string, error) {
	d := r.storage.Hot(req.Volume)
	if d == nil {
		return "", fmt.Errorf("--volume-name %q: not a volume plugged in with vlctl addvolume (the manifest's volumes stay)", req.Volume)
	}
	next := r.vmi.DeepCopy()
	next.Spec.Domain.Devices.Disks = slices.DeleteFunc(next.Spec.Domain.Devices.Disks, func(x v1.Disk) bool { return x.Name == req.Volume })
	next.Spec.Volumes = slices.DeleteFunc(next.Spec.Volumes, func(x v1.Volume) bool { return x.Name == req.Volume })
	next.Status.VolumeStatus = slices.DeleteFunc(next.Status.VolumeStatus, func(x v1.VolumeStatus) bool { return x.Name == req.Volume })
	if err := client.Sync(ctx, next, cmdclient.HandlerSyncOptions()); err != nil {
		return "", r.storage.UserPaths(fmt.Errorf("unplug %s: %w (it stays plugged in; try again)", req.Volume, err), r.layout)
	}
	r.vmi = next
	r.storage.DropHot(d)
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	link, err := d.Link(r.layout)
	if err == nil {
		link, err = r.rel(link)
	}
	if err == nil {
		err = r.dir.Remove(link)
	}
	if err != nil {
		status("vlctl: %v\n", err)
	}
	d.Release(status)
	if err := r.writeRecord(r.startedAs); err != nil {
		status("vlctl: %v\n", err)
	}
	status("vlctl: volume %s (%s) unplugged\n", req.Volume, d.Path())
	return fmt.Sprintf("volume %s (%s) unplugged from %s/%s", req.Volume, d.Path(), r.vmi.Namespace, r.vmi.Name), nil
}

// addInterface plugs a bridge interface on a new secondary network into
// the running VM, as KubeVirt's dynamic networks do: a new pod interface
// (Multus's part) wired by the privileged phase (virt-handler's), then a
// Sync with the interface in the spec and, in the status, reported by
// Multus. The guest gets the pod interface's address by DHCP. Nothing is
// left when it fails.
func (r *runner) addInterface(ctx context.Context, client *cmdclient.Client, req runctl.AddInterface) (_ string, err error) {
	if msgs := validation.IsDNS1123Label(req.Interface); len(msgs) > 0 {
		return "", fmt.Errorf("--iface-name %q: %s", req.Interface, msgs[0])
	}
	if r.pod.net == nil {
		return "", errors.New("the VM has no pod network to plug an interface into (vlctl run makes one for a VM with interfaces)")
	}
	if req.MAC != "" {
		hw, err := net.ParseMAC(req.MAC)
		if err != nil || len(hw) != 6 || hw[0]&1 != 0 {
			return "", fmt.Errorf("--mac %q: not a unicast MAC address", req.MAC)
		}
	}
	for _, i := range r.vmi.Spec.Domain.Devices.Interfaces {
		if i.Name == req.Interface {
			return "", fmt.Errorf("--iface-name %q: the VM has an interface of that name already", req.Interface)
		}
	}
	for _, nw := range r.vmi.Spec.Networks {
		if nw.Name == req.Interface {
			return "", fmt.Errorf("--iface-name %q: the VM has a network of that name already", req.Interface)
		}
	}
	next := r.vmi.DeepCopy()
	next.Spec.Domain.Devices.Interfaces = append(next.Spec.Domain.Devices.Interfaces, v1.Interface{Name: req.Interface, MacAddress: req.MAC,
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
	next.Spec.Networks = append(next.Spec.Networks, v1.Network{Name: req.Interface,
		NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: req.Interface}}})
	podIface, pod4, _, err := r.pod.net.Plug(ctx, next, req.Interface)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			if uerr := r.pod.net.Unplug(context.Background(), next, r.vmi, req.Interface, podIface); uerr != nil {
				err = fmt.Errorf("%w (and undoing the pod side: %v)", err, uerr)
			}
		}
	}()
	next.Status.Interfaces = append(next.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: req.Interface,
		InterfaceName: podIface, InfoSource: "multus-status"})
	if err := client.Sync(ctx, next, cmdclient.HandlerSyncOptions()); err != nil {
		// A refused Sync changed nothing; one that timed out may have
		// plugged it: the VMI as it was is synced again.
		if rerr := client.Sync(ctx, r.vmi, cmdclient.HandlerSyncOptions()); rerr != nil {
			err = fmt.Errorf("%w (and syncing the VM back: %v)", err, rerr)
		}
		return "", fmt.Errorf("plug interface %s: %w", req.Interface, err)
	}
	r.vmi = next
	if r.hotIfaces == nil {
		r.hotIfaces = map[string]string{}
	}
	r.hotIfaces[req.Interface] = podIface
	if err := r.writeRecord(r.startedAs); err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: %v\n", err)
	}
	msg := fmt.Sprintf("interface %s plugged into %s/%s: a bridge to a new network, where the guest leases %s by DHCP (its other end, %s, is in namespace %s)",
		req.Interface, r.vmi.Namespace, r.vmi.Name, pod4.Addr(), pod4.Masked().Addr().Next(), r.pod.net.OutsideName)
	fmt.Fprintf(r.cfg.Status, "vlctl: %s\n", msg)
	return msg, nil
}

// removeInterface unplugs an interface addInterface plugged: a Sync with
// its state absent (answered once QEMU let go of it), then its pod side
// goes, and the interface leaves the spec.
func (r *runner) removeInterface(ctx context.Context, client *cmdclient.Client, req runctl.RemoveInterface) (string, error) {
	podIface, ok := r.hotIfaces[req.Interface]
	if !ok {
		return "", fmt.Errorf("--iface-name %q: not an interface plugged in with vlctl addinterface (the manifest's interfaces stay)", req.Interface)
	}
	absent := r.vmi.DeepCopy()
	for i := range absent.Spec.Domain.Devices.Interfaces {
		if absent.Spec.Domain.Devices.Interfaces[i].Name == req.Interface {
			absent.Spec.Domain.Devices.Interfaces[i].State = v1.InterfaceStateAbsent
		}
	}
	if err := client.Sync(ctx, absent, cmdclient.HandlerSyncOptions()); err != nil {
		return "", fmt.Errorf("unplug interface %s: %w (it stays plugged in; try again)", req.Interface, err)
	}
	prev := r.vmi
	// As virt-controller does once the domain has let go: out of the spec.
	next := absent.DeepCopy()
	next.Spec.Domain.Devices.Interfaces = slices.DeleteFunc(next.Spec.Domain.Devices.Interfaces, func(x v1.Interface) bool { return x.Name == req.Interface })
	next.Spec.Networks = slices.DeleteFunc(next.Spec.Networks, func(x v1.Network) bool { return x.Name == req.Interface })
	next.Status.Interfaces = slices.DeleteFunc(next.Status.Interfaces, func(x v1.VirtualMachineInstanceNetworkInterface) bool { return x.Name == req.Interface })
	r.vmi = next
	delete(r.hotIfaces, req.Interface)
	if err := r.pod.net.Unplug(ctx, prev, next, req.Interface, podIface); err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: interface %s unplugged, but its pod side: %v\n", req.Interface, err)
	}
	if err := r.writeRecord(r.startedAs); err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: %v\n", err)
	}
	msg := fmt.Sprintf("interface %s unplugged from %s/%s", req.Interface, r.vmi.Namespace, r.vmi.Name)
	fmt.Fprintf(r.cfg.Status, "vlctl: %s\n", msg)
	return msg, nil
}
