package disks

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// readISO reads every file of an ISO back with go-diskfs, which reads the
// Rock Ridge names when present. (The machine's kernel has no isofs module,
// so no loop mount here; the test guest's Linux mounts these ISOs in
// internal/testguest.)
func readISO(t *testing.T, iso string) map[string]string {
	t.Helper()
	st, err := file.OpenFromPath(iso, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fi, err := os.Stat(iso)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := iso9660.Read(st, fi.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := fsys.ReadDir(dir)
		if err != nil {
			t.Fatalf("ReadDir %s: %v", dir, err)
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if e.IsDir() {
				walk(p)
				continue
			}
			b, err := fsys.ReadFile(p)
			if err != nil {
				t.Fatalf("ReadFile %s: %v", p, err)
			}
			out[p] = string(b)
		}
	}
	walk(".")
	return out
}

// utf16be is how Joliet spells a name.
func utf16be(s string) []byte {
	var b []byte
	for _, r := range utf16.Encode([]rune(s)) {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// blkid asks util-linux's blkid, an independent reader of the image. It
// is in /usr/sbin, which an ordinary user's PATH (the fast tier's) lacks.
func blkid(t *testing.T, dev, tag string) string {
	t.Helper()
	bin := "blkid"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/blkid"
	}
	return strings.TrimSpace(run(t, bin, "-p", "-o", "value", "-s", tag, dev))
}

func TestNoCloudISO(t *testing.T) {
	p, _ := newPreparer(t)
	ctx := context.Background()
	vmi := vmiWith(v1.Volume{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
		UserDataBase64: "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtbZWNobywgaGldXQo=", // #cloud-config\nruncmd: [[echo, hi]]\n
		NetworkData:    "version: 2\nethernets: {eth0: {dhcp4: true}}\n",
	}}})
	vmi.Spec.Hostname = "myhost"
	vmi.Spec.AccessCredentials = []v1.AccessCredential{{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
		Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "mykeys"}},
		PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}},
	}}}
	writeK8sVolume(t, p.Layout.SecretSource("mykeys-access-cred"), map[string]string{"key1": "ssh-ed25519 AAAA test@host"})
	if _, err := p.Prepare(ctx, vmi, nil); err != nil {
		t.Fatal(err)
	}
	iso := p.Layout.CloudInitNoCloudISO("ns1", "testvm")
	if got := blkid(t, iso, "LABEL"); got != NoCloudLabel {
		t.Errorf("label %q", got)
	}
	if got := blkid(t, iso, "TYPE"); got != "iso9660" {
		t.Errorf("type %q", got)
	}
	files := readISO(t, iso)
	if k := strings.Join(keys(files), " "); k != "meta-data network-config user-data" {
		t.Fatalf("files: %s", k)
	}
	if files["user-data"] != "#cloud-config\nruncmd: [[echo, hi]]\n" || !strings.HasPrefix(files["network-config"], "version: 2") {
		t.Errorf("user-data %q network-config %q", files["user-data"], files["network-config"])
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(files["meta-data"]), &meta); err != nil {
		t.Fatal(err)
	}
	if meta["instance-id"] != "5d307ca9-b3ef-428c-8861-06e72d69f223" || meta["local-hostname"] != "myhost" {
		t.Errorf("meta-data %s", files["meta-data"])
	}
	if k, _ := meta["public-keys"].(map[string]any); k["0"] != "ssh-ed25519 AAAA test@host" {
		t.Errorf("public-keys in %s", files["meta-data"])
	}

	// go-diskfs reads it back too, label and all.
	st, err := file.OpenFromPath(iso, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fi, _ := os.Stat(iso)
	fsys, err := iso9660.Read(st, fi.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if fsys.Label() != NoCloudLabel+strings.Repeat(" ", 32-len(NoCloudLabel)) {
		t.Errorf("go-diskfs label %q", fsys.Label())
	}
	if b, err := fsys.ReadFile("user-data"); err != nil || !strings.HasPrefix(string(b), "#cloud-config") {
		t.Errorf("go-diskfs user-data %q %v", b, err)
	}

	// Both volume descriptors carry the label, padded with spaces: the
	// primary (sector 16) in ASCII, the Joliet one (sector 17) in UCS-2.
	img, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	if len(img)%2048 != 0 {
		t.Errorf("ISO size %d is not a whole number of 2048-byte sectors", len(img))
	}
	if got := string(img[16*2048+40 : 16*2048+72]); got != padLabel(NoCloudLabel) {
		t.Errorf("primary volume id %q", got)
	}
	if got := img[17*2048+40 : 17*2048+72]; !bytes.Equal(got, utf16be(padLabel(NoCloudLabel)[:16])) {
		t.Errorf("Joliet volume id % x", got)
	}

	// A second Prepare rebuilds the ISO from the (changed) spec.
	vmi.Spec.Volumes[0].CloudInitNoCloud = &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh\necho changed\n"}
	if _, err := p.Prepare(ctx, vmi, nil); err != nil {
		t.Fatal(err)
	}
	files = readISO(t, iso)
	if files["user-data"] != "#!/bin/sh\necho changed\n" || files["network-config"] != "" {
		t.Errorf("after rebuild: %v", files)
	}
}

func TestNoCloudSecretRef(t *testing.T) {
	p, _ := newPreparer(t)
	writeK8sVolume(t, p.Layout.SecretSource("ci"), map[string]string{"userData": "from-secret", "networkdata": "net-from-secret"})
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
		UserDataSecretRef:    &k8sv1.LocalObjectReference{Name: "s"},
		NetworkDataSecretRef: &k8sv1.LocalObjectReference{Name: "s"},
	}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	files := readISO(t, p.Layout.CloudInitNoCloudISO("ns1", "testvm"))
	if files["user-data"] != "from-secret" || files["network-config"] != "net-from-secret" {
		t.Errorf("files %v", files)
	}
}

