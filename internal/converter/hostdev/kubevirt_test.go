//go:build kubevirtcompare

package hostdev_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/yaml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/devinfo"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/kubevirttool"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// kvCase and kvResult are the JSON of e2e/build/kubevirt/hostdevconvert.
type kvCase struct {
	Name        string                     `json:"name"`
	VMI         *v1.VirtualMachineInstance `json:"vmi"`
	Env         map[string]string          `json:"env,omitempty"`
	NetworkInfo string                     `json:"networkInfo,omitempty"`
	DRAFiles    map[string]string          `json:"draFiles,omitempty"`
}

type kvResult struct {
	Name     string   `json:"name"`
	Hostdevs []string `json:"hostdevs,omitempty"`
	USBModel string   `json:"usbModel,omitempty"`
	Error    string   `json:"error,omitempty"`
	Panic    string   `json:"panic,omitempty"`
}

// kubevirtConvert runs the cases through KubeVirt's host device code
// (hostdevconvert, in the e2e/build/kubevirt module at kubevirt.io/kubevirt
// v1.8.2; it links libvirt's C library, as KubeVirt's launcher does).
func kubevirtConvert(t *testing.T, cases []kvCase) []kvResult {
	return kubevirttool.Run[kvCase, kvResult](t, kubevirttool.Tool{Dir: "hostdevconvert", Cgo: true, Timeout: 20 * time.Minute}, cases)
}

// draRequest is one DRA claim request's device as a driver describes it,
// written where v1.8.2 and where v1.9.0 look for it.
type draRequest struct {
	claim, request string
	template       bool   // the claim is made from a template
	attrs          string // the device's attributes, JSON
}

// files lays the metadata out twice: KubeVirt v1.8.2 reads
// <dir>/<claim>/<request>/ (a template's claim under its generated name,
// found by podClaimName), v1.9.0 <dir>/resourceclaims/<claim>/<request>/
// or <dir>/resourceclaimtemplates/<pod claim name>/<request>/.
func (d draRequest) files() (v182, v190 string, body string) {
	pod := ""
	if d.template {
		pod = `"podClaimName":"` + d.claim + `",`
	}
	body = `{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","metadata":{"name":"x"},` + pod +
		`"requests":[{"name":"` + d.request + `","devices":[{"driver":"gpu.example.com","pool":"node1","name":"dev0","attributes":{` + d.attrs + `}}]}]}`
	if d.template {
		return filepath.Join("vmi-"+d.claim+"-x7k2p", d.request, "gpu.example.com-metadata.json"),
			filepath.Join("resourceclaimtemplates", d.claim, d.request, "gpu.example.com-metadata.json"), body
	}
	return filepath.Join(d.claim, d.request, "gpu.example.com-metadata.json"),
		filepath.Join("resourceclaims", d.claim, d.request, "gpu.example.com-metadata.json"), body
}

// hdRow is one device-plugin environment and VMI.
type hdRow struct {
	name    string
	devices string // spec.domain.devices, YAML
	extra   string // more of spec, YAML
	status  string // status, YAML
	env     map[string]string
	netInfo string
	dra     []draRequest
	// ourErr, when set, is where we deliberately differ: KubeVirt
	// v1.8.2 converts, we refuse with this error.
	ourErr string
}

const (
	uuid1 = "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11"
	uuid2 = "0b4c3a1e-6f2d-4e8a-b1c9-7d3e5f6a8b20"
	uuid3 = "11111111-2222-3333-4444-555555555555"
)

