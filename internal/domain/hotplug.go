package domain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// The calls virt-handler makes on every change of a running VMI that might
// need a hotplug. KubeVirt's launcher does the hotplug; virtlauncher
// implements none, so each answers success exactly when the domain already
// is what the VMI asks for, and otherwise fails naming what it cannot do.

// SyncVCPUs is SyncVirtualMachineCPUs. KubeVirt's launcher
// (manager.go UpdateVCPUs) sets the live and config vCPU count to
// sockets x cores x threads of the VMI, and re-pins dedicated CPUs; here
// the count must already be that.
func (m *Manager) SyncVCPUs(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, err := m.hotplugDomain(ctx, v, "update vCPUs")
	if err != nil {
		return err
	}
	var live int32
	err = withContext(ctx, "live vCPUs of domain "+d.Name, func() error {
		var err error
		live, err = l.DomainGetVcpusFlags(d, uint32(libvirt.DomainAffectLive))
		return err
	})
	if err != nil {
		return fmt.Errorf("update vCPUs: %w", err)
	}
	return vcpuChange(facts.VCPUs(v), uint64(max(live, 0)))
}

// vcpuChange decides SyncVirtualMachineCPUs: nothing to do when the domain
// has the vCPUs the VMI wants, else the hotplug virtlauncher cannot do.
func vcpuChange(want, live uint64) error {
	if want == live {
		return nil
	}
	return fmt.Errorf("update vCPUs: the VMI asks for %d vCPUs (sockets x cores x threads) and the domain has %d: vCPU hotplug is not supported by virtlauncher", want, live)
}

// HotplugHostDevices is HotplugHostDevices. KubeVirt's launcher
// (manager.go hotPlugHostDevices, sriov.GetHostDevicesToAttach) attaches
// the SR-IOV interfaces of the VMI whose network Multus reported and that
// the domain lacks (host devices aliased "sriov-<name>"); here there must
// be none.
func (m *Manager) HotplugHostDevices(ctx context.Context, v *v1.VirtualMachineInstance) error {
	if _, _, err := m.hotplugDomain(ctx, v, "hot-plug host devices"); err != nil {
		return err
	}
	m.mu.Lock()
	dom := m.cache
	m.mu.Unlock()
	if missing := hostDevicesToHotplug(v, dom); len(missing) > 0 {
		return fmt.Errorf("hot-plug host devices: SR-IOV interface(s) %s of the VMI are not in the domain: host device hotplug is not supported by virtlauncher", strings.Join(missing, ", "))
	}
	return nil
}

// infoSourceMultusStatus is KubeVirt's vmispec.InfoSourceMultusStatus: an
// interface status with it has a network Multus attached to the pod.
const infoSourceMultusStatus = "multus-status"

// sriovAliasPrefix is KubeVirt's deviceinfo.SRIOVAliasPrefix, the alias of
// an SR-IOV host device after the "ua-" prefix.
const sriovAliasPrefix = "sriov-"

// hostDevicesToHotplug lists the SR-IOV interfaces KubeVirt's launcher
// would attach: in the VMI spec, reported by Multus in the VMI status, and
// without a host device in the domain.
func hostDevicesToHotplug(v *v1.VirtualMachineInstance, dom *domainjson.Domain) []string {
	attached := map[string]bool{}
	if dom != nil {
		for _, h := range dom.Spec.Devices.HostDevices {
			if h.Alias != nil {
				if name, ok := strings.CutPrefix(h.Alias.Name, sriovAliasPrefix); ok {
					attached[name] = true
				}
			}
		}
	}
	var missing []string
	for _, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV == nil || attached[iface.Name] {
			continue
		}
		for _, st := range v.Status.Interfaces {
			if st.Name == iface.Name && slices.Contains(strings.Split(st.InfoSource, ","), infoSourceMultusStatus) {
				missing = append(missing, iface.Name)
				break
			}
		}
	}
	return missing
}

// hotplugDomain checks the VMI is ours and finds its domain, which must
// exist (KubeVirt's launcher fails on a missing domain too).
func (m *Manager) hotplugDomain(ctx context.Context, v *v1.VirtualMachineInstance, what string) (*libvirt.Libvirt, libvirt.Domain, error) {
	if err := m.checkIdentity(v, false); err != nil {
		return nil, libvirt.Domain{}, err
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return nil, libvirt.Domain{}, fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		return nil, libvirt.Domain{}, fmt.Errorf("%s: no domain is defined", what)
	}
	return l, d, nil
}

// maxScreenshot bounds a screenshot: what gRPC lets virt-handler receive
// (4 MiB), less room for the rest of the message.
const maxScreenshot = 4<<20 - 4096

// Screenshot is GetScreenshot: libvirt's virDomainScreenshot of the
// primary display, its data and MIME type passed on unchanged as KubeVirt's
// launcher does (manager.go GetScreenshot): "image/png" here, PPM
// ("image/x-portable-pixmap") from a QEMU that cannot write PNG.
func (m *Manager) Screenshot(ctx context.Context, v *v1.VirtualMachineInstance) (string, []byte, error) {
	if err := m.checkIdentity(v, false); err != nil {
		return "", nil, err
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("screenshot: %w", err)
	}
	if !ok {
		return "", nil, fmt.Errorf("screenshot: no domain is defined")
	}
	var buf limitedBuffer
	var mime string
	// go-libvirt decodes the reply (the MIME type) from the stream's
	// closing packet, which is empty, so a screenshot that came whole ends
	// in an XDR EOF. Seldom that closing packet is read before the data
	// (seen once in a clean-clone run: an XDR EOF and no byte): then the
	// screenshot is taken again, twice at most.
	for attempt := 0; attempt < 3; attempt++ {
		buf = limitedBuffer{limit: maxScreenshot}
		var streamEOF bool
		err = withContext(ctx, "screenshot of domain "+d.Name, func() error {
			m, err := l.DomainScreenshot(d, &buf, 0, 0)
			var lerr libvirt.Error
			if err != nil && !errors.As(err, &lerr) {
				if buf.Len() == 0 {
					streamEOF = true
					return err
				}
				// libvirt chose the format it asked QEMU for; the
				// image's magic names it.
				mime, err = imageMIME(buf.Bytes())
				return err
			}
			if err == nil && len(m) > 0 {
				mime = m[0]
			}
			return err
		})
		if !streamEOF || ctx.Err() != nil {
			break
		}
		m.log.Warn("screenshot came without data, taking it again", "domain", d.Name, "reason", err.Error())
	}
	if err != nil {
		return "", nil, err
	}
	if buf.over {
		return "", nil, fmt.Errorf("screenshot of domain %s: larger than %d bytes", d.Name, maxScreenshot)
	}
	return mime, buf.Bytes(), nil
}

// imageMIME names the formats QEMU's screendump writes for libvirt: PNG
// when QEMU can (libvirt 9.0 with QEMU 7.2 here), else PPM.
func imageMIME(data []byte) (string, error) {
	switch {
	case bytes.HasPrefix(data, []byte("P6")):
		return "image/x-portable-pixmap", nil
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png", nil
	}
	return "", fmt.Errorf("screenshot in an unknown format (starts %q)", data[:min(len(data), 8)])
}

// limitedBuffer keeps up to limit bytes and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p) // taken whole: the rest of the stream is drained, not an error
	if room := b.limit - b.Len(); len(p) > room {
		b.over = true
		p = p[:max(room, 0)]
	}
	b.Buffer.Write(p)
	return n, nil
}
