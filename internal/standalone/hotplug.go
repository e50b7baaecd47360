package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
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

// ControlRequest is one request to a running `vlctl run`.
type ControlRequest struct {
	// Op is "addvolume", "removevolume", "addinterface",
	// "removeinterface" or "memory-dump".
	Op string `json:"op"`
	// Volume names the volume (and its disk) in the VMI.
	Volume string `json:"volume,omitempty"`
	// Interface names the interface (and its network) in the VMI
	// (addinterface, removeinterface).
	Interface string `json:"interface,omitempty"`
	// MAC is the new interface's MAC address (addinterface, optional).
	MAC string `json:"mac,omitempty"`
	// File is the user's file or block device (addvolume), or the new
	// file a memory dump goes to (memory-dump).
	File string `json:"file,omitempty"`
	// Bus is the disk's bus, scsi (default) or virtio (addvolume).
	Bus string `json:"bus,omitempty"`
	// Serial is the disk's serial (addvolume, optional).
	Serial string `json:"serial,omitempty"`
	// Target is the work dir of the run the guest migrates to, Migration
	// the migration's uid and Bandwidth its cap, a quantity of bytes per
	// second, "" for none (migrate: sent by vlctl run --migrate-from).
	Target    string `json:"target,omitempty"`
	Migration string `json:"migration,omitempty"`
	Bandwidth string `json:"bandwidth,omitempty"`
}

// controlReply is the run's answer: what it did, or why it did not.
type controlReply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Ports name the published ports (Publish.recorded) whose listening
	// sockets come with the answer, in the order of its descriptors
	// (SCM_RIGHTS): a completed migrate's, for the run the guest went to.
	Ports []string `json:"ports,omitempty"`
}

// controlTimeout bounds one request: the Sync of a detach waits up to 15 s
// for the guest, an attach a few.
const controlTimeout = 90 * time.Second

// requestLimit bounds a request of op: a memory dump, which writes the
// guest's memory out, gets longer than a hotplug.
func requestLimit(op string) time.Duration {
	if op == OpMemoryDump {
		return dumpRequestLimit
	}
	return controlTimeout
}

// Control sends req to the run whose control socket is socket and returns
// its answer. Only root's requests are served. A ctx without a deadline
// gets controlTimeout.
func Control(ctx context.Context, socket string, req ControlRequest) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, controlTimeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", fmt.Errorf("reach the run: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	return exchange(conn, req)
}

// exchange sends req on conn and reads the run's answer.
func exchange(conn net.Conn, req ControlRequest) (string, error) {
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return "", fmt.Errorf("send the request: %w", err)
	}
	var rep controlReply
	if err := json.NewDecoder(conn).Decode(&rep); err != nil {
		return "", fmt.Errorf("read the run's answer: %w", err)
	}
	if rep.Error != "" {
		return "", errors.New(rep.Error)
	}
	return rep.Message, nil
}

// controlSocket is where the run listens: its work dir, which only root can
// write.
func (r *runner) controlSocket() string { return filepath.Join(r.workDir, "control.sock") }

// serveControl listens on the control socket until ctx ends, serving one
// request at a time with client, the launcher's command client.
func (r *runner) serveControl(ctx context.Context, client *cmdclient.Client) (stop func(), err error) {
	path := r.controlSocket()
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// The work dir is root's and not writable by anyone else, so the
	// path is root's to chmod; the peer check below is what decides.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	done := make(chan struct{})
	var rep relay.Reporter
	go func() {
		defer close(done)
		// One request at a time, each bounded by controlTimeout (a
		// migration by its own limit): others wait in the listen
		// backlog. Only root can connect (the socket is 0600 in root's
		// work dir), and the loop outlives a vlctl out of descriptors.
		relay.AcceptLoop(ln, func(err error) {
			rep.Printf(r.statusf, "vlctl: control socket: %v\n", err)
		}, func(conn net.Conn) { r.serveOne(ctx, client, conn) })
	}()
	return func() { ln.Close(); <-done }, nil
}

