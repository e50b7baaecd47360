package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/instancetype"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// convertFlags are the facts a launcher would gather itself, given by hand.
type convertFlags struct {
	emulation   bool
	binding     string
	arch        string
	dir         string
	diskFormats []string
	blockVols   []string
	pciAddrs    []string
	devEnv      []string
	macs        []string
	taps        []string
	cpuSet      string
}

func newConvertCmd() *cobra.Command {
	var f convertFlags
	cmd := &cobra.Command{
		Use:   "convert FILE",
		Short: "Print the libvirt domain XML for a VMI manifest",
		Long: `Print the libvirt domain XML virtlauncher defines for a VirtualMachineInstance
(or a VirtualMachine's template, its instancetype and preference expanded from the
file's other documents or vlctl's common ones), after applying KubeVirt's defaults.

Facts the launcher normally discovers can be given with flags: disk image
formats, block volumes, PCI addresses of host devices and SR-IOV interfaces,
interface MACs and tap names. Paths follow the pod layout unless --dir moves
them under a standalone working directory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := runConvert(args[0], f)
			if err != nil {
				return oneLine(err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.emulation, "emulation", false, "emulate the CPU (domain type qemu, TCG) instead of using KVM")
	fl.StringVar(&f.binding, "binding", vmi.BindingMasquerade, "binding of the auto-attached pod interface: masquerade or bridge (KubeVirt's cluster default)")
	fl.StringVar(&f.arch, "arch", "amd64", "default guest architecture: amd64, arm64 or s390x")
	fl.StringVar(&f.dir, "dir", "", "standalone working directory holding every launcher path (default: KubeVirt's pod paths)")
	fl.StringArrayVar(&f.diskFormats, "disk-format", nil, "VOL=raw|qcow2: image format under a containerDisk volume (repeatable; default raw)")
	fl.StringArrayVar(&f.blockVols, "block", nil, "VOL: the volume is a block device, not a file (repeatable)")
	fl.StringArrayVar(&f.pciAddrs, "pci-address", nil, "NAME=DDDD:BB:SS.F: host PCI address of a GPU, host device or SR-IOV interface (repeatable)")
	fl.StringArrayVar(&f.devEnv, "device-env", nil, "VAR=VALUE: a device plugin's variable, e.g. MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4_1Q=UUID or USB_RESOURCE_KUBEVIRT_IO_STORAGE=1:5 (repeatable)")
	fl.StringArrayVar(&f.macs, "mac", nil, "IFACE=MAC: MAC of the pod-side link of an interface (repeatable)")
	fl.StringArrayVar(&f.taps, "tap", nil, "IFACE=TAP: tap device name of an interface (repeatable)")
	fl.StringVar(&f.cpuSet, "cpuset", "", "host CPUs for dedicated CPU placement, in the order they are handed out, e.g. 2,3,4 or 2-4")
	return cmd
}

// runConvert loads, defaults, validates and converts one manifest, returning
// the XML; nothing is printed unless everything worked.
func runConvert(path string, f convertFlags) (string, error) {
	switch f.binding {
	case vmi.BindingMasquerade, vmi.BindingBridge:
	default:
		return "", fmt.Errorf("--binding: %q is not masquerade or bridge", f.binding)
	}
	c, err := contextFromFlags(f)
	if err != nil {
		return "", err
	}
	l, err := instancetype.Load([]string{path}, "", vmi.Options{DefaultBinding: f.binding, Arch: f.arch})
	if err != nil {
		return "", err
	}
	if err := pciFacts(l.VMI, c, f.pciAddrs); err != nil {
		return "", err
	}
	dom, err := converter.Convert(l.VMI, c)
	if err != nil {
		return "", err
	}
	doc, err := dom.Marshal()
	if err != nil {
		return "", fmt.Errorf("marshal domain: %w", err)
	}
	return doc + "\n", nil
}

func contextFromFlags(f convertFlags) (*facts.Context, error) {
	l := layout.Default()
	if f.dir != "" {
		l = layout.Under(f.dir)
	}
	c := facts.Default(l)
	c.Emulation = f.emulation
	c.Arch = f.arch
	c.Volumes = map[string]facts.Volume{}
	c.Interfaces = map[string]facts.Interface{}
	c.Devices.Env = map[string]string{}
	for _, kv := range f.diskFormats {
		vol, format, err := pair("--disk-format", kv)
		if err != nil {
			return nil, err
		}
		if format != "raw" && format != "qcow2" {
			return nil, fmt.Errorf("--disk-format %s: format %q is not raw or qcow2", kv, format)
		}
		v := c.Volumes[vol]
		v.BackingFormat = format
		c.Volumes[vol] = v
	}
	for _, vol := range f.blockVols {
		if err := layout.CheckName(vol); err != nil {
			return nil, fmt.Errorf("--block: %w", err)
		}
		v := c.Volumes[vol]
		v.Block = true
		c.Volumes[vol] = v
	}
	for _, kv := range f.devEnv {
		name, val, err := pair("--device-env", kv)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(hostdev.Prefixes, func(p string) bool { return strings.HasPrefix(name, p+"_") }) {
			return nil, fmt.Errorf("--device-env %s: %q is not a device plugin's variable (%s_<RESOURCE>)", kv, name, strings.Join(hostdev.Prefixes, "_, "))
		}
		c.Devices.Env[name] = val
	}
	for _, kv := range f.macs {
		name, mac, err := pair("--mac", kv)
		if err != nil {
			return nil, err
		}
		i := c.Interfaces[name]
		i.MAC = mac // checked by the converter, which names the interface
		c.Interfaces[name] = i
	}
	for _, kv := range f.taps {
		name, tap, err := pair("--tap", kv)
		if err != nil {
			return nil, err
		}
		if len(tap) > 15 || strings.ContainsAny(tap, "/ \x00") {
			return nil, fmt.Errorf("--tap %s: %q is not a valid interface name", kv, tap)
		}
		i := c.Interfaces[name]
		i.Tap = tap
		c.Interfaces[name] = i
	}
	if f.cpuSet != "" {
		cpus, err := hostcpu.ParseList(f.cpuSet)
		if err != nil {
			return nil, fmt.Errorf("--cpuset: %w", err)
		}
		c.CPUSet = cpus
	}
	return c, nil
}

// pciFacts gives the VMI's devices the --pci-address flags' addresses, as
// the device plugins or Multus would have; an SR-IOV interface named so is
// reported attached by Multus, as virt-handler reports it.
func pciFacts(v *v1.VirtualMachineInstance, c *facts.Context, kvs []string) error {
	for _, kv := range kvs {
		name, addr, err := pair("--pci-address", kv)
		if err != nil {
			return err
		}
		if err := hostdev.AddPCI(v, &c.Devices, name, addr); err != nil {
			return fmt.Errorf("--pci-address %s: %w", kv, err)
		}
		if _, ok := c.Devices.NetworkPCI[name]; ok && !hostdev.MultusReported(v, name) {
			v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: name, InfoSource: "multus-status"})
		}
	}
	return nil
}

// pair splits KEY=VALUE, both non-empty.
func pair(flag, kv string) (string, string, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" || v == "" {
		return "", "", fmt.Errorf("%s: %q is not NAME=VALUE", flag, kv)
	}
	return k, v, nil
}

// oneLine joins a multi-line error (several field errors) into one line, so
// the command's failure is a single line on stderr.
func oneLine(err error) error {
	if fes := vmi.FieldErrors(err); len(fes) > 1 {
		parts := make([]string, len(fes))
		for i, fe := range fes {
			parts[i] = fe.Error()
		}
		return fmt.Errorf("%s", strings.Join(parts, "; "))
	}
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
	return fmt.Errorf("%s", s)
}
