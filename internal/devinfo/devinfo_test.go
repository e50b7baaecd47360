package devinfo

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestEnv(t *testing.T) {
	got := Env([]string{"PATH=/bin", "PCI_RESOURCE_NVIDIA_COM_X=0000:81:00.0,", "MDEV_PCI_RESOURCE_A=u", "USB_RESOURCE_B=1:2", "PCI_RESOURCEX=no", "USB_RESOURCE_C"})
	want := map[string]string{"PCI_RESOURCE_NVIDIA_COM_X": "0000:81:00.0,", "MDEV_PCI_RESOURCE_A": "u", "USB_RESOURCE_B": "1:2"}
	if len(got) != len(want) {
		t.Fatalf("Env = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Env[%s] = %q, want %q", k, got[k], v)
		}
	}
}

func sriovVMI() *v1.VirtualMachineInstance {
	v := &v1.VirtualMachineInstance{}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "net1", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
	v.Status.Interfaces = []v1.VirtualMachineInstanceNetworkInterface{{Name: "net1", InfoSource: "multus-status"}}
	return v
}

const netInfo = `{"interfaces":[{"network":"default"},{"network":"net1","deviceInfo":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.4"}},"mac":"02:00:00:00:00:01"}]}`

func TestNetworkInfo(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "network-info")
	r := Reader{NetworkInfo: file, NetworkInfoWait: 300 * time.Millisecond}
	ctx := context.Background()

	d := r.Read(ctx, sriovVMI())
	if d.NetworkPCI != nil || !strings.Contains(d.NetworkInfoErr, "no such file") {
		t.Errorf("missing file: %v %q", d.NetworkPCI, d.NetworkInfoErr)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	d = r.Read(ctx, sriovVMI())
	if !strings.Contains(d.NetworkInfoErr, "still empty after 300ms") || time.Since(t0) < 300*time.Millisecond {
		t.Errorf("empty file: %q after %v", d.NetworkInfoErr, time.Since(t0))
	}
	// Filled while the launcher waits.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = os.WriteFile(file, []byte(netInfo), 0o644)
	}()
	d = r.Read(ctx, sriovVMI())
	if d.NetworkPCI["net1"] != "0000:3b:02.4" || len(d.NetworkPCI) != 1 || d.NetworkInfoErr != "" {
		t.Errorf("filled file: %v %q", d.NetworkPCI, d.NetworkInfoErr)
	}
	// Not read when no SR-IOV interface is attached by Multus.
	v := sriovVMI()
	v.Status.Interfaces = nil
	if d := r.Read(ctx, v); d.NetworkPCI != nil || d.NetworkInfoErr != "" {
		t.Errorf("read for an interface Multus has not attached: %v %q", d.NetworkPCI, d.NetworkInfoErr)
	}
}

func TestDRA(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md := func(req, attrs string) string {
		return `{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","requests":[{"name":"` + req + `","devices":[{"driver":"gpu.example.com","pool":"node1","name":"gpu-0","attributes":{` + attrs + `}}]}]}`
	}
	// A newer version first, skipped; a direct claim; a template claim.
	write("resourceclaims/pgpu-claim/pgpu/gpu.example.com-metadata.json",
		`{"apiVersion":"metadata.resource.k8s.io/v1beta1","requests":[]}`+"\n"+md("pgpu", `"resource.kubernetes.io/pciBusID":{"string":"0000:81:00.0"}`))
	write("resourceclaimtemplates/vgpu/v/gpu.example.com-metadata.json", md("v", `"mdevUUID":{"string":"5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11"},"resource.kubernetes.io/pciBusID":{"string":"0000:82:00.0"}`))
	write("resourceclaimtemplates/two/r/a-metadata.json", md("r", ""))
	write("resourceclaimtemplates/two/r/b-metadata.json", md("r", ""))
	write("resourceclaimtemplates/old/r/a-metadata.json", `{"apiVersion":"metadata.resource.k8s.io/v1beta9"}`)
	write("resourceclaimtemplates/other/r/a-metadata.json", md("s", ""))

	name := "pgpu-claim"
	v := &v1.VirtualMachineInstance{}
	v.Spec.ResourceClaims = []v1.VirtualMachineInstanceResourceClaim{{Name: "p", ResourceClaimName: &name}, {Name: "vgpu"}, {Name: "two"}, {Name: "old"}, {Name: "other"}}
	gpu := func(n, claim, req string) v1.GPU {
		return v1.GPU{Name: n, ClaimRequest: &v1.ClaimRequest{ClaimName: claim, RequestName: req}}
	}
	v.Spec.Domain.Devices.GPUs = []v1.GPU{gpu("a", "p", "pgpu"), gpu("b", "vgpu", "v"), gpu("c", "two", "r"), gpu("d", "old", "r"), gpu("e", "other", "r"), gpu("f", "absent", "r"),
		{Name: "plugin", DeviceName: "nvidia.com/x"}}
	d := Reader{DRADir: dir}.Read(context.Background(), v)
	want := map[facts.DRARequest]string{
		{Claim: "p", Request: "pgpu"}:   "0000:81:00.0||",
		{Claim: "vgpu", Request: "v"}:   "0000:82:00.0|5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11|",
		{Claim: "two", Request: "r"}:    "||2 metadata files in " + dir + "/resourceclaimtemplates/two/r: one driver per request is supported",
		{Claim: "old", Request: "r"}:    "||" + dir + "/resourceclaimtemplates/old/r/a-metadata.json: no metadata of version metadata.resource.k8s.io/v1alpha1 (only metadata.resource.k8s.io/v1beta9)",
		{Claim: "other", Request: "r"}:  "||" + dir + `/resourceclaimtemplates/other/r/a-metadata.json has no request "r"`,
		{Claim: "absent", Request: "r"}: `||spec.resourceClaims has no claim named "absent"`,
	}
	if len(d.DRA) != len(want) {
		t.Errorf("%d requests read, want %d: %v", len(d.DRA), len(want), d.DRA)
	}
	for k, w := range want {
		dev := d.DRA[k]
		if got := dev.PCIBusID + "|" + dev.MDevUUID + "|" + dev.Err; got != w {
			t.Errorf("%v: %q, want %q", k, got, w)
		}
	}
}

// TestIOMMUFDSocket: the socket's presence alone marks the pod, as
// KubeVirt's launcher decides (it then connects to take the descriptor).
func TestIOMMUFDSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "iommufd.sock")
	r := Reader{IOMMUFDSocket: sock}
	if r.Read(context.Background(), &v1.VirtualMachineInstance{}).IOMMUFD {
		t.Error("IOMMUFD set without the socket")
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !r.Read(context.Background(), &v1.VirtualMachineInstance{}).IOMMUFD {
		t.Error("IOMMUFD not set with the device plugin's socket there")
	}
	if (Reader{}).Read(context.Background(), &v1.VirtualMachineInstance{}).IOMMUFD {
		t.Error("a reader with no socket path set IOMMUFD")
	}
}