// statusf prints a line on the run's status output.
func (r *runner) statusf(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }

func (r *runner) serveOne(ctx context.Context, client *cmdclient.Client, conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	var rep controlReply
	send := func(conn net.Conn, rep controlReply) error { return json.NewEncoder(conn).Encode(rep) }
	if cred, err := unixgrpc.PeerCred(conn); err != nil || cred.Uid != 0 {
		rep.Error = "only root may change a running VM"
	} else {
		var req ControlRequest
		if err := json.NewDecoder(conn).Decode(&req); err != nil {
			rep.Error = fmt.Sprintf("bad request: %v", err)
		} else {
			if req.Op == "migrate" {
				// The requester is the target's vlctl run.
				rep.Message, err = r.serveMigrate(ctx, client, conn, req, int(cred.Pid))
				if err == nil {
					// The guest is the requester's now, and so are
					// its published ports: they go with the answer.
					send = r.replyMigrated
				}
			} else {
				limit := requestLimit(req.Op)
				conn.SetDeadline(time.Now().Add(limit))
				rctx, cancel := context.WithTimeout(ctx, limit-5*time.Second)
				rep.Message, err = r.apply(rctx, client, req)
				cancel()
			}
			if err != nil {
				rep.Error = err.Error()
			}
			r.log.Info("control request", "op", req.Op, "volume", req.Volume, "file", req.File, "interface", req.Interface, "err", rep.Error)
		}
	}
	if err := send(conn, rep); err != nil {
		r.statusf("vlctl: control socket: %v\n", err)
	}
}

func (r *runner) apply(ctx context.Context, client *cmdclient.Client, req ControlRequest) (string, error) {
	switch req.Op {
	case "addvolume":
		return r.addVolume(ctx, client, req)
	case "removevolume":
		return r.removeVolume(ctx, client, req)
	case "addinterface":
		return r.addInterface(ctx, client, req)
	case "removeinterface":
		return r.removeInterface(ctx, client, req)
	case OpMemoryDump:
		return r.memoryDump(ctx, client, req)
	default:
		return "", fmt.Errorf("unknown request %q", req.Op)
	}
}

// addVolume hotplugs the user's file or block device as volume
// req.Volume. Nothing is left changed when it fails.
func (r *runner) addVolume(ctx context.Context, client *cmdclient.Client, req ControlRequest) (_ string, err error) {
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
	spec := diskSpec{volume: req.Volume, field: "--file", path: req.File, kind: pvcStorage, hotplug: true}
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	d, err := spec.open(r.owner, status)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			d.release(status)
		}
	}()
	link, err := d.link(r.layout)
	if err != nil {
		return "", err
	}
	rel, err := r.rel(link)
	if err != nil {
		return "", err
	}
	// hotplug-disks is the launcher user's, as in a pod: root only makes
	// a link in it through the work dir's descriptor, never following one.
	if err := r.dir.Symlink(d.real, rel); err != nil {
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
		return "", r.userPaths(fmt.Errorf("hotplug %s: %w", req.Volume, err))
	}
	r.vmi = next
	r.hot = append(r.hot, d)
	if err := r.writeRecord(r.startedAs); err != nil {
		status("vlctl: %v (vlctl gc will not know the ACL entry on %s)\n", err, req.File)
	}
	status("vlctl: volume %s (%s) plugged in on the %s bus\n", req.Volume, req.File, bus)
	return fmt.Sprintf("volume %s (%s) plugged into %s/%s on the %s bus", req.Volume, req.File, r.vmi.Namespace, r.vmi.Name, bus), nil
}

