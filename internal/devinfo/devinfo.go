// Package devinfo reads what a KubeVirt pod tells its launcher about the
// host devices given to it, as KubeVirt v1.9.0's launcher reads it: the
// device plugins' variables in its environment, the network-info file
// (Multus's network status: an SR-IOV network's virtual function) and the
// DRA drivers' metadata files (kubevirt-conversion.md B.12). The converter
// (internal/converter/hostdev) hands these out to the VMI's devices.
package devinfo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// Reader reads a pod's device facts.
type Reader struct {
	// Environ is the launcher's environment (os.Environ()).
	Environ []string
	// NetworkInfo and DRADir are layout.NetworkInfoFile and
	// layout.DRAMetadataDir in a pod.
	NetworkInfo, DRADir string
	// IOMMUFDSocket is layout.IOMMUFDSocket in a pod; empty: not looked for.
	IOMMUFDSocket string
	// NetworkInfoWait bounds the wait for an empty network-info file to
	// be filled (the kubelet writes it after the pod's start): KubeVirt
	// waits 1 s, reading every 100 ms. Zero means that.
	NetworkInfoWait time.Duration
}

// PodReader is the reader of a launcher in a KubeVirt pod.
func PodReader(environ []string) Reader {
	return Reader{Environ: environ, NetworkInfo: layout.NetworkInfoFile, DRADir: layout.DRAMetadataDir, IOMMUFDSocket: layout.IOMMUFDSocket}
}

// Read gathers the facts the VMI's devices need: the device plugins'
// variables always, the network-info file when an SR-IOV interface is
// attached by Multus, each DRA claim request's metadata the VMI names.
// What cannot be read is recorded for the converter to report with the
// device it concerns.
func (r Reader) Read(ctx context.Context, v *v1.VirtualMachineInstance) facts.Devices {
	d := facts.Devices{Env: Env(r.Environ)}
	if r.IOMMUFDSocket != "" {
		// KubeVirt's launcher looks only at whether the path exists.
		if _, err := os.Lstat(r.IOMMUFDSocket); err == nil {
			d.IOMMUFD = true
		}
	}
	for _, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV != nil && hostdev.MultusReported(v, iface.Name) {
			d.NetworkPCI, d.NetworkInfoErr = r.networkPCI(ctx)
			break
		}
	}
	for _, req := range hostdev.ClaimRequests(v) {
		if d.DRA == nil {
			d.DRA = map[facts.DRARequest]facts.DRADevice{}
		}
		d.DRA[req] = r.draDevice(v, req)
	}
	return d
}

// Env picks the device plugins' variables out of an environment.
func Env(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, p := range hostdev.Prefixes {
			if strings.HasPrefix(k, p+"_") {
				out[k] = val
			}
		}
	}
	return out
}

// networkInfo is the network-info file's JSON (KubeVirt's
// downwardapi.NetworkInfo, with Multus's device info).
type networkInfo struct {
	Interfaces []struct {
		Network    string `json:"network"`
		DeviceInfo *struct {
			PCI *struct {
				PCIAddress string `json:"pci-address"`
			} `json:"pci"`
		} `json:"deviceInfo"`
	} `json:"interfaces"`
}

