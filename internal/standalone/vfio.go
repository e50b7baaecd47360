package standalone

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// Device is one --device NAME=PCI-ADDRESS: a host PCI device, bound to
// vfio-pci, for the VMI's GPU or host device NAME.
type Device struct{ Name, Addr string }

// vfioSys reads the host's PCI devices and IOMMU groups below Root ("/"
// on the host; the tests give a tree of their own).
type vfioSys struct{ Root string }

// group checks that the host can pass addr through with VFIO and returns
// its IOMMU group's device node: an IOMMU (some IOMMU group exists), the
// device present and bound to vfio-pci, the group's node in /dev/vfio.
func (s vfioSys) group(addr string) (string, error) {
	groups, err := os.ReadDir(filepath.Join(s.Root, "sys/kernel/iommu_groups"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read /sys/kernel/iommu_groups: %w", err)
	}
	if len(groups) == 0 {
		return "", errors.New("this host has no IOMMU (/sys/kernel/iommu_groups is empty): VFIO needs one (enable VT-d or AMD-Vi in the firmware, and intel_iommu=on or amd_iommu=on on the kernel command line)")
	}
	dev := filepath.Join(s.Root, "sys/bus/pci/devices", addr)
	if _, err := os.Stat(dev); err != nil {
		return "", fmt.Errorf("no PCI device %s on this host (/sys/bus/pci/devices)", addr)
	}
	driver, err := os.Readlink(filepath.Join(dev, "driver"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("PCI device %s is bound to no driver, not vfio-pci (echo vfio-pci > /sys/bus/pci/devices/%s/driver_override; echo %s > /sys/bus/pci/drivers_probe)", addr, addr, addr)
	case err != nil:
		return "", fmt.Errorf("PCI device %s: %w", addr, err)
	case filepath.Base(driver) != "vfio-pci":
		return "", fmt.Errorf("PCI device %s is bound to %s, not vfio-pci (echo vfio-pci > /sys/bus/pci/devices/%s/driver_override; echo %s > /sys/bus/pci/drivers/%s/unbind; echo %s > /sys/bus/pci/drivers_probe)",
			addr, filepath.Base(driver), addr, addr, filepath.Base(driver), addr)
	}
	grp, err := os.Readlink(filepath.Join(dev, "iommu_group"))
	if err != nil {
		return "", fmt.Errorf("PCI device %s has no IOMMU group: %w", addr, err)
	}
	node := filepath.Join("/dev/vfio", filepath.Base(grp))
	if _, err := os.Stat(filepath.Join(s.Root, node)); err != nil {
		return "", fmt.Errorf("PCI device %s: its IOMMU group's node %s: %w", addr, node, err)
	}
	return node, nil
}

// runDevices checks the --device flags against the VMI and the host, as
// the device plugin would before a pod starts: every GPU and host device
// of the VMI named by exactly the flags given for it, each address a host
// PCI device bound to vfio-pci. It returns the device plugin's variables
// for the launcher's environment and the IOMMU groups' nodes the VM's
// user must open.
func runDevices(v *v1.VirtualMachineInstance, devs []Device, s vfioSys) (env, groups []string, err error) {
	d := v.Spec.Domain.Devices
	named := map[string]bool{}
	for _, dev := range devs {
		named[dev.Name] = true
	}
	need := func(field, kind, name, deviceName string, cr *v1.ClaimRequest) error {
		if deviceName == "" && cr != nil {
			return fmt.Errorf("%s: %s %q is allocated by DRA: vlctl run has no DRA driver; give it a deviceName and pass --device %s=DDDD:BB:SS.F", field, kind, name, name)
		}
		if !named[name] {
			return fmt.Errorf("%s: %s %q needs a host PCI device bound to vfio-pci: --device %s=DDDD:BB:SS.F (vlctl run has no device plugin)", field, kind, name, name)
		}
		return nil
	}
	for i, g := range d.GPUs {
		if err := need(fmt.Sprintf("spec.domain.devices.gpus[%d]", i), "GPU", g.Name, g.DeviceName, g.ClaimRequest); err != nil {
			return nil, nil, err
		}
	}
	for i, h := range d.HostDevices {
		if err := need(fmt.Sprintf("spec.domain.devices.hostDevices[%d]", i), "host device", h.Name, h.DeviceName, h.ClaimRequest); err != nil {
			return nil, nil, err
		}
	}
	var fd facts.Devices
	used := map[string]string{}
	for _, dev := range devs {
		flag := "--device " + dev.Name + "=" + dev.Addr
		if !slices.ContainsFunc(d.GPUs, func(g v1.GPU) bool { return g.Name == dev.Name }) &&
			!slices.ContainsFunc(d.HostDevices, func(h v1.HostDevice) bool { return h.Name == dev.Name }) {
			return nil, nil, fmt.Errorf("%s: the VMI has no GPU or host device named %q", flag, dev.Name)
		}
		if other, dup := used[dev.Addr]; dup {
			return nil, nil, fmt.Errorf("%s: %s is given to %q too", flag, dev.Addr, other)
		}
		used[dev.Addr] = dev.Name
		if err := hostdev.AddPCI(v, &fd, dev.Name, dev.Addr); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		node, err := s.group(dev.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		if !slices.Contains(groups, node) {
			groups = append(groups, node)
		}
	}
	for k, val := range fd.Env {
		env = append(env, k+"="+val)
	}
	sort.Strings(env)
	return env, groups, nil
}

// vfioGrant opens an IOMMU group's node without claiming it (O_PATH: a
// real open is exclusive, and QEMU must be the one to hold it) and gives
// uid read and write access by an ACL entry, taken out by undo.
func vfioGrant(node string, uid uint32) (*userstorage.Grant, error) {
	fd, err := unix.Open(node, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", node, err)
	}
	f := os.NewFile(uintptr(fd), node)
	st, err := f.Stat()
	if err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("%s is not a character device", node)
	}
	g, err := userstorage.GrantAccess(f, uid, 6)
	if err != nil || g == nil {
		f.Close()
		return nil, err
	}
	return g, nil
}
