// Command hostdevconvert runs KubeVirt's own host device code
// (kubevirt.io/kubevirt v1.8.2's pkg/virt-launcher/virtwrap/device/hostdevice
// and its converter, as its launcher's generateConverterContext and
// Convert_v1_VirtualMachineInstance_To_api_Domain run them) over cases read
// as JSON from stdin, and writes the domains' host devices and USB
// controller, or the error, as JSON to stdout.
// internal/converter/hostdev's TestAgainstKubeVirt compares ours with it.
//
// A case is what a pod would give the launcher: the device plugins'
// variables (set in this process's environment, which KubeVirt's pools
// read), the network-info file's content (KubeVirt reads it from a fixed
// path, /etc/podinfo/network-info, so the SR-IOV steps are restated here
// with its exported pieces: the interfaces Multus reported, the pool from
// the file's bytes, the host devices from the pool) and the DRA metadata
// files, written below a directory of their own.
package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/network/vmispec"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/arch"
	convertertypes "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/types"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/dra"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/generic"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/gpu"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/sriov"
)

// Case is one VMI (defaulted) and what its pod was given.
type Case struct {
	Name        string                     `json:"name"`
	VMI         *v1.VirtualMachineInstance `json:"vmi"`
	Env         map[string]string          `json:"env,omitempty"`
	NetworkInfo string                     `json:"networkInfo,omitempty"`
	// DRAFiles are metadata files by path below the DRA directory.
	DRAFiles map[string]string `json:"draFiles,omitempty"`
}

// Result is the domain's <hostdev> elements and USB controller model, or
// the error KubeVirt's launcher would fail the Sync with.
type Result struct {
	Name     string   `json:"name"`
	Hostdevs []string `json:"hostdevs,omitempty"`
	USBModel string   `json:"usbModel,omitempty"`
	Error    string   `json:"error,omitempty"`
	Panic    string   `json:"panic,omitempty"`
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "hostdevconvert: read cases:", err)
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp("", "hostdevconvert")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostdevconvert:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	out := make([]Result, 0, len(cases))
	for i, c := range cases {
		out = append(out, run(c, filepath.Join(tmp, fmt.Sprint(i))))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "hostdevconvert:", err)
		os.Exit(1)
	}
}

// setEnv makes the device plugins' variables those of the case.
func setEnv(env map[string]string) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		for _, p := range []string{v1.PCIResourcePrefix, v1.MDevResourcePrefix, v1.USBResourcePrefix} {
			if strings.HasPrefix(k, p+"_") {
				os.Unsetenv(k)
			}
		}
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
}

func run(c Case, draDir string) (r Result) {
	r.Name = c.Name
	defer func() {
		if p := recover(); p != nil {
			r = Result{Name: c.Name, Panic: fmt.Sprint(p)}
		}
	}()
	setEnv(c.Env)
	for rel, body := range c.DRAFiles {
		p := filepath.Join(draDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.Error = err.Error()
			return r
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			r.Error = err.Error()
			return r
		}
	}
	vmi := c.VMI
	ctx := &convertertypes.ConverterContext{
		Architecture:   arch.NewConverter(vmi.Spec.Architecture),
		AllowEmulation: true,
		VirtualMachine: vmi,
	}
	var err error
	// generateConverterContext's order: SR-IOV, host devices, GPUs.
	if ctx.SRIOVDevices, err = sriovDevices(vmi, c.NetworkInfo); err != nil {
		r.Error = err.Error()
		return r
	}
	if ctx.GenericHostDevices, err = generic.CreateHostDevices(vmi.Spec.Domain.Devices.HostDevices); err != nil {
		r.Error = err.Error()
		return r
	}
	draHD, err := dra.CreateDRAHostDevices(vmi, draDir)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	ctx.GenericHostDevices = append(ctx.GenericHostDevices, draHD...)
	if ctx.GPUHostDevices, err = gpu.CreateHostDevices(vmi.Spec.Domain.Devices.GPUs); err != nil {
		r.Error = err.Error()
		return r
	}
	draGPU, err := dra.CreateDRAGPUHostDevices(vmi, draDir)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	ctx.GPUHostDevices = append(ctx.GPUHostDevices, draGPU...)

	dom := &api.Domain{}
	if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, dom, ctx); err != nil {
		r.Error = err.Error()
		return r
	}
	for _, hd := range dom.Spec.Devices.HostDevices {
		b, err := xml.Marshal(hd)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.Hostdevs = append(r.Hostdevs, string(b))
	}
	for _, ctl := range dom.Spec.Devices.Controllers {
		if ctl.Type == "usb" {
			r.USBModel = ctl.Model
		}
	}
	return r
}

// sriovDevices is sriov.CreateHostDevices with the network-info file's
// content given instead of read from its fixed path.
func sriovDevices(vmi *v1.VirtualMachineInstance, networkInfo string) ([]api.HostDevice, error) {
	ifaces := vmispec.FilterInterfacesSpec(vmi.Spec.Domain.Devices.Interfaces, func(iface v1.Interface) bool {
		if iface.SRIOV == nil {
			return false
		}
		st := vmispec.LookupInterfaceStatusByName(vmi.Status.Interfaces, iface.Name)
		return st != nil && vmispec.ContainsInfoSource(st.InfoSource, vmispec.InfoSourceMultusStatus)
	})
	if len(ifaces) == 0 {
		return []api.HostDevice{}, nil
	}
	if networkInfo == "" {
		return nil, fmt.Errorf("found no SR-IOV networks to PCI-Address mapping")
	}
	pool, err := sriov.NewPCIAddressPoolWithNetworkStatus([]byte(networkInfo))
	if err != nil {
		return nil, fmt.Errorf("failed to create SR-IOV hostdevices: %v", err)
	}
	if pool.Len() == 0 {
		return nil, fmt.Errorf("found no SR-IOV networks to PCI-Address mapping")
	}
	return sriov.CreateHostDevicesFromIfacesAndPool(ifaces, pool)
}
