package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// newLogsCmd is vlctl's kubectl logs: the launcher pod's output (monitor,
// launcher, libvirt and QEMU, as the compute container logs it) or the
// guest's serial console log (KubeVirt's guest-console-log container).
func newLogsCmd() *cobra.Command {
	var n nameFlags
	var console, follow, run bool
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a VM's launcher log (monitor, launcher, libvirt, QEMU), or its serial console log",
		Long: `logs prints the log of the VM's launcher, as kubectl logs prints a launcher pod's compute
container: the monitor's, the launcher's, libvirt's and QEMU's lines, JSON as KubeVirt's. With
--console it prints the guest's serial console log instead (KubeVirt's guest-console-log). With
-f it keeps printing what is added until the run ends or Ctrl-C. With --run it prints what a
background run (vlctl run -d) wrote itself: vlctl's progress lines and how the run ended. NAME is NAMESPACE/NAME, or NAME
alone when only one namespace has a VM of that name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if run {
				return backgroundLog(cmd, &n, args[0], follow)
			}
			e, err := n.find(args[0])
			if err != nil {
				return err
			}
			// The work dir is root's; below it root opens nothing through
			// a link, and only a regular file (the console log is in the
			// launcher user's private dir).
			dir, err := safefs.Open(e.WorkDir)
			if err != nil {
				return fmt.Errorf("%s: %w", e.FullName(), err)
			}
			defer dir.Close()
			name := "launcher.log"
			if console {
				if e.VMI == nil {
					return fmt.Errorf("%s: its record has no VMI", e.FullName())
				}
				name, err = filepath.Rel(e.WorkDir, layout.Under(e.WorkDir).SerialLog(string(e.VMI.UID)))
				if err != nil {
					return err
				}
			}
			f, err := dir.OpenRegular(name)
			if err != nil {
				return fmt.Errorf("%s: %w", e.FullName(), err)
			}
			defer f.Close()
			out := cmd.OutOrStdout()
			for {
				if _, err := io.Copy(out, f); err != nil {
					return fmt.Errorf("%s: %w", e.FullName(), err)
				}
				if !follow || !e.Alive() {
					return nil
				}
				select {
				case <-cmd.Context().Done(): // Ctrl-C
					return nil
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
	n.register(cmd)
	cmd.Flags().BoolVar(&console, "console", false, "print the guest's serial console log instead")
	cmd.Flags().BoolVar(&run, "run", false, "print the output of the VM's background run (vlctl run -d): vlctl's own lines and how it ended, kept after it ended until vlctl rm")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is added until the run ends")
	return cmd
}
