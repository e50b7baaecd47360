package domainjson

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"strconv"
	"time"

	"github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"libvirt.org/go/libvirtxml"
)

// Build makes the object from the live domain XML, libvirt's state+reason
// and the launcher's metadata store. name/namespace are the VMI's.
func Build(name, namespace string, spec *libvirtxml.Domain, state libvirt.DomainState, reason int32, meta Metadata) *Domain {
	d := newDomain(name, namespace, meta)
	if spec != nil {
		d.Spec = convertSpec(spec)
		addDataStores(d.Spec.Devices.Disks, meta.DataFiles)
	}
	d.Spec.Metadata = kubeVirtMetadata(meta)
	d.Status.Status, d.Status.Reason = StateAndReason(state, reason)
	return d
}

// Gone is the synthetic "domain deleted" object: deletionTimestamp=now,
// NoState/NonExistent. virt-handler treats any object with a deletion
// timestamp as "domain does not exist" but still reads the UID from
// Spec.Metadata.KubeVirt.
func Gone(name, namespace string, meta Metadata, now time.Time) *Domain {
	d := newDomain(name, namespace, meta)
	ts := metav1.NewTime(now)
	d.DeletionTimestamp = &ts
	d.Spec.Name = namespace + "_" + name
	d.Spec.XMLName = xml.Name{Local: "domain"}
	d.Spec.Metadata = kubeVirtMetadata(meta)
	d.Status.Status = StatusNoState
	d.Status.Reason = ReasonNonExistent
	return d
}

func newDomain(name, namespace string, meta Metadata) *Domain {
	return &Domain{
		TypeMeta: metav1.TypeMeta{Kind: Kind, APIVersion: APIVersion},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			UID:       types.UID(meta.UID),
		},
	}
}

func kubeVirtMetadata(meta Metadata) DomainMetadata {
	gp := &GracePeriodMetadata{
		DeletionGracePeriodSeconds: meta.GracePeriodSeconds,
		MarkedForGracefulShutdown:  meta.MarkedForGracefulShutdown,
	}
	if meta.DeletionTimestamp != nil {
		ts := metav1.NewTime(*meta.DeletionTimestamp)
		gp.DeletionTimestamp = &ts
	}
	var ac *AccessCredentialMetadata
	if meta.AccessCredential != nil {
		c := *meta.AccessCredential
		ac = &c
	}
	var mig *MigrationMetadata
	if meta.Migration != nil {
		m := *meta.Migration
		mig = &m
	}
	var dump *MemoryDumpMetadata
	if meta.MemoryDump != nil {
		d := *meta.MemoryDump
		dump = &d
	}
	var backup *BackupMetadata
	if meta.Backup != nil {
		b := *meta.Backup
		backup = &b
	}
	return DomainMetadata{KubeVirt: KubeVirtMetadata{UID: meta.UID, GracePeriod: gp, AccessCredential: ac, Migration: mig,
		MemoryDump: dump, Backup: backup}}
}

// dataStore is KubeVirt's api.DataStore as JSON (its source a DiskSource).
type dataStore struct {
	Type   string
	Format struct{ Type string }
	Source DiskSource
}

// addDataStores gives each disk on a changed-block-tracking overlay its
// Source.DataStore: a file data store in raw format, the volume's image.
func addDataStores(disks []Disk, dataFiles map[string]string) {
	for i := range disks {
		src := &disks[i].Source
		data, ok := dataFiles[src.File]
		if src.File == "" || !ok {
			continue
		}
		ds := dataStore{Type: "file", Source: DiskSource{File: data}}
		ds.Format.Type = "raw"
		b, err := json.Marshal(ds)
		if err != nil {
			continue
		}
		src.DataStore = b
	}
}