var hdRows = []hdRow{
	{name: "gpu pci", devices: `gpus: [{name: gpu1, deviceName: nvidia.com/GP102GL_Tesla_P40}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0"}},
	{name: "gpus pci in order", devices: `gpus: [{name: a, deviceName: nvidia.com/GP102GL_Tesla_P40}, {name: b, deviceName: nvidia.com/GP102GL_Tesla_P40}, {name: c, deviceName: nvidia.com/TU104GL}]`,
		env: map[string]string{teslaPCI: "0000:82:00.0,0000:81:00.0,", "PCI_RESOURCE_NVIDIA_COM_TU104GL": "0000:c1:00.1"}},
	{name: "gpu pci, display options not enabled", devices: `gpus: [{name: g, deviceName: nvidia.com/GP102GL_Tesla_P40, virtualGPUOptions: {display: {ramFB: {enabled: true}}}}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0"}},
	// v1.9.0 shows a display of a PCI GPU asked for one explicitly
	// (v1.8.2 never does); libvirt 9.0 has no display for PCI devices.
	{name: "gpu pci, display enabled", devices: `gpus: [{name: g, deviceName: nvidia.com/GP102GL_Tesla_P40, virtualGPUOptions: {display: {enabled: true}}}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0"}, ourErr: "libvirt 9.0 shows a display of mediated devices only"},
	{name: "vgpus, default display on the first", devices: `gpus: [{name: v1, deviceName: nvidia.com/GRID_T4-1Q}, {name: v2, deviceName: nvidia.com/GRID_T4-1Q}]`,
		env: map[string]string{gridMDev: uuid1 + "," + uuid2}},
	{name: "vgpu display options", devices: `gpus: [{name: v1, deviceName: nvidia.com/GRID_T4-1Q, virtualGPUOptions: {display: {enabled: false}}}, {name: v2, deviceName: nvidia.com/GRID_T4-1Q, virtualGPUOptions: {display: {ramFB: {enabled: false}}}}, {name: v3, deviceName: nvidia.com/GRID_T4-1Q, virtualGPUOptions: {display: {enabled: true, ramFB: {enabled: true}}}}]`,
		env: map[string]string{gridMDev: uuid1 + "," + uuid2 + "," + uuid3}},
	{name: "pci and vgpu gpus with host devices", devices: `
gpus: [{name: v, deviceName: nvidia.com/GRID_T4-1Q}, {name: p, deviceName: nvidia.com/GP102GL_Tesla_P40}]
hostDevices: [{name: nvme, deviceName: vendor.com/nvme}, {name: m, deviceName: vendor.com/mdev}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0", gridMDev: uuid1, "PCI_RESOURCE_VENDOR_COM_NVME": "0000:c1:00.0", "MDEV_PCI_RESOURCE_VENDOR_COM_MDEV": uuid2}},
	{name: "usb", devices: `hostDevices: [{name: stick, deviceName: kubevirt.io/storage}, {name: stick2, deviceName: kubevirt.io/storage}]`,
		env: map[string]string{"USB_RESOURCE_KUBEVIRT_IO_STORAGE": "3:7,1:12"}},
	{name: "pci and usb host devices", devices: `hostDevices: [{name: u, deviceName: kubevirt.io/storage}, {name: p, deviceName: intel.com/qat}]`,
		env: map[string]string{"USB_RESOURCE_KUBEVIRT_IO_STORAGE": "3:7", "PCI_RESOURCE_INTEL_COM_QAT": "0000:3d:01.2"}},
	{name: "gpu without its variable", devices: `gpus: [{name: gpu1, deviceName: nvidia.com/GP102GL_Tesla_P40}]`},
	{name: "fewer addresses than gpus", devices: `gpus: [{name: a, deviceName: nvidia.com/GP102GL_Tesla_P40}, {name: b, deviceName: nvidia.com/GP102GL_Tesla_P40}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0"}},
	{name: "short pci address", devices: `gpus: [{name: a, deviceName: nvidia.com/GP102GL_Tesla_P40}]`, env: map[string]string{teslaPCI: "81:00.0"}},
	// A GPU and a host device of one resource draw from pools of their
	// own: KubeVirt gives both the same device, which libvirt refuses
	// only when the domain starts.
	{name: "one device to a gpu and a host device", devices: `
gpus: [{name: a, deviceName: nvidia.com/GP102GL_Tesla_P40}]
hostDevices: [{name: b, deviceName: nvidia.com/GP102GL_Tesla_P40}]`,
		env: map[string]string{teslaPCI: "0000:81:00.0"}, ourErr: "host device PCI 0000:81:00.0 is given to both hostdevice-b and gpu-a"},
	{name: "sriov", devices: `interfaces: [{name: fast, sriov: {}, bootOrder: 2, pciAddress: "0000:00:0a.0"}, {name: slow, sriov: {}}, {name: later, sriov: {}}]`,
		extra:   `networks: [{name: fast, multus: {networkName: sriov/a}}, {name: slow, multus: {networkName: sriov/b}}, {name: later, multus: {networkName: sriov/c}}]`,
		status:  `interfaces: [{name: fast, infoSource: "domain, multus-status"}, {name: slow, infoSource: multus-status}]`,
		netInfo: `{"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.4"}}},{"network":"slow","deviceInfo":{"type":"pci","pci":{"pci-address":"0000:3b:02.5"}}},{"network":"later","deviceInfo":{"type":"pci","pci":{"pci-address":"0000:3b:02.6"}}}]}`},
	{name: "sriov without network-info", devices: `interfaces: [{name: fast, sriov: {}}]`,
		extra: `networks: [{name: fast, multus: {networkName: sriov/a}}]`, status: `interfaces: [{name: fast, infoSource: multus-status}]`},
	{name: "sriov network missing from network-info", devices: `interfaces: [{name: fast, sriov: {}}]`,
		extra: `networks: [{name: fast, multus: {networkName: sriov/a}}]`, status: `interfaces: [{name: fast, infoSource: multus-status}]`,
		netInfo: `{"interfaces":[{"network":"other","deviceInfo":{"type":"pci","pci":{"pci-address":"0000:3b:02.4"}}}]}`},
	{name: "dra gpus and host devices", devices: `
gpus: [{name: p, claimName: pc, requestName: r}, {name: v, claimName: vc, requestName: r}, {name: dp, deviceName: nvidia.com/GP102GL_Tesla_P40}]
hostDevices: [{name: h, claimName: hc, requestName: r1}, {name: m, claimName: hc, requestName: r2}]`,
		extra: `resourceClaims: [{name: pc, resourceClaimName: pgpu-claim}, {name: vc, resourceClaimTemplateName: vgpu-tmpl}, {name: hc, resourceClaimName: host-claim}]`,
		env:   map[string]string{teslaPCI: "0000:83:00.0"},
		dra: []draRequest{
			{claim: "pgpu-claim", request: "r", attrs: `"resource.kubernetes.io/pciBusID":{"string":"0000:81:00.0"}`},
			{claim: "vc", request: "r", template: true, attrs: `"mdevUUID":{"string":"` + uuid1 + `"},"resource.kubernetes.io/pciBusID":{"string":"0000:82:00.0"}`},
			{claim: "host-claim", request: "r1", attrs: `"resource.kubernetes.io/pciBusID":{"string":"0000:c1:00.0"}`},
			{claim: "host-claim", request: "r2", attrs: `"mdevUUID":{"string":"` + uuid2 + `"}`},
		}},
	{name: "dra gpu without metadata", devices: `gpus: [{name: p, claimName: pc, requestName: r}]`,
		extra: `resourceClaims: [{name: pc, resourceClaimName: pgpu-claim}]`},
	{name: "root complex placement", devices: `
gpus: [{name: g, deviceName: nvidia.com/GP102GL_Tesla_P40}]
hostDevices: [{name: m, deviceName: vendor.com/mdev}, {name: u, deviceName: kubevirt.io/storage}]`,
		extra: `annotations`,
		env:   map[string]string{teslaPCI: "0000:81:00.0", "MDEV_PCI_RESOURCE_VENDOR_COM_MDEV": uuid2, "USB_RESOURCE_KUBEVIRT_IO_STORAGE": "3:7"}},
}

// vmiOf is the row's VMI after the defaults, as the launcher gets it.
func (r hdRow) vmiOf(t *testing.T) *v1.VirtualMachineInstance {
	t.Helper()
	meta := "metadata: {name: hd, namespace: default}\n"
	extra := r.extra
	if extra == "annotations" {
		meta = "metadata: {name: hd, namespace: default, annotations: {kubevirt.io/placePCIDevicesOnRootComplex: \"true\"}}\n"
		extra = ""
	}
	doc := "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n" + meta +
		"spec:\n  domain:\n    memory: {guest: 256Mi}\n    devices:\n      autoattachPodInterface: false\n" + indent(r.devices, "      ")
	if extra != "" {
		doc += indent(extra, "  ")
	}
	v, err := vmi.Load([]byte(doc), vmi.Options{})
	if err != nil {
		t.Fatalf("%s: %v\n%s", r.name, err, doc)
	}
	if r.status != "" {
		if err := yamlInto(r.status, &v.Status); err != nil {
			t.Fatalf("%s: status: %v", r.name, err)
		}
	}
	return v
}

func indent(s, by string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString(by + l + "\n")
	}
	return b.String()
}

// ours converts the row with our code, the pod's files read by devinfo
// from where v1.9.0 reads them.
func (r hdRow) ours(t *testing.T, v *v1.VirtualMachineInstance) (*libvirtxml.Domain, error) {
	dir := t.TempDir()
	rd := devinfo.Reader{NetworkInfo: filepath.Join(dir, "network-info"), DRADir: filepath.Join(dir, "dra"), NetworkInfoWait: time.Millisecond}
	for k, val := range r.env {
		rd.Environ = append(rd.Environ, k+"="+val)
	}
	if r.netInfo != "" {
		if err := os.WriteFile(rd.NetworkInfo, []byte(r.netInfo), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range r.dra {
		_, rel, body := d.files()
		p := filepath.Join(rd.DRADir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := facts.Default(layout.Default())
	c.Emulation = true
	c.Devices = rd.Read(context.Background(), v)
	return converter.Convert(v.DeepCopy(), c)
}

// canon is a host device's parts that matter, in one line.
func canon(h libvirtxml.DomainHostdev) string {
	var b strings.Builder
	switch {
	case h.SubsysPCI != nil:
		a := h.SubsysPCI.Source.Address
		fmt.Fprintf(&b, "pci %04x:%02x:%02x.%x managed=%s display=%s ramfb=%s", *a.Domain, *a.Bus, *a.Slot, *a.Function, h.Managed, h.SubsysPCI.Display, h.SubsysPCI.RamFB)
	case h.SubsysMDev != nil:
		fmt.Fprintf(&b, "mdev %s model=%s display=%s ramfb=%s managed=%s", h.SubsysMDev.Source.Address.UUID, h.SubsysMDev.Model, h.SubsysMDev.Display, h.SubsysMDev.RamFB, h.Managed)
	case h.SubsysUSB != nil:
		a := h.SubsysUSB.Source.Address
		fmt.Fprintf(&b, "usb %d:%d managed=%s", *a.Bus, *a.Device, h.Managed)
	default:
		b.WriteString("other")
	}
	if h.Alias != nil {
		b.WriteString(" alias=" + h.Alias.Name)
	}
	if h.Boot != nil {
		fmt.Fprintf(&b, " boot=%d", h.Boot.Order)
	}
	if a := h.Address; a != nil && a.PCI != nil {
		fmt.Fprintf(&b, " guest=%04x:%02x:%02x.%x", *a.PCI.Domain, *a.PCI.Bus, *a.PCI.Slot, *a.PCI.Function)
	}
	return b.String()
}

// TestAgainstKubeVirt converts a table of device-plugin environments
// (GPUs, vGPUs, USB, SR-IOV, DRA) with KubeVirt's own code and with ours,
// and wants the same <hostdev> elements (type, host address or UUID,
// managed, model, display, ramfb, alias, boot order, guest address) and
// USB controller, or a refusal from both; the rows where we differ say so
// (ourErr). KubeVirt's code is v1.8.2's (v1.9.0's modules are not served);
// v1.9.0's changes to it are the PCI display (refused here) and the DRA
// metadata layout (each is given the files where it reads them).
func TestAgainstKubeVirt(t *testing.T) {
	testenv.Slow(t, "a cgo build of KubeVirt's host device code and converter (e2e/build/kubevirt/hostdevconvert)")
	testenv.Programs(t, "pkg-config", "gcc")
	var cases []kvCase
	for _, r := range hdRows {
		c := kvCase{Name: r.name, VMI: r.vmiOf(t), Env: r.env, NetworkInfo: r.netInfo, DRAFiles: map[string]string{}}
		for _, d := range r.dra {
			rel, _, body := d.files()
			c.DRAFiles[rel] = body
		}
		cases = append(cases, c)
	}
	theirs := kubevirtConvert(t, cases)
	same, refused, differ := 0, 0, 0
	for i, r := range hdRows {
		kv := theirs[i]
		dom, err := r.ours(t, cases[i].VMI)
		switch {
		case kv.Panic != "":
			t.Errorf("%s: KubeVirt's code panics: %s", r.name, kv.Panic)
		case r.ourErr != "":
			if kv.Error != "" || err == nil || !strings.Contains(err.Error(), r.ourErr) {
				t.Errorf("%s: want KubeVirt to convert and ours to refuse with %q; KubeVirt: %q, ours: %v", r.name, r.ourErr, kv.Error, err)
				continue
			}
			t.Logf("%s: KubeVirt v1.8.2 converts (%s); ours refuses: %v", r.name, strings.Join(kv.Hostdevs, " "), err)
			differ++
		case kv.Error != "" || err != nil:
			if kv.Error == "" || err == nil {
				t.Errorf("%s: KubeVirt: error %q; ours: %v", r.name, kv.Error, err)
				continue
			}
			t.Logf("%s: both refuse\n  KubeVirt: %s\n  ours:     %v", r.name, kv.Error, err)
			refused++
		default:
			var a, b []string
			for _, x := range kv.Hostdevs {
				// KubeVirt leaves PCI devices' mode to libvirt's default.
				if !strings.Contains(x, ` mode="`) {
					x = strings.Replace(x, "<hostdev ", `<hostdev mode="subsystem" `, 1)
				}
				var h libvirtxml.DomainHostdev
				if err := h.Unmarshal(x); err != nil {
					t.Fatalf("%s: KubeVirt's %s: %v", r.name, x, err)
				}
				a = append(a, canon(h))
			}
			usb := ""
			for _, h := range dom.Devices.Hostdevs {
				b = append(b, canon(h))
			}
			for _, ctl := range dom.Devices.Controllers {
				if ctl.Type == "usb" {
					usb = ctl.Model
				}
			}
			if strings.Join(a, "\n") != strings.Join(b, "\n") || kv.USBModel != usb {
				t.Errorf("%s: host devices differ\nKubeVirt (usb %s):\n  %s\nours (usb %s):\n  %s", r.name, kv.USBModel, strings.Join(a, "\n  "), usb, strings.Join(b, "\n  "))
				continue
			}
			same++
		}
	}
	t.Logf("%d rows: %d the same, %d refused by both, %d deliberate differences", len(hdRows), same, refused, differ)
}

func yamlInto(s string, into any) error { return yaml.UnmarshalStrict([]byte(s), into) }
