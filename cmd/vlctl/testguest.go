package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

func newTestGuestCmd() *cobra.Command {
	var (
		cacheDir, name, efiDisk string
		poweroff, noNet         bool
	)
	cmd := &cobra.Command{
		Use:   "testguest",
		Short: "Build the tiny test guest (Debian kernel + busybox) and print a VMI manifest that boots it",
		Long: `testguest builds (once, then cached) a small guest from Debian's kernel and busybox-static
and prints a VirtualMachineInstance manifest for it on stdout, ready for 'vlctl run'. The guest
prints VL-* markers on its serial console: boot, root disk, user-data, DHCP lease.

With --efi-disk FILE it writes the guest as a disk image instead (qcow2), booted by EFI firmware
alone as a cloud image is (a FAT file system with the kernel, its initramfs and a startup.nsh
that OVMF's UEFI shell runs): a stand-in for a cloud image where nothing may be downloaded,
served over HTTP to a DataVolume, say. Its guest has no root disk; it makes the user a
#cloud-config user-data names (user:, users:) with its ssh_authorized_keys, and runs an SSH
server and qemu-guest-agent. Needs qemu-img.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := testguest.Build(cmd.Context(), cacheDir)
			if err != nil {
				return fmt.Errorf("build test guest: %w", err)
			}
			var opts []string
			if poweroff {
				opts = append(opts, testguest.OptPowerOff)
			}
			if noNet {
				opts = append(opts, testguest.OptNoDHCP)
			}
			if efiDisk != "" {
				return g.EFIDisk(cmd.Context(), efiDisk, opts...)
			}
			// The shape a user writes, with local paths where a cluster
			// would name container images.
			m := testguest.Manifest{
				Meta:  testguest.Meta{Name: name, Namespace: "default"},
				Boot:  testguest.Boot{Kernel: g.KernelDir, Cmdline: strings.Join(append([]string{testguest.DefaultCmdline}, opts...), " ")},
				Disks: testguest.Disks{Root: g.RootDisk, Scratch: true, UserData: "#!/bin/sh\necho \"hello from user-data on $(uname -r)\"\n"},
				Grace: 10,
			}
			if !noNet {
				m.Pod = &testguest.Interface{Ports: []int{80}}
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), m.YAML())
			return err
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", testguest.DefaultCacheDir(), "where the built guest is kept")
	cmd.Flags().StringVar(&name, "name", "testguest", "VMI name")
	cmd.Flags().BoolVar(&poweroff, "poweroff", false, "the guest powers itself off once booted")
	cmd.Flags().BoolVar(&noNet, "no-network", false, "no pod network interface")
	cmd.Flags().StringVar(&efiDisk, "efi-disk", "", "write the guest as a qcow2 disk image booted by EFI firmware (a cloud image's stand-in) to this file, instead of printing a manifest")
	return cmd
}
