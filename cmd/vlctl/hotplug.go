package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/runctl"
)

// newHotplugCmds are vlctl's virtctl addvolume / removevolume and NIC
// hotplug: they ask the vlctl run of the VM named to plug a local file,
// block device or network interface in, or to take it out again
// (internal/runctl; the run serves them in internal/standalone, hotplug.go).
func newHotplugCmds() []*cobra.Command {
	vol := &runctl.AddVolume{}
	add := controlCmd(runctl.OpAddVolume, "NAME --volume-name VOL --file PATH",
		"Plug a local file or block device into a running VM, as virtctl addvolume does",
		`addvolume plugs PATH (a raw image file or a block device, which keeps its data: vlctl
never removes it) into the VM that vlctl run runs, as a hotplugged volume named VOL: the guest
sees a new disk on the scsi bus (or virtio with --bus virtio), with --serial as its serial.
QEMU's user is given access to the file (an ACL entry, taken back when the volume is removed
or the run ends). NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM of
that name. removevolume takes it out again.`, func() runctl.Request { return *vol })
	volumeFlag(add, &vol.Volume, "name of the volume (and disk) in the VM (required)")
	add.Flags().StringVar(&vol.File, "file", "", "absolute path of the raw image file or block device (required)")
	add.Flags().StringVar(&vol.Bus, "bus", "scsi", "bus of the disk: scsi or virtio")
	add.Flags().StringVar(&vol.Serial, "serial", "", "serial number of the disk, as the guest sees it")
	add.MarkFlagRequired("file")

	rmVol := &runctl.RemoveVolume{}
	rm := controlCmd(runctl.OpRemoveVolume, "NAME --volume-name VOL",
		"Unplug a volume addvolume plugged into a running VM, as virtctl removevolume does",
		`removevolume takes the volume VOL that addvolume plugged in out of the running VM. It
answers once QEMU has let go of the file (the guest must release the disk; a guest that does
not within 15 s leaves it plugged, and removevolume can be tried again). The file stays.`, func() runctl.Request { return *rmVol })
	volumeFlag(rm, &rmVol.Volume, "name of the volume to unplug (required)")

	iface := &runctl.AddInterface{}
	addIf := controlCmd(runctl.OpAddInterface, "NAME --iface-name IFACE [--mac MAC]",
		"Plug a network interface into a running VM, as KubeVirt's NIC hotplug does",
		`addinterface plugs a new interface named IFACE into the VM that vlctl run runs, as a
KubeVirt VM gets a bridge interface on a new Multus network: the run gives the pod a new
network interface towards the outside namespace (192.168.67+N.0/24, the pod's address .2, the
outside's .1) and bridges the guest's new NIC to it; the guest leases the .2 address by DHCP
(run the DHCP client on the new NIC in the guest). The VM must have a pod network (an
interface in its manifest). removeinterface takes it out again.`, func() runctl.Request { return *iface })
	ifaceFlag(addIf, &iface.Interface, "name of the interface (and its network) in the VM (required)")
	addIf.Flags().StringVar(&iface.MAC, "mac", "", "MAC address of the guest's new NIC (default: the new pod interface's)")

	rmIface := &runctl.RemoveInterface{}
	rmIf := controlCmd(runctl.OpRemoveInterface, "NAME --iface-name IFACE",
		"Unplug an interface addinterface plugged into a running VM",
		`removeinterface takes the interface IFACE that addinterface plugged in out of the running
VM. It answers once QEMU has let go of the NIC (the guest must release the PCIe device; one
that does not within 15 s leaves it plugged, and removeinterface can be tried again); then its
pod side goes.`, func() runctl.Request { return *rmIface })
	ifaceFlag(rmIf, &rmIface.Interface, "name of the interface to unplug (required)")
	return []*cobra.Command{add, rm, addIf, rmIf, newMemoryDumpCmd()}
}

// controlCmd is a verb that sends one request (req, with the fields its
// flags fill) to the vlctl run of the VM named by its argument.
func controlCmd(op, args, short, long string, req func() runctl.Request) *cobra.Command {
	var n nameFlags
	cmd := &cobra.Command{
		Use:   op + " " + args,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return controlByName(cmd, &n, args[0], req())
		},
	}
	n.register(cmd)
	return cmd
}

func volumeFlag(cmd *cobra.Command, p *string, usage string) {
	cmd.Flags().StringVar(p, "volume-name", "", usage)
	cmd.MarkFlagRequired("volume-name")
}

func ifaceFlag(cmd *cobra.Command, p *string, usage string) {
	cmd.Flags().StringVar(p, "iface-name", "", usage)
	cmd.MarkFlagRequired("iface-name")
}

// controlByName sends req to the vlctl run of the VM named.
func controlByName(cmd *cobra.Command, n *nameFlags, query string, req runctl.Request) error {
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
	msg, err := runctl.Ask(cmd.Context(), e.Control, req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Op(), e.FullName(), err)
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "vlctl:", msg)
	return nil
}
