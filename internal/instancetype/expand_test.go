package instancetype

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// vmYAML is a VM with the given spec lines (instancetype, preference) and
// template domain lines.
func vmYAML(top, domain string) string {
	return `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: t1}
spec:
` + top + `
  template:
    spec:
      domain:
        devices:
          disks:
          - {name: root, disk: {}}
          - {name: cd, cdrom: {}}
` + domain + `
      volumes:
      - {name: root, containerDisk: {image: /img/root.qcow2}}
      - {name: cd, containerDisk: {image: /img/cd.iso}}
`
}

func load(t *testing.T, docs ...string) (*Loaded, error) {
	t.Helper()
	dir := t.TempDir()
	var files []string
	for i, d := range docs {
		p := filepath.Join(dir, "f"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(p, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return Load(files, "", vmi.Options{})
}

const myTypes = `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineInstancetype
metadata: {name: six}
spec:
  cpu: {guest: 6}
  memory: {guest: 3Gi}
  annotations: {from-it: "1"}
---
apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachinePreference
metadata: {name: spread}
spec:
  cpu:
    preferredCPUTopology: spread
    spreadOptions: {across: SocketsCores, ratio: 3}
  devices: {preferredDiskBus: sata, preferredCdromBus: scsi, preferredInterfaceModel: e1000e}
  preferredTerminationGracePeriodSeconds: 77
  annotations: {from-pref: "2", keep: pref}
`

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		docs   []string
		check  func(t *testing.T, v *v1.VirtualMachineInstance)
		errHas []string
	}{
		{
			name: "u1.medium and fedora from the common data",
			docs: []string{vmYAML("  instancetype: {name: u1.medium}\n  preference: {name: fedora}", "")},
			check: func(t *testing.T, v *v1.VirtualMachineInstance) {
				c := v.Spec.Domain.CPU
				if c.Sockets != 1 || c.Cores != 1 || c.Threads != 1 {
					t.Errorf("topology %d/%d/%d, want 1/1/1", c.Sockets, c.Cores, c.Threads)
				}
				if g := v.Spec.Domain.Memory.Guest.String(); g != "4Gi" {
					t.Errorf("memory %s, want 4Gi", g)
				}
				if b := v.Spec.Domain.Devices.Disks[0].Disk.Bus; b != v1.DiskBusVirtio {
					t.Errorf("disk bus %q, want virtio (fedora)", b)
				}
				if v.Spec.Domain.Devices.Rng == nil {
					t.Error("no rng (fedora prefers one)")
				}
				fw := v.Spec.Domain.Firmware
				if fw == nil || fw.Bootloader == nil || fw.Bootloader.EFI == nil || fw.Bootloader.EFI.SecureBoot == nil || !*fw.Bootloader.EFI.SecureBoot {
					t.Errorf("firmware %+v, want EFI with secure boot", fw)
				}
				if v.Annotations[v1.ClusterInstancetypeAnnotation] != "u1.medium" || v.Annotations[v1.ClusterPreferenceAnnotation] != "fedora" ||
					v.Annotations["vm.kubevirt.io/os"] != "linux" {
					t.Errorf("annotations %v", v.Annotations)
				}
				// The pod interface KubeVirt's controller adds gets the model too.
				if ifs := v.Spec.Domain.Devices.Interfaces; len(ifs) != 1 || ifs[0].Model != "virtio" {
					t.Errorf("interfaces %+v, want the default one with model virtio", ifs)
				}
			},
		},
		{
			name: "documents win; spread 3 over sockets and cores; preferences only where unset",
			docs: []string{vmYAML("  instancetype: {name: six, kind: VirtualMachineInstancetype}\n  preference: {name: spread, kind: virtualmachinepreference}",
				"      terminationGracePeriodSeconds: 5"), myTypes},
			check: func(t *testing.T, v *v1.VirtualMachineInstance) {
				c := v.Spec.Domain.CPU
				if c.Sockets != 2 || c.Cores != 3 || c.Threads != 1 {
					t.Errorf("topology %d/%d/%d, want 2/3/1", c.Sockets, c.Cores, c.Threads)
				}
				if g := v.Spec.Domain.Memory.Guest.String(); g != "3Gi" {
					t.Errorf("memory %s", g)
				}
				d := v.Spec.Domain.Devices.Disks
				if d[0].Disk.Bus != "sata" || d[1].CDRom.Bus != "scsi" {
					t.Errorf("buses %q %q, want sata, scsi", d[0].Disk.Bus, d[1].CDRom.Bus)
				}
				if *v.Spec.TerminationGracePeriodSeconds != 5 {
					t.Errorf("grace %d: the VM's 5 must stay", *v.Spec.TerminationGracePeriodSeconds)
				}
				if v.Annotations[v1.InstancetypeAnnotation] != "six" || v.Annotations[v1.PreferenceAnnotation] != "spread" ||
					v.Annotations["from-it"] != "1" || v.Annotations["from-pref"] != "2" {
					t.Errorf("annotations %v", v.Annotations)
				}
			},
		},
		{
			name:   "conflicts name every field",
			docs:   []string{vmYAML("  instancetype: {name: u1.small}", "        cpu: {sockets: 2, model: host-model}\n        resources: {requests: {cpu: '1'}}")},
			errHas: []string{"spec.template.spec.domain.resources.requests.cpu: set by the VM and by the instancetype VirtualMachineClusterInstancetype \"u1.small\"", "spec.template.spec.domain.cpu.sockets: set by"},
		},
		{
			name:   "memory conflict",
			docs:   []string{vmYAML("  instancetype: {name: u1.small}", "        memory: {guest: 1Gi}")},
			errHas: []string{"spec.template.spec.domain.memory.guest: set by the VM and by the instancetype"},
		},
		{
			name:   "missing instancetype",
			docs:   []string{vmYAML("  instancetype: {name: u9.huge}\n  preference: {name: nosuch, kind: VirtualMachinePreference}", "")},
			errHas: []string{`spec.instancetype.name: VirtualMachineClusterInstancetype "u9.huge" not found`, "u1.medium", `spec.preference.name: VirtualMachinePreference "nosuch" not found`},
		},
		{
			name:   "namespaced kind is not found among the common cluster ones",
			docs:   []string{vmYAML("  instancetype: {name: u1.small, kind: VirtualMachineInstancetype}", "")},
			errHas: []string{`spec.instancetype.name: VirtualMachineInstancetype "u1.small" not found`},
		},
		{
			name:   "preference requirements",
			docs:   []string{vmYAML("  instancetype: {name: u1.nano}\n  preference: {name: windows.11}", "")},
			errHas: []string{"spec.instancetype: 1 vCPUs, the preference requires at least 2"},
		},
		{
			name:   "spread that does not divide",
			docs:   []string{vmYAML("  instancetype: {name: u1.medium}\n  preference: {name: spread, kind: VirtualMachinePreference}", ""), myTypes},
			errHas: []string{"instancetype.spec.cpu.guest: 1 vCPUs are not divisible by the preference's spread ratio 3"},
		},
		{
			name:   "bad kind and inferFromVolume",
			docs:   []string{vmYAML("  instancetype: {name: x, kind: Flavor}\n  preference: {inferFromVolume: root}", "")},
			errHas: []string{`spec.instancetype.kind: "Flavor" is not supported`, "spec.preference.inferFromVolume: inferring from a volume's labels needs the cluster's volumes"},
		},
		{
			name:   "a typo in an instancetype document",
			docs:   []string{vmYAML("  instancetype: {name: six, kind: VirtualMachineInstancetype}", ""), strings.Replace(myTypes, "guest: 6", "guets: 6", 1)},
			errHas: []string{"fb.yaml document 1:", `unknown field "guets"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(t, tc.docs...)
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("loaded; want an error saying %q", tc.errHas)
				}
				for _, w := range tc.errHas {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, l.VMI)
		})
	}
}

// The directory comes after the documents and before the common data.
func TestSourcePrecedence(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "its.yaml"), []byte(`apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata: {name: u1.medium}
spec: {cpu: {guest: 3}, memory: {guest: 1Gi}}
`), 0o600)
	f := filepath.Join(dir, "vm.txt")
	os.WriteFile(f, []byte(vmYAML("  instancetype: {name: u1.medium}", "")), 0o600)
	l, err := Load([]string{f}, dir, vmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := l.VMI.Spec.Domain.CPU.Sockets; s != 3 {
		t.Errorf("sockets %d: want the directory's 3 over the common 1", s)
	}
	doc := filepath.Join(t.TempDir(), "doc.yaml")
	os.WriteFile(doc, []byte(`apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata: {name: u1.medium}
spec: {cpu: {guest: 2}, memory: {guest: 1Gi}}
`), 0o600)
	if l, err = Load([]string{f, doc}, dir, vmi.Options{}); err != nil {
		t.Fatal(err)
	}
	if s := l.VMI.Spec.Domain.CPU.Sockets; s != 2 {
		t.Errorf("sockets %d: want the document's 2 over the directory's 3", s)
	}
	if _, err := Load([]string{f}, filepath.Join(dir, "nope"), vmi.Options{}); err == nil || !strings.Contains(err.Error(), "--instancetypes") {
		t.Errorf("a missing --instancetypes dir: %v", err)
	}
}

// The common data decodes, and holds what the docs promise.
func TestCommonData(t *testing.T) {
	s, err := NewStore(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"u1.nano", "u1.medium", "u1.8xlarge", "o1.medium", "cx1.medium", "m1.large", "n1.medium"} {
		if _, ok := s.find(KindClusterInstancetype, n); !ok {
			t.Errorf("no instancetype %s", n)
		}
	}
	for _, n := range []string{"fedora", "ubuntu", "centos.stream9", "rhel.9", "windows.11", "alpine", "cirros"} {
		if _, ok := s.find(KindClusterPreference, n); !ok {
			t.Errorf("no preference %s", n)
		}
	}
	if e, _ := s.find(KindClusterInstancetype, "u1.medium"); e.instancetype.CPU.Guest != 1 || e.instancetype.Memory.Guest.String() != "4Gi" {
		t.Errorf("u1.medium = %+v", e.instancetype)
	}
	if e, _ := s.find(KindClusterInstancetype, "o1.medium"); e.instancetype.Memory.OvercommitPercent != 50 {
		t.Errorf("o1.medium overcommit %d, want 50", e.instancetype.Memory.OvercommitPercent)
	}
}