// networkPCI reads the PCI address of each network from the network-info
// file, waiting a little for an empty one to be filled.
func (r Reader) networkPCI(ctx context.Context) (map[string]string, string) {
	wait := r.NetworkInfoWait
	if wait == 0 {
		wait = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var b []byte
	for {
		var err error
		b, err = os.ReadFile(r.NetworkInfo)
		if err != nil {
			return nil, err.Error()
		}
		if len(bytes.TrimSpace(b)) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Sprintf("%s is still empty after %v (the kubelet writes Multus's network status into it)", r.NetworkInfo, wait)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var ni networkInfo
	if err := json.Unmarshal(b, &ni); err != nil {
		return nil, fmt.Sprintf("%s: %v", r.NetworkInfo, err)
	}
	out := map[string]string{}
	for _, i := range ni.Interfaces {
		if i.DeviceInfo != nil && i.DeviceInfo.PCI != nil && i.DeviceInfo.PCI.PCIAddress != "" {
			out[i.Network] = i.DeviceInfo.PCI.PCIAddress
		}
	}
	if len(out) == 0 {
		return nil, fmt.Sprintf("%s names no network's PCI address", r.NetworkInfo)
	}
	return out, ""
}

// The attributes a DRA driver gives a device's address by, and the one
// version of the metadata files KubeVirt v1.9.0 reads.
const (
	attrPCIBusID   = "resource.kubernetes.io/pciBusID"
	attrMDevUUID   = "mdevUUID"
	metadataAPIV1a = "metadata.resource.k8s.io/v1alpha1"
)

// deviceMetadata is one object of a metadata file (KEP-5304's
// DeviceMetadata, the part read here).
type deviceMetadata struct {
	APIVersion string `json:"apiVersion"`
	Requests   []struct {
		Name    string `json:"name"`
		Devices []struct {
			Attributes map[string]struct {
				String *string `json:"string"`
			} `json:"attributes"`
		} `json:"devices"`
	} `json:"requests"`
}

// draDevice reads the device of one claim request: the claim of the
// VMI's spec.resourceClaims is a ResourceClaim of its own
// (<dir>/resourceclaims/<claim name>/<request>/) or made from a template
// (<dir>/resourceclaimtemplates/<the VMI's claim name>/<request>/), in
// which one driver wrote <driver>-metadata.json.
func (r Reader) draDevice(v *v1.VirtualMachineInstance, req facts.DRARequest) facts.DRADevice {
	fail := func(format string, a ...any) facts.DRADevice { return facts.DRADevice{Err: fmt.Sprintf(format, a...)} }
	var dir string
	for _, rc := range v.Spec.ResourceClaims {
		if rc.Name != req.Claim {
			continue
		}
		if rc.ResourceClaimName != nil && *rc.ResourceClaimName != "" {
			dir = filepath.Join(r.DRADir, "resourceclaims", *rc.ResourceClaimName, req.Request)
		} else {
			dir = filepath.Join(r.DRADir, "resourceclaimtemplates", rc.Name, req.Request)
		}
	}
	if dir == "" {
		return fail("spec.resourceClaims has no claim named %q", req.Claim)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*-metadata.json"))
	switch {
	case err != nil:
		return fail("%s: %v", dir, err)
	case len(files) == 0:
		return fail("no *-metadata.json in %s", dir)
	case len(files) > 1:
		return fail("%d metadata files in %s: one driver per request is supported", len(files), dir)
	}
	md, err := readMetadata(files[0])
	if err != nil {
		return fail("%v", err)
	}
	for _, rq := range md.Requests {
		if rq.Name != req.Request {
			continue
		}
		if len(rq.Devices) != 1 {
			return fail("%s: request %q has %d devices: exactly one per request is supported", files[0], req.Request, len(rq.Devices))
		}
		attr := func(name string) string {
			if a, ok := rq.Devices[0].Attributes[name]; ok && a.String != nil {
				return *a.String
			}
			return ""
		}
		return facts.DRADevice{PCIBusID: attr(attrPCIBusID), MDevUUID: attr(attrMDevUUID)}
	}
	return fail("%s has no request %q", files[0], req.Request)
}

// readMetadata reads a metadata file: a stream of the same metadata in
// several versions, newest first; the first of a known version counts.
func readMetadata(path string) (*deviceMetadata, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var unknown []string
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var md deviceMetadata
		if err := json.Unmarshal(raw, &md); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch md.APIVersion {
		case metadataAPIV1a:
			return &md, nil
		case "":
			return nil, fmt.Errorf("%s: an object without apiVersion", path)
		}
		unknown = append(unknown, md.APIVersion)
	}
	if len(unknown) == 0 {
		return nil, fmt.Errorf("%s: no metadata in it", path)
	}
	return nil, fmt.Errorf("%s: no metadata of version %s (only %s)", path, metadataAPIV1a, strings.Join(unknown, ", "))
}
