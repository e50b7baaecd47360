package main

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// The test guest's manifest: the shape a user writes, with local paths where a
// cluster would name container images.
var guestManifest = template.Must(template.New("vmi").Parse(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: {{.Name}}
  namespace: default
spec:
  terminationGracePeriodSeconds: 10
  domain:
    firmware:
      kernelBoot:
        kernelArgs: "{{.Cmdline}}"
        container:
          image: {{.Guest.KernelDir}}
          kernelPath: /vmlinuz
          initrdPath: /initrd.img
    resources:
      requests:
        memory: 256Mi
    devices:
{{- if not .Network}}
      autoattachPodInterface: false
{{- end}}
      disks:
      - name: rootdisk
        disk:
          bus: virtio
      - name: scratch
        disk:
          bus: virtio
      - name: cloudinit
        disk:
          bus: virtio
{{- if .Network}}
      interfaces:
      - name: default
        masquerade: {}
        ports:
        - port: 80
  networks:
  - name: default
    pod: {}
{{- end}}
  volumes:
  - name: rootdisk
    containerDisk:
      image: {{.Guest.RootDisk}}
  - name: scratch
    emptyDisk:
      capacity: 64Mi
  - name: cloudinit
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        echo "hello from user-data on $(uname -r)"
`))

func newTestGuestCmd() *cobra.Command {
	var (
		cacheDir, name  string
		poweroff, noNet bool
	)
	cmd := &cobra.Command{
		Use:   "testguest",
		Short: "Build the tiny test guest (Debian kernel + busybox) and print a VMI manifest that boots it",
		Long: `testguest builds (once, then cached) a small guest from Debian's kernel and busybox-static
and prints a VirtualMachineInstance manifest for it on stdout, ready for 'vlctl run'. The guest
prints VL-* markers on its serial console: boot, root disk, user-data, DHCP lease.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := testguest.Build(cmd.Context(), cacheDir)
			if err != nil {
				return fmt.Errorf("build test guest: %w", err)
			}
			args := []string{testguest.DefaultCmdline}
			if poweroff {
				args = append(args, testguest.OptPowerOff)
			}
			if noNet {
				args = append(args, testguest.OptNoDHCP)
			}
			return guestManifest.Execute(cmd.OutOrStdout(), map[string]any{
				"Name": name, "Guest": g, "Cmdline": strings.Join(args, " "), "Network": !noNet,
			})
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", testguest.DefaultCacheDir(), "where the built guest is kept")
	cmd.Flags().StringVar(&name, "name", "testguest", "VMI name")
	cmd.Flags().BoolVar(&poweroff, "poweroff", false, "the guest powers itself off once booted")
	cmd.Flags().BoolVar(&noNet, "no-network", false, "no pod network interface")
	return cmd
}
