package launchertest

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// VMISpec names what varies in the test VMI.
type VMISpec struct {
	Name, Namespace, UID string
	Token                string // the user-data script prints "token <Token>"
	// PodNetwork adds a masquerade interface on the pod network; without
	// it the VMI has no interface (autoattachPodInterface: false).
	PodNetwork bool
	// ExtraUserData lines are appended to the user-data script.
	ExtraUserData []string
	// KernelArgs are appended to the test guest's default command line
	// (without DHCP).
	KernelArgs []string
	// DiskPath is the root volume's containerDisk.path (default: none).
	DiskPath string
	// KernelPath and InitrdPath are the kernelBoot container's paths
	// (default /vmlinuz and /initrd.img).
	KernelPath, InitrdPath string
}

// VMIYAML is the test VMI: the test guest from a containerDisk with
// kernelBoot, an emptyDisk "scratch" and a cloud-init NoCloud volume.
func VMIYAML(s VMISpec) string {
	args := append([]string{testguest.DefaultCmdline, testguest.OptNoDHCP}, s.KernelArgs...)
	ifaces, networks := "      autoattachPodInterface: false\n", ""
	if s.PodNetwork {
		ifaces = "      interfaces:\n      - name: default\n        masquerade: {}\n"
		networks = "  networks:\n  - name: default\n    pod: {}\n"
	}
	if s.KernelPath == "" {
		s.KernelPath = "/vmlinuz"
	}
	if s.InitrdPath == "" {
		s.InitrdPath = "/initrd.img"
	}
	diskPath := ""
	if s.DiskPath != "" {
		diskPath = fmt.Sprintf("\n      path: %q", s.DiskPath)
	}
	var extra strings.Builder
	for _, l := range s.ExtraUserData {
		extra.WriteString("        " + l + "\n")
	}
	return fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: %s
  namespace: %s
  uid: %s
spec:
  terminationGracePeriodSeconds: 30
  domain:
    firmware:
      kernelBoot:
        container:
          image: registry.example/testguest-kernel:v1
          kernelPath: %q
          initrdPath: %q
        kernelArgs: %q
    devices:
%s      disks:
      - name: root
        disk: {bus: virtio}
      - name: scratch
        disk: {bus: virtio}
      - name: cloudinit
        disk: {bus: virtio}
    resources:
      requests:
        memory: 128Mi
%s  volumes:
  - name: root
    containerDisk:
      image: registry.example/testguest-root:v1%s
  - name: scratch
    emptyDisk:
      capacity: 64Mi
  - name: cloudinit
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        echo "token %s"
`, s.Name, s.Namespace, s.UID, s.KernelPath, s.InitrdPath, strings.Join(args, " "), ifaces, networks, diskPath, s.Token) + extra.String()
}

// VMIYAML is the pod's test VMI (its name, namespace, uid, network and
// extra user data) printing token.
func (p *Pod) VMIYAML(token string, kernelArgs ...string) string {
	s := VMISpec{Name: p.Name, Namespace: p.NS, UID: p.UID, Token: token,
		PodNetwork: p.opts.Network, ExtraUserData: p.ExtraUserData, KernelArgs: kernelArgs}
	if iv := p.opts.ImageVolume; iv != nil {
		s.DiskPath, s.KernelPath, s.InitrdPath = iv.DiskPath, iv.KernelPath, iv.InitrdPath
	}
	return VMIYAML(s)
}

// VMI is VMIYAML loaded as virt-api would store it.
func (p *Pod) VMI(token string, kernelArgs ...string) *v1.VirtualMachineInstance {
	p.T.Helper()
	v, err := vmiLoad(p.VMIYAML(token, kernelArgs...))
	if err != nil {
		p.T.Fatal(err)
	}
	return v
}
