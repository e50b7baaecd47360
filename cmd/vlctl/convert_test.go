package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/corpus"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmi.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const noIfaces = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: plain
spec:
  domain:
    devices: {}
    memory:
      guest: 128Mi
`

func runCmd(args ...string) (stdout, stderr string, err error) {
	cmd := newConvertCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func TestConvertCommand(t *testing.T) {
	fedora := corpus.File(t, "vmi-fedora.yaml")
	gpu := corpus.File(t, "vmi-gpu.yaml")
	plain := writeFile(t, noIfaces)
	tests := []struct {
		name     string
		args     []string
		contains []string
		absent   []string
		err      string
	}{
		{name: "kvm", args: []string{fedora}, contains: []string{`<domain type="kvm">`, `<cpu mode="host-model">`, "<name>default_vmi-fedora</name>"}},
		{name: "emulation", args: []string{"--emulation", fedora}, contains: []string{`<domain type="qemu">`, `<cpu mode="maximum">`}, absent: []string{"host-model"}},
		{name: "disk format", args: []string{"--disk-format", "containerdisk=qcow2", fedora}, contains: []string{`<format type="qcow2">`}},
		{name: "block volume", args: []string{"--block", "containerdisk", fedora}, contains: []string{`<backingStore type="file">`}},
		{name: "mac and tap", args: []string{"--mac", "default=02:00:00:00:00:01", "--tap", "default=tapx", fedora},
			contains: []string{`<mac address="02:00:00:00:00:01">`, `<target dev="tapx" managed="no">`}},
		{name: "standalone dir", args: []string{"--dir", "/tmp/vl1", fedora}, contains: []string{"/tmp/vl1/private/"}, absent: []string{"/var/run"}},
		{name: "default binding masquerade", args: []string{plain}, contains: []string{`<interface type="ethernet">`, `<target dev="tap0" managed="no">`}},
		{name: "bridge binding", args: []string{"--binding", "bridge", plain}, contains: []string{`<interface type="ethernet">`}},
		{name: "pci address", args: []string{"--pci-address", "gpu1=0000:81:00.0", gpu}, contains: []string{`<alias name="ua-gpu-gpu1">`}},
		{name: "gpu without address", args: []string{gpu}, err: `spec.domain.devices.gpus[0]: no device for GPU "gpu1" of resource "nvidia.com/GP102GL_Tesla_P40": PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40 is unset`},
		{name: "two addresses, one gpu", args: []string{"--pci-address", "gpu1=0000:81:00.0", "--pci-address", "gpu1=0000:82:00.0", gpu}, contains: []string{`bus="0x81"`}, absent: []string{`bus="0x82"`}},
		{name: "vgpu by device plugin variable", args: []string{"--device-env", "MDEV_PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40=5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11", gpu},
			contains: []string{`<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="on" ramfb="on">`}},
		{name: "sriov interface", args: []string{"--pci-address", "sriov-net=0000:3b:02.1", corpus.File(t, "vmi-sriov.yaml")}, contains: []string{`<alias name="ua-sriov-sriov-net">`, `bus="0x3b"`}},
		{name: "unknown device", args: []string{"--pci-address", "gpu2=0000:81:00.0", gpu}, err: `--pci-address gpu2=0000:81:00.0: the VMI has no GPU, host device (served by a device plugin) or SR-IOV interface named "gpu2"`},
		{name: "not a device plugin variable", args: []string{"--device-env", "PATH=/bin", gpu}, err: `--device-env PATH=/bin: "PATH" is not a device plugin's variable`},
		{name: "bad binding", args: []string{"--binding", "slirp", fedora}, err: `--binding: "slirp" is not masquerade or bridge`},
		{name: "bad disk format", args: []string{"--disk-format", "containerdisk=vmdk", fedora}, err: `--disk-format containerdisk=vmdk: format "vmdk"`},
		{name: "bad pair", args: []string{"--pci-address", "gpu1", gpu}, err: `--pci-address: "gpu1" is not NAME=VALUE`},
		{name: "bad pci address", args: []string{"--pci-address", "gpu1=81:00", gpu}, err: "--pci-address gpu1=81:00"},
		{name: "bad mac", args: []string{"--mac", "default=xyz", fedora}, err: `spec.domain.devices.interfaces[0].macAddress: "xyz" is not a MAC address`},
		{name: "missing file", args: []string{"/nonexistent.yaml"}, err: "/nonexistent.yaml"},
		{name: "bad manifest names the field", args: []string{writeFile(t, noIfaces+"    cpu:\n      sockets: -1\n")}, err: "spec.domain.cpu.sockets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(tt.args...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is more than one line: %q", err)
				}
				if out != "" {
					t.Errorf("stdout not empty on error: %q", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %s", s)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(out, s) {
					t.Errorf("output has %s", s)
				}
			}
		})
	}
}

// TestConvertBinary builds vlctl and checks the contract a shell sees: XML
// on stdout and status 0, or status 1 with one line on stderr and nothing on
// stdout.
func TestConvertBinary(t *testing.T) {
	testenv.Slow(t, "a go build of the binary")
	fedora := corpus.File(t, "vmi-fedora.yaml")
	bin := filepath.Join(t.TempDir(), "vlctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vlctl: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, stderr, code := run("convert", "--emulation", fedora)
	if code != 0 || !strings.HasPrefix(out, `<domain type="qemu">`) || stderr != "" {
		t.Fatalf("good input: status %d, stderr %q, stdout %.80q", code, stderr, out)
	}
	bad := writeFile(t, noIfaces+"    cpu:\n      model: \"\"\n      sockets: -3\n      cores: -1\n")
	for _, args := range [][]string{{"convert", bad}, {"convert", "--no-such-flag", fedora}, {"convert"}} {
		out, stderr, code = run(args...)
		if code != 1 || out != "" || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 || stderr == "" {
			t.Errorf("%v: status %d, stdout %q, stderr %q; want 1, nothing, one line", args, code, out, stderr)
		}
	}
	if !strings.Contains(stderr, "accepts 1 arg") {
		t.Errorf("missing FILE: stderr %q", stderr)
	}
}
