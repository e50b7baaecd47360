package conformance

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpListsEveryFlag (kubevirt-wire.md 5.2, 5.3): --help of the built
// binaries names every flag KubeVirt's pod template may pass, with
// KubeVirt's default where the flag has a non-zero one. (internal/launcher
// TestHelpListsEveryFlag and internal/monitor TestHelp check the flag sets
// from inside; this checks the binaries as shipped.)
func TestHelpListsEveryFlag(t *testing.T) {
	type flag struct{ name, def string }
	cases := []struct {
		bin   string
		flags []flag
	}{
		{"virt-launcher-monitor", []flag{
			{"container-disk-dir", "/var/run/kubevirt/container-disks"},
			{"keep-after-failure", ""},
			{"uid", ""},
			{"v", "2"},
		}},
		{"virt-launcher", []flag{
			{"qemu-timeout", "3m0s"},
			{"name", ""}, {"uid", ""}, {"namespace", ""},
			{"kubevirt-share-dir", "/var/run/kubevirt"},
			{"ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks"},
			{"container-disk-dir", "/var/run/kubevirt/container-disks"},
			{"hotplug-disk-dir", "/var/run/kubevirt/hotplug-disks/"},
			{"grace-period-seconds", "30"},
			{"hook-sidecars", ""},
			{"ovmf-path", "/usr/share/edk2/ovmf"},
			{"disk-memory-limit", "2097152000"},
			{"hypervisor", "kvm"},
			{"run-as-nonroot", ""}, {"image-volume", ""}, {"upgrade-ordinal-ifaces", ""},
			{"vgpu-dedicated-hook", ""}, {"vm-stats-collector", ""}, {"firmware-auto-selection", ""},
			{"allow-emulation", ""}, {"simulate-crash", ""}, {"allow-cross-arch-emulation", ""},
			{"libvirt-log-filters", ""}, {"libvirt-hook-server-and-client", ""},
			{"qemu-agent-sys-interval", "2m0s"},
			{"qemu-agent-file-interval", "5m0s"},
			{"qemu-agent-user-interval", "10s"},
			{"qemu-agent-version-interval", "5m0s"},
			{"qemu-fsfreeze-status-interval", "5s"},
			{"v", "2"},
		}},
	}
	env.NeedBinaries(t)
	for _, c := range cases {
		t.Run(c.bin, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(env.BinDir, c.bin), "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", c.bin, err, out)
			}
			help := string(out)
			for _, f := range c.flags {
				// "-name" or "--name" at the start of a usage entry; its
				// description runs up to the next entry.
				re := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--?` + regexp.QuoteMeta(f.name) + `(?:[ \t][^\n]*)?\n((?:[ \t]{4,}[^\n]*\n)*)`)
				m := re.FindStringSubmatch(help + "\n")
				if m == nil {
					t.Errorf("%s --help does not list --%s", c.bin, f.name)
					continue
				}
				if f.def != "" && !strings.Contains(m[0], "(default "+f.def+")") && !strings.Contains(m[0], `(default "`+f.def+`")`) {
					t.Errorf("%s --help: --%s does not show KubeVirt's default %s:\n%s", c.bin, f.name, f.def, m[0])
				}
			}
		})
	}
}
