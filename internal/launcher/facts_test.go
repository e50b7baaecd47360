package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
)

func TestLibvirtdPlacement(t *testing.T) {
	o, _ := launcherflags.Parse(nil, &bytes.Buffer{})
	l := New(o, nil)
	c := l.libvirtdConfig(false)
	// In a pod: XDG_RUNTIME_DIR=/var/run puts the socket at KubeVirt's
	// /var/run/libvirt/virtqemud-sock; config and state in the private dir.
	if c.RuntimeDir != "/var/run" || c.Dir != "/var/run/kubevirt-private/libvirt" || c.CacheHome != "/var/run/kubevirt-private" {
		t.Errorf("pod placement %+v", c)
	}
	o.LibvirtRunDir = "/w/libvirt-run"
	if c := New(o, nil).libvirtdConfig(false); c.RuntimeDir != "/w/libvirt-run" {
		t.Errorf("standalone runtime dir %q", c.RuntimeDir)
	}
}

func TestHypervisor(t *testing.T) {
	emu, err := hypervisor(&launcherflags.Options{ForceEmulation: true})
	if !emu || err != nil {
		t.Errorf("forced: %v %v", emu, err)
	}
	if kvm.Usable() != nil {
		if _, err := hypervisor(&launcherflags.Options{}); err == nil || !strings.Contains(err.Error(), "--allow-emulation") {
			t.Errorf("no KVM, no emulation allowed: %v", err)
		}
		if emu, err := hypervisor(&launcherflags.Options{AllowEmulation: true}); !emu || err != nil {
			t.Errorf("allowed: %v %v", emu, err)
		}
	}
}

func TestEFIFiles(t *testing.T) {
	efi := efiFiles("/nonexistent")
	if efi.Code != "" && !strings.Contains(efi.Code, "OVMF_CODE") {
		t.Errorf("code %q", efi.Code)
	}
}

func TestLibvirtDebugFromEnvVerbosity(t *testing.T) {
	o, _ := launcherflags.Parse(nil, &bytes.Buffer{})
	if New(o, nil).libvirtdConfig(false).Debug {
		t.Fatal("debug at the default verbosity")
	}
	t.Setenv("VIRT_LAUNCHER_LOG_VERBOSITY", "6")
	if !New(o, nil).libvirtdConfig(false).Debug {
		t.Error("VIRT_LAUNCHER_LOG_VERBOSITY=6 does not enable libvirt debug logs")
	}
}

// TestFreeHugepages reads the per-size pool directories as the kernel lays
// them out; an unreadable tree gives nil (no check).
func TestFreeHugepages(t *testing.T) {
	dir := t.TempDir()
	for name, free := range map[string]string{"hugepages-2048kB": "17\n", "hugepages-1048576kB": "0\n"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "free_hugepages"), []byte(free), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := freeHugepages(dir)
	if len(got) != 2 || got[2<<20] != 17 || got[1<<30] != 0 {
		t.Errorf("freeHugepages = %v", got)
	}
	if got := freeHugepages(filepath.Join(dir, "none")); got != nil {
		t.Errorf("missing directory: %v, want nil", got)
	}
}
