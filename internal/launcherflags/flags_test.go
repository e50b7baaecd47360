package launcherflags

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// The flags virt-controller's pod template passes (kubevirt-wire.md 5.3).
var kubevirtArgs = []string{
	"--qemu-timeout", "263s", "--name", "vm1", "--uid", "u-1", "--namespace", "ns1",
	"--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
	"--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45",
	"--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
	"--hypervisor", "kvm", "--run-as-nonroot", "--image-volume", "--upgrade-ordinal-ifaces",
	"--vgpu-dedicated-hook", "--vm-stats-collector", "--firmware-auto-selection", "--allow-emulation",
	"--keep-after-failure", "--simulate-crash", "--libvirt-hook-server-and-client", "--libvirt-log-filters", "1:qemu",
	"--allow-cross-arch-emulation", "--qemu-agent-sys-interval", "120s", "--qemu-agent-file-interval", "300s",
	"--qemu-agent-user-interval", "10s", "--qemu-agent-version-interval", "300s",
	"--qemu-fsfreeze-status-interval", "5s", "--hotplug-disk-dir", "/var/run/kubevirt/hotplug-disks/", "-v", "4",
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--grace-period-seconds", "-1"}, "grace-period-seconds"},
		{[]string{"--qemu-timeout", "0s"}, "qemu-timeout"},
		{[]string{"--hypervisor", "xen"}, "only kvm"},
		{[]string{"--private-dir", "rel"}, "absolute"},
		{[]string{"--image-volume-dir", "rel"}, "--image-volume-dir \"rel\": must be an absolute path"},
		{[]string{"--kernel-boot-volume-dir", ""}, "--kernel-boot-volume-dir"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", tt.args, err, tt.want)
		}
	}
}

func TestParseKubeVirtArgs(t *testing.T) {
	o, err := Parse(kubevirtArgs, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.QemuTimeout != 263*time.Second || o.Name != "vm1" || o.UID != "u-1" || o.Namespace != "ns1" ||
		o.GracePeriodSeconds != 45 || !o.AllowEmulation || !o.RunAsNonroot || o.LibvirtLogFilters != "1:qemu" ||
		o.Verbosity != 4 || !o.SimulateCrash || !o.ImageVolume || !o.LibvirtHookServerAndClient {
		t.Errorf("parsed %+v", o)
	}
	// --image-volume: KubeVirt's fixed mount points of the image volumes.
	if l := o.Layout(); l.ImageVolume(2) != "/var/run/kubevirt-image-volume/disk_2" || l.KernelBootVolumeDir != "/var/run/kubevirt-kernel-boot" {
		t.Errorf("image volume roots %q %q", l.ImageVolume(2), l.KernelBootVolumeDir)
	}
	if got := o.Layout().HotplugDiskDir; got != "/var/run/kubevirt/hotplug-disks" {
		t.Errorf("hotplug dir %q", got)
	}
}

func TestDefaults(t *testing.T) {
	o, err := Parse(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{QemuTimeout: 3 * time.Minute, ShareDir: "/var/run/kubevirt", PrivateDir: "/var/run/kubevirt-private",
		EphemeralDiskDir: "/var/run/kubevirt-ephemeral-disks", ContainerDiskDir: "/var/run/kubevirt/container-disks",
		GracePeriodSeconds: 30, OVMFPath: "/usr/share/edk2/ovmf", DiskMemoryLimit: 2097152000, Hypervisor: "kvm", Verbosity: 2}
	if o.QemuTimeout != want.QemuTimeout || o.ShareDir != want.ShareDir || o.PrivateDir != want.PrivateDir ||
		o.EphemeralDiskDir != want.EphemeralDiskDir || o.ContainerDiskDir != want.ContainerDiskDir ||
		o.GracePeriodSeconds != want.GracePeriodSeconds || o.OVMFPath != want.OVMFPath ||
		o.DiskMemoryLimit != want.DiskMemoryLimit || o.Hypervisor != want.Hypervisor || o.Verbosity != want.Verbosity {
		t.Errorf("defaults %+v", o)
	}
	if o.Layout().LibvirtRunDir != "/var/run/libvirt" {
		t.Errorf("libvirt run dir %q", o.Layout().LibvirtRunDir)
	}
}

// TestHelpListsEveryFlag: --help names every flag the pod template passes,
// and marks the ignored ones.
func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	o := &Options{}
	fs := o.FlagSet(&out)
	fs.Usage()
	help := out.String()
	for _, a := range kubevirtArgs {
		if strings.HasPrefix(a, "-") && !strings.Contains(help, "  "+a+" ") && !strings.Contains(help, "  "+a+"\n") &&
			!strings.Contains(help, "  -"+strings.TrimPrefix(a, "--")) {
			t.Errorf("--help does not list %s", a)
		}
	}
	for _, f := range []string{"vgpu-dedicated-hook"} {
		i := strings.Index(help, "-"+f)
		if i < 0 || !strings.Contains(help[i:min(len(help), i+200)], "(accepted, ignored)") {
			t.Errorf("--help does not mark %s as ignored", f)
		}
	}
	for _, f := range []string{"-image-volume\n", "-vm-stats-collector\n", "-libvirt-hook-server-and-client\n", "-upgrade-ordinal-ifaces\n", "-qemu-agent-sys-interval duration", "-qemu-fsfreeze-status-interval duration"} {
		if i := strings.Index(help, f); i < 0 || strings.Contains(help[i:min(len(help), i+250)], "(accepted, ignored)") {
			t.Errorf("--help does not list %s as honoured", strings.TrimSpace(f))
		}
	}
	if !strings.Contains(help, "force-emulation") {
		t.Error("--help lacks --force-emulation")
	}
}

// TestArgsRoundTrip: Args renders options Parse reads back unchanged, for
// options that differ from every default (each field set by reflection,
// so a field added later is covered), and for the defaults (no flag).
func TestArgsRoundTrip(t *testing.T) {
	def, err := Parse(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if args := def.Args(); len(args) != 0 {
		t.Errorf("the defaults render as %q, want no flag", args)
	}
	o := *def
	v := reflect.ValueOf(&o).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("/x/" + v.Type().Field(i).Name) // absolute: the directory flags must be
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			if f.Type() == reflect.TypeOf(time.Duration(0)) {
				f.SetInt(int64(7*time.Second) + int64(i))
			} else {
				f.SetInt(int64(40 + i))
			}
		case reflect.Uint:
			f.SetUint(uint64(3 + i))
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	o.Hypervisor = "kvm" // the one value it takes, which is its default
	args := o.Args()
	got, err := Parse(args, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	if !reflect.DeepEqual(*got, o) {
		t.Errorf("round trip:\n got %+v\nwant %+v\nargs %q", *got, o, args)
	}
}

// TestSetLayout: a layout set into the options comes back out of them.
func TestSetLayout(t *testing.T) {
	l := layout.Under("/w")
	o := Defaults()
	o.SetLayout(l)
	if got := o.Layout(); got != l {
		t.Errorf("layout round trip:\n got %+v\nwant %+v", got, l)
	}
	if d := Defaults(); d.Layout() != layout.Default() {
		t.Errorf("the defaults' layout %+v is not layout.Default()", d.Layout())
	}
}
