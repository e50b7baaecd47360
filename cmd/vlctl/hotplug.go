package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/standalone"
)

// newHotplugCmds are vlctl's virtctl addvolume / removevolume and NIC
// hotplug: they ask the vlctl run of the VM named to plug a local file,
// block device or network interface in, or to take it out again
// (internal/standalone, hotplug.go).
func newHotplugCmds() []*cobra.Command {
	var addName nameFlags
	var req standalone.ControlRequest
	add := &cobra.Command{
		Use:   "addvolume NAME --volume-name VOL --file PATH",
		Short: "Plug a local file or block device into a running VM, as virtctl addvolume does",
		Long: `addvolume plugs PATH (a raw image file or a block device, which keeps its data: vlctl
never removes it) into the VM that vlctl run runs, as a hotplugged volume named VOL: the guest
sees a new disk on the scsi bus (or virtio with --bus virtio), with --serial as its serial.
QEMU's user is given access to the file (an ACL entry, taken back when the volume is removed
or the run ends). NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM of
that name. removevolume takes it out again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Op = "addvolume"
			return controlByName(cmd, &addName, args[0], req)
		},
	}
	addName.register(add)
	add.Flags().StringVar(&req.Volume, "volume-name", "", "name of the volume (and disk) in the VM (required)")
	add.Flags().StringVar(&req.File, "file", "", "absolute path of the raw image file or block device (required)")
	add.Flags().StringVar(&req.Bus, "bus", "scsi", "bus of the disk: scsi or virtio")
	add.Flags().StringVar(&req.Serial, "serial", "", "serial number of the disk, as the guest sees it")
	add.MarkFlagRequired("volume-name")
	add.MarkFlagRequired("file")

	var rmName nameFlags
	var rmVolume string
	rm := &cobra.Command{
		Use:   "removevolume NAME --volume-name VOL",
		Short: "Unplug a volume addvolume plugged into a running VM, as virtctl removevolume does",
		Long: `removevolume takes the volume VOL that addvolume plugged in out of the running VM. It
answers once QEMU has let go of the file (the guest must release the disk; a guest that does
not within 15 s leaves it plugged, and removevolume can be tried again). The file stays.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return controlByName(cmd, &rmName, args[0], standalone.ControlRequest{Op: "removevolume", Volume: rmVolume})
		},
	}
	rmName.register(rm)
	rm.Flags().StringVar(&rmVolume, "volume-name", "", "name of the volume to unplug (required)")
	rm.MarkFlagRequired("volume-name")

	var addIfName nameFlags
	var ifReq standalone.ControlRequest
	addIf := &cobra.Command{
		Use:   "addinterface NAME --iface-name IFACE [--mac MAC]",
		Short: "Plug a network interface into a running VM, as KubeVirt's NIC hotplug does",
		Long: `addinterface plugs a new interface named IFACE into the VM that vlctl run runs, as a
KubeVirt VM gets a bridge interface on a new Multus network: the run gives the pod a new
network interface towards the outside namespace (192.168.67+N.0/24, the pod's address .2, the
outside's .1) and bridges the guest's new NIC to it; the guest leases the .2 address by DHCP
(run the DHCP client on the new NIC in the guest). The VM must have a pod network (an
interface in its manifest). removeinterface takes it out again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ifReq.Op = "addinterface"
			return controlByName(cmd, &addIfName, args[0], ifReq)
		},
	}
	addIfName.register(addIf)
	addIf.Flags().StringVar(&ifReq.Interface, "iface-name", "", "name of the interface (and its network) in the VM (required)")
	addIf.Flags().StringVar(&ifReq.MAC, "mac", "", "MAC address of the guest's new NIC (default: the new pod interface's)")
	addIf.MarkFlagRequired("iface-name")

	var rmIfName nameFlags
	var rmIface string
	rmIf := &cobra.Command{
		Use:   "removeinterface NAME --iface-name IFACE",
		Short: "Unplug an interface addinterface plugged into a running VM",
		Long: `removeinterface takes the interface IFACE that addinterface plugged in out of the running
VM. It answers once QEMU has let go of the NIC (the guest must release the PCIe device; one
that does not within 15 s leaves it plugged, and removeinterface can be tried again); then its
pod side goes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return controlByName(cmd, &rmIfName, args[0], standalone.ControlRequest{Op: "removeinterface", Interface: rmIface})
		},
	}
	rmIfName.register(rmIf)
	rmIf.Flags().StringVar(&rmIface, "iface-name", "", "name of the interface to unplug (required)")
	rmIf.MarkFlagRequired("iface-name")
	return []*cobra.Command{add, rm, addIf, rmIf}
}

// controlByName sends req to the vlctl run of the VM named.
func controlByName(cmd *cobra.Command, n *nameFlags, query string, req standalone.ControlRequest) error {
	e, err := n.find(query)
	if err != nil {
		return err
	}
	if e.Control == "" {
		return fmt.Errorf("%s: its vlctl run takes no requests (started by an older vlctl, or still starting)", e.FullName())
	}
	if !e.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone", e.FullName(), e.PID)
	}
	msg, err := standalone.Control(cmd.Context(), e.Control, req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Op, e.FullName(), err)
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "vlctl:", msg)
	return nil
}