func TestConfigDriveISO(t *testing.T) {
	p, _ := newPreparer(t)
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{
		UserData: "#cloud-config\n", NetworkData: `{"links":[]}`,
	}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	iso := p.Layout.CloudInitConfigDriveISO("ns1", "testvm")
	if got := blkid(t, iso, "LABEL"); got != ConfigDriveLabel {
		t.Errorf("label %q", got)
	}
	files := readISO(t, iso)
	if k := strings.Join(keys(files), " "); k != "openstack/latest/meta_data.json openstack/latest/network_data.json openstack/latest/user_data" {
		t.Fatalf("files: %s", k)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(files["openstack/latest/meta_data.json"]), &meta); err != nil {
		t.Fatal(err)
	}
	if meta["instance_id"] != "testvm.ns1" || meta["uuid"] != "5d307ca9-b3ef-428c-8861-06e72d69f223" || meta["hostname"] != "testvm" {
		t.Errorf("meta_data.json %s", files["openstack/latest/meta_data.json"])
	}
}

// writeK8sVolume lays files out as the kubelet's atomic writer does: the
// data in a timestamped directory, "..data" pointing at it, and one symlink
// per key.
func writeK8sVolume(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_11_30_09_00_00.123456789")
	for name, content := range files {
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		top := strings.SplitN(name, "/", 2)[0]
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigVolumeISOs(t *testing.T) {
	p, _ := newPreparer(t)
	l := p.Layout
	long := "a-configuration-file-with-a-rather-long-name.yaml"
	writeK8sVolume(t, l.ConfigMapSource("cm"), map[string]string{long: "key: value\n", "sub/dir/nested.txt": "nested\n"})
	writeK8sVolume(t, l.SecretSource("sec"), map[string]string{"password": "s3cret"})
	writeK8sVolume(t, l.DownwardAPISource("dapi"), map[string]string{"labels": `app="x"`})
	writeK8sVolume(t, l.ServiceAccountSource(), map[string]string{"token": "tok", "namespace": "ns1"})
	writeK8sVolume(t, l.SysprepSource("sp"), map[string]string{"Autounattend.xml": "<unattend/>"})
	vmi := vmiWith(
		v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{VolumeLabel: "mylabel"}}},
		v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "dapi", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}},
		v1.Volume{Name: "sa", VolumeSource: v1.VolumeSource{ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "default"}}},
		v1.Volume{Name: "sp", VolumeSource: v1.VolumeSource{Sysprep: &v1.SysprepSource{ConfigMap: &k8sv1.LocalObjectReference{Name: "x"}}}},
	)
	vols, err := p.Gather(context.Background(), vmi)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 5 {
		t.Errorf("facts for %d of 5 config volumes", len(vols))
	}
	if _, err := p.Prepare(context.Background(), vmi, vols); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		iso, label string
		want       map[string]string
	}{
		{l.ConfigMapISO("cm"), "mylabel", map[string]string{long: "key: value\n", "sub/dir/nested.txt": "nested\n"}},
		{l.SecretISO("sec"), ConfigLabel, map[string]string{"password": "s3cret"}},
		{l.DownwardAPIISO("dapi"), ConfigLabel, map[string]string{"labels": `app="x"`}},
		{l.ServiceAccountISO(), ConfigLabel, map[string]string{"token": "tok", "namespace": "ns1"}},
		{l.SysprepISO("sp"), SysprepLabel, map[string]string{"Autounattend.xml": "<unattend/>"}},
	} {
		if got := blkid(t, tc.iso, "LABEL"); got != tc.label {
			t.Errorf("%s: label %q, want %q", tc.iso, got, tc.label)
		}
		got := readISO(t, tc.iso)
		if strings.Join(keys(got), " ") != strings.Join(keys(tc.want), " ") {
			t.Errorf("%s: files %v, want %v", tc.iso, keys(got), keys(tc.want))
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.iso, k, got[k], v)
			}
		}
	}
	// The long name is in the image twice: in ASCII in the Rock Ridge NM
	// entry and in UCS-2 in the Joliet tree (plain ISO 9660 holds only an
	// 8.3 name).
	img, err := os.ReadFile(l.ConfigMapISO("cm"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(img, []byte(long)) {
		t.Error("no Rock Ridge name in the image")
	}
	if !bytes.Contains(img, utf16be(long)) {
		t.Error("no Joliet name in the image")
	}
	if !bytes.Contains(img, []byte("CD001")) || !bytes.Contains(img, []byte("%/E")) {
		t.Error("no ISO 9660 / Joliet (UCS-2 level 3) volume descriptor")
	}
}

func TestLabelTooLong(t *testing.T) {
	p, _ := newPreparer(t)
	writeK8sVolume(t, p.Layout.ConfigMapSource("cm"), map[string]string{"a": "b"})
	vmi := vmiWith(v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{VolumeLabel: strings.Repeat("x", 33)}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err == nil || !strings.Contains(err.Error(), "longer than the 32 characters") {
		t.Fatalf("Prepare: %v", err)
	}
}

func TestSysprepNeedsUnattend(t *testing.T) {
	p, _ := newPreparer(t)
	writeK8sVolume(t, p.Layout.SysprepSource("sp"), map[string]string{"other.xml": "x"})
	vmi := vmiWith(v1.Volume{Name: "sp", VolumeSource: v1.VolumeSource{Sysprep: &v1.SysprepSource{Secret: &k8sv1.LocalObjectReference{Name: "x"}}}})
	_, err := p.Prepare(context.Background(), vmi, nil)
	if err == nil || !strings.Contains(err.Error(), "neither autounattend.xml nor unattend.xml") {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := os.Stat(p.Layout.SysprepISO("sp")); err == nil {
		t.Fatal("ISO written despite the error")
	}
}

func BenchmarkNoCloudISO(b *testing.B) {
	dir := b.TempDir()
	p := &Preparer{Layout: layout.Under(dir)}
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{
		UserData:    "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\nruncmd:\n  - echo hello\n",
		NetworkData: "version: 2\nethernets: {eth0: {dhcp4: true}}\n",
	}}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Prepare(ctx, vmi, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConfigDriveDevices: after the define, the ConfigDrive's
// meta_data.json lists the tagged interfaces and host devices at the
// addresses the domain got, as KubeVirt's buildDevicesMetadata writes them
// (an untagged interface and a disk tag, which KubeVirt does not list,
// are left out); without a tag the ISO is not rewritten.
func TestConfigDriveDevices(t *testing.T) {
	p, _ := newPreparer(t)
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "#cloud-config\n"}}})
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Tag: "frontend"}, {Name: "plain"}, {Name: "vf", Tag: "fast"}}
	vmi.Spec.Domain.Devices.HostDevices = []v1.HostDevice{{Name: "nvme", Tag: "scratch"}}
	vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "ci", Tag: "seed"}}
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	pci := func(bus, slot uint) *libvirtxml.DomainAddress {
		zero := uint(0)
		return &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &zero, Bus: &bus, Slot: &slot, Function: &zero}}
	}
	dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{
		Interfaces: []libvirtxml.DomainInterface{
			{Alias: &libvirtxml.DomainAlias{Name: "ua-default"}, MAC: &libvirtxml.DomainInterfaceMAC{Address: "02:00:00:00:00:01"}, Address: pci(1, 0)},
			{Alias: &libvirtxml.DomainAlias{Name: "ua-plain"}, Address: pci(2, 0)},
		},
		Hostdevs: []libvirtxml.DomainHostdev{
			{Alias: &libvirtxml.DomainAlias{Name: "ua-sriov-vf"}, Address: pci(0, 0x1d)},
			{Alias: &libvirtxml.DomainAlias{Name: "ua-hostdevice-nvme"}, Address: pci(3, 0)},
		},
	}}
	read := 0
	if err := p.ConfigDriveDevices(vmi, func() (*libvirtxml.Domain, error) { read++; return dom, nil }); err != nil {
		t.Fatal(err)
	}
	var meta struct {
		InstanceID string `json:"instance_id"`
		Devices    []map[string]any
	}
	files := readISO(t, p.Layout.CloudInitConfigDriveISO("ns1", "testvm"))
	if err := json.Unmarshal([]byte(files["openstack/latest/meta_data.json"]), &meta); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(meta.Devices)
	want := `[{"address":"0000:01:00.0","bus":"pci","mac":"02:00:00:00:00:01","tags":["frontend"],"type":"nic"},` +
		`{"address":"0000:00:1d.0","bus":"pci","tags":["fast"],"type":"nic"},` +
		`{"address":"0000:03:00.0","bus":"pci","tags":["scratch"],"type":"hostdev"}]`
	if string(got) != want || meta.InstanceID != "testvm.ns1" || read != 1 {
		t.Errorf("meta_data.json devices %s (read the domain %d times)\nwant %s\n%s", got, read, want, files["openstack/latest/meta_data.json"])
	}

	// No tags: the domain is not even read.
	vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Domain.Devices.HostDevices = nil, nil
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.ConfigDriveDevices(vmi, func() (*libvirtxml.Domain, error) { read++; return dom, nil }); err != nil || read != 1 {
		t.Errorf("without tags: %v, domain read %d times", err, read)
	}
	if m := readISO(t, p.Layout.CloudInitConfigDriveISO("ns1", "testvm"))["openstack/latest/meta_data.json"]; strings.Contains(m, "devices") {
		t.Errorf("meta_data.json without tags: %s", m)
	}
}