func convertSpec(x *libvirtxml.Domain) DomainSpec {
	s := DomainSpec{
		XMLName: xml.Name{Local: "domain"},
		Type:    x.Type,
		Name:    x.Name,
		UUID:    x.UUID,
	}
	if x.QEMUCommandline != nil {
		s.XmlNS = "http://libvirt.org/schemas/domain/qemu/1.0"
	}
	if x.Memory != nil {
		s.Memory = Memory{Value: uint64(x.Memory.Value), Unit: x.Memory.Unit}
	}
	if x.CurrentMemory != nil {
		s.CurrentMemory = &Memory{Value: uint64(x.CurrentMemory.Value), Unit: x.CurrentMemory.Unit}
	}
	if m := x.MaximumMemory; m != nil {
		s.MaxMemory = &MaxMemory{Value: uint64(m.Value), Unit: m.Unit, Slots: uint64(m.Slots)}
	}
	if x.OS != nil {
		s.OS = convertOS(x.OS)
	}
	for _, si := range x.SysInfo {
		if si.SMBIOS != nil {
			s.SysInfo = convertSysInfo(si.SMBIOS)
			break
		}
	}
	if x.Devices != nil {
		s.Devices = convertDevices(x.Devices)
	}
	if c := x.Clock; c != nil {
		s.Clock = &Clock{Offset: c.Offset, Timezone: c.TimeZone, Adjustment: c.Adjustment}
		for _, t := range c.Timer {
			ct := Timer{Name: t.Name, TickPolicy: t.TickPolicy, Present: t.Present, Track: t.Track}
			if t.Frequency != 0 {
				ct.Frequency = strconv.FormatUint(t.Frequency, 10)
			}
			s.Clock.Timer = append(s.Clock.Timer, ct)
		}
	}
	if x.Resource != nil {
		s.Resource = &Resource{Partition: x.Resource.Partition}
	}
	if f := x.Features; f != nil {
		s.Features = convertFeatures(f)
	}
	if c := x.CPU; c != nil {
		s.CPU = convertCPU(c)
	}
	if v := x.VCPU; v != nil {
		s.VCPU = &VCPU{Placement: v.Placement, CPUs: uint32(v.Value)}
	}
	if t := x.CPUTune; t != nil {
		ct := &CPUTune{}
		for _, p := range t.VCPUPin {
			ct.VCPUPin = append(ct.VCPUPin, CPUTuneVCPUPin{VCPU: uint32(p.VCPU), CPUSet: p.CPUSet})
		}
		for _, p := range t.IOThreadPin {
			ct.IOThreadPin = append(ct.IOThreadPin, CPUTuneIOThreadPin{IOThread: uint32(p.IOThread), CPUSet: p.CPUSet})
		}
		if t.EmulatorPin != nil {
			ct.EmulatorPin = &CPUEmulatorPin{CPUSet: t.EmulatorPin.CPUSet}
		}
		s.CPUTune = ct
	}
	if x.IOThreads != 0 {
		s.IOThreads = &IOThreads{IOThreads: x.IOThreads}
	}
	return s
}

func convertOS(o *libvirtxml.DomainOS) OS {
	r := OS{Kernel: o.Kernel, Initrd: o.Initrd, KernelArgs: o.Cmdline}
	if o.Type != nil {
		r.Type = OSType{OS: o.Type.Type, Arch: o.Type.Arch, Machine: o.Type.Machine}
	}
	if o.SMBios != nil {
		r.SMBios = &SMBios{Mode: o.SMBios.Mode}
	}
	for _, b := range o.BootDevices {
		r.BootOrder = append(r.BootOrder, Boot{Dev: b.Dev})
	}
	if m := o.BootMenu; m != nil {
		r.BootMenu = &BootMenu{Enable: m.Enable}
		if t, err := strconv.ParseUint(m.Timeout, 10, 0); err == nil {
			tu := uint(t)
			r.BootMenu.Timeout = &tu
		}
	}
	if o.BIOS != nil {
		r.BIOS = &BIOS{UseSerial: o.BIOS.UseSerial}
	}
	if l := o.Loader; l != nil {
		r.BootLoader = &Loader{ReadOnly: l.Readonly, Secure: l.Secure, Type: l.Type, Path: l.Path}
	}
	if n := o.NVRam; n != nil {
		r.NVRam = &NVRam{Template: n.Template, NVRam: n.NVRam}
	}
	return r
}

func convertSysInfo(si *libvirtxml.DomainSysInfoSMBIOS) *SysInfo {
	r := &SysInfo{Type: "smbios"}
	if si.System != nil {
		r.System = entries(si.System.Entry)
	}
	if si.BIOS != nil {
		r.BIOS = entries(si.BIOS.Entry)
	}
	for _, b := range si.BaseBoard {
		r.BaseBoard = append(r.BaseBoard, entries(b.Entry)...)
	}
	if si.Chassis != nil {
		r.Chassis = entries(si.Chassis.Entry)
	}
	return r
}