// removeVolume unplugs a volume addVolume plugged: the Sync answers once
// QEMU has let go of it; only then the link goes and QEMU's access to the
// file is taken back.
func (r *runner) removeVolume(ctx context.Context, client *cmdclient.Client, req ControlRequest) (string, error) {
	i := slices.IndexFunc(r.hot, func(d *userDisk) bool { return d.volume == req.Volume })
	if i < 0 {
		return "", fmt.Errorf("--volume-name %q: not a volume plugged in with vlctl addvolume (the manifest's volumes stay)", req.Volume)
	}
	d := r.hot[i]
	next := r.vmi.DeepCopy()
	next.Spec.Domain.Devices.Disks = slices.DeleteFunc(next.Spec.Domain.Devices.Disks, func(x v1.Disk) bool { return x.Name == req.Volume })
	next.Spec.Volumes = slices.DeleteFunc(next.Spec.Volumes, func(x v1.Volume) bool { return x.Name == req.Volume })
	next.Status.VolumeStatus = slices.DeleteFunc(next.Status.VolumeStatus, func(x v1.VolumeStatus) bool { return x.Name == req.Volume })
	if err := client.Sync(ctx, next, cmdclient.HandlerSyncOptions()); err != nil {
		return "", r.userPaths(fmt.Errorf("unplug %s: %w (it stays plugged in; try again)", req.Volume, err))
	}
	r.vmi = next
	r.hot = slices.Delete(r.hot, i, i+1)
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	link, err := d.link(r.layout)
	if err == nil {
		link, err = r.rel(link)
	}
	if err == nil {
		err = r.dir.Remove(link)
	}
	if err != nil {
		status("vlctl: %v\n", err)
	}
	d.release(status)
	if err := r.writeRecord(r.startedAs); err != nil {
		status("vlctl: %v\n", err)
	}
	status("vlctl: volume %s (%s) unplugged\n", req.Volume, d.path)
	return fmt.Sprintf("volume %s (%s) unplugged from %s/%s", req.Volume, d.path, r.vmi.Namespace, r.vmi.Name), nil
}

// addInterface plugs a bridge interface on a new secondary network into
// the running VM, as KubeVirt's dynamic networks do: a new pod interface
// (Multus's part) wired by the privileged phase (virt-handler's), then a
// Sync with the interface in the spec and, in the status, reported by
// Multus. The guest gets the pod interface's address by DHCP. Nothing is
// left when it fails.
func (r *runner) addInterface(ctx context.Context, client *cmdclient.Client, req ControlRequest) (_ string, err error) {
	if msgs := validation.IsDNS1123Label(req.Interface); len(msgs) > 0 {
		return "", fmt.Errorf("--iface-name %q: %s", req.Interface, msgs[0])
	}
	if r.net == nil {
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
	podIface, pod4, _, err := r.net.Plug(ctx, next, req.Interface)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			if uerr := r.net.Unplug(context.Background(), next, r.vmi, req.Interface, podIface); uerr != nil {
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
		req.Interface, r.vmi.Namespace, r.vmi.Name, pod4.Addr(), pod4.Masked().Addr().Next(), r.net.OutsideName)
	fmt.Fprintf(r.cfg.Status, "vlctl: %s\n", msg)
	return msg, nil
}

// removeInterface unplugs an interface addInterface plugged: a Sync with
// its state absent (answered once QEMU let go of it), then its pod side
// goes, and the interface leaves the spec.
func (r *runner) removeInterface(ctx context.Context, client *cmdclient.Client, req ControlRequest) (string, error) {
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
	if err := r.net.Unplug(ctx, prev, next, req.Interface, podIface); err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: interface %s unplugged, but its pod side: %v\n", req.Interface, err)
	}
	if err := r.writeRecord(r.startedAs); err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: %v\n", err)
	}
	msg := fmt.Sprintf("interface %s unplugged from %s/%s", req.Interface, r.vmi.Namespace, r.vmi.Name)
	fmt.Fprintf(r.cfg.Status, "vlctl: %s\n", msg)
	return msg, nil
}