func entries(in []libvirtxml.DomainSysInfoEntry) []Entry {
	var out []Entry
	for _, e := range in {
		out = append(out, Entry{Name: e.Name, Value: e.Value})
	}
	return out
}

func convertFeatures(f *libvirtxml.DomainFeatureList) *Features {
	r := &Features{}
	if f.ACPI != nil {
		r.ACPI = &FeatureEnabled{}
	}
	if f.APIC != nil {
		r.APIC = &FeatureEnabled{}
	}
	// KubeVirt's launcher writes <smm/> only when SMM is on.
	if f.SMM != nil && f.SMM.State != "off" {
		r.SMM = &FeatureEnabled{}
	}
	if k := f.KVM; k != nil {
		r.KVM = &FeatureKVM{Hidden: featureState(k.Hidden), HintDedicated: featureState(k.HintDedicated)}
	}
	r.PVSpinlock = featureState(f.PVSpinlock)
	r.PMU = featureState(f.PMU)
	r.VMPort = featureState(f.VMPort)
	return r
}

func featureState(s *libvirtxml.DomainFeatureState) *FeatureState {
	if s == nil {
		return nil
	}
	return &FeatureState{State: s.State}
}

func convertCPU(c *libvirtxml.DomainCPU) CPU {
	r := CPU{Mode: c.Mode}
	if c.Model != nil {
		r.Model = c.Model.Value
	}
	for _, f := range c.Features {
		r.Features = append(r.Features, CPUFeature{Name: f.Name, Policy: f.Policy})
	}
	if t := c.Topology; t != nil {
		r.Topology = &CPUTopology{Sockets: uint32(t.Sockets), Cores: uint32(t.Cores), Threads: uint32(t.Threads)}
	}
	if n := c.Numa; n != nil {
		r.NUMA = &NUMA{}
		for _, cell := range n.Cell {
			nc := NUMACell{CPUs: cell.CPUs, Memory: uint64(cell.Memory), Unit: cell.Unit, MemoryAccess: cell.MemAccess}
			if cell.ID != nil {
				nc.ID = strconv.FormatUint(uint64(*cell.ID), 10)
			}
			r.NUMA.Cells = append(r.NUMA.Cells, nc)
		}
	}
	return r
}

// alias returns the parsed alias, or an empty one: virt-handler dereferences
// the alias of every interface and of every disk with a source.
func alias(a *libvirtxml.DomainAlias) *Alias {
	if a == nil {
		return &Alias{}
	}
	return NewAlias(a.Name)
}

// optAlias returns nil when there is no alias (devices where nil is fine).
func optAlias(a *libvirtxml.DomainAlias) *Alias {
	if a == nil {
		return nil
	}
	return NewAlias(a.Name)
}

func convertAddress(a *libvirtxml.DomainAddress) *Address {
	if a == nil {
		return nil
	}
	switch {
	case a.PCI != nil:
		return pciAddress(a.PCI)
	case a.Drive != nil:
		return &Address{Type: "drive", Controller: dec(a.Drive.Controller), Bus: dec(a.Drive.Bus),
			Target: dec(a.Drive.Target), Unit: dec(a.Drive.Unit)}
	case a.VirtioSerial != nil:
		return &Address{Type: "virtio-serial", Controller: dec(a.VirtioSerial.Controller),
			Bus: dec(a.VirtioSerial.Bus), Device: dec(a.VirtioSerial.Port)}
	case a.USB != nil:
		return &Address{Type: "usb", Bus: dec(a.USB.Bus), Device: dec(a.USB.Device)}
	case a.CCW != nil:
		return &Address{Type: "ccw", CSSID: hex(a.CCW.CSSID, 2), SSID: hex(a.CCW.SSID, 1), DevNo: hex(a.CCW.DevNo, 4)}
	}
	return nil
}

func pciAddress(p *libvirtxml.DomainAddressPCI) *Address {
	return &Address{Type: "pci", Domain: hex(p.Domain, 4), Bus: hex(p.Bus, 2), Slot: hex(p.Slot, 2), Function: hex(p.Function, 1)}
}

func dec(v *uint) string {
	if v == nil {
		return ""
	}
	return strconv.FormatUint(uint64(*v), 10)
}

func hex(v *uint, width int) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf("0x%0*x", width, *v)
}
