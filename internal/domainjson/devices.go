package domainjson

import (
	"encoding/xml"
	"strconv"

	"libvirt.org/go/libvirtxml"
)

func convertDevices(x *libvirtxml.DomainDeviceList) Devices {
	d := Devices{Emulator: x.Emulator}
	for i := range x.Interfaces {
		d.Interfaces = append(d.Interfaces, convertInterface(&x.Interfaces[i]))
	}
	for i := range x.Channels {
		d.Channels = append(d.Channels, convertChannel(&x.Channels[i]))
	}
	for i := range x.Hostdevs {
		if h, ok := convertHostdev(&x.Hostdevs[i]); ok {
			d.HostDevices = append(d.HostDevices, h)
		}
	}
	for _, c := range x.Controllers {
		cc := Controller{Type: c.Type, Model: c.Model, Alias: optAlias(c.Alias), Address: convertAddress(c.Address)}
		if c.Index != nil {
			cc.Index = strconv.FormatUint(uint64(*c.Index), 10)
		}
		d.Controllers = append(d.Controllers, cc)
	}
	for _, v := range x.Videos {
		d.Video = append(d.Video, Video{Model: VideoModel{Type: v.Model.Type, Heads: optUint(v.Model.Heads),
			Ram: optUint(v.Model.Ram), VRam: optUint(v.Model.VRam), VGAMem: optUint(v.Model.VGAMem)}})
	}
	for _, g := range x.Graphics {
		if g.VNC != nil {
			gr := Graphics{Type: "vnc", AutoPort: g.VNC.AutoPort, PasswdValidTo: g.VNC.PasswdValidTo, Port: int32(g.VNC.Port)}
			for _, l := range g.VNC.Listeners {
				if l.Socket != nil {
					gr.Listen = &GraphicsListen{Type: "socket", Socket: l.Socket.Socket}
				} else if l.Address != nil {
					gr.Listen = &GraphicsListen{Type: "address", Address: l.Address.Address}
				}
			}
			d.Graphics = append(d.Graphics, gr)
		}
	}
	if b := x.MemBalloon; b != nil {
		mb := &MemBalloon{Model: b.Model, Address: convertAddress(b.Address), FreePageReporting: b.FreePageReporting}
		if b.Stats != nil {
			mb.Stats = &Stats{Period: b.Stats.Period}
		}
		d.Ballooning = mb
	}
	for i := range x.Disks {
		d.Disks = append(d.Disks, convertDisk(&x.Disks[i]))
	}
	for _, in := range x.Inputs {
		d.Inputs = append(d.Inputs, Input{Type: in.Type, Bus: in.Bus, Model: in.Model,
			Alias: optAlias(in.Alias), Address: convertAddress(in.Address)})
	}
	for _, s := range x.Serials {
		sr := Serial{Alias: optAlias(s.Alias)}
		sr.Type, sr.Source = chardevSource(s.Source)
		if s.Target != nil {
			sr.Target = &SerialTarget{Port: s.Target.Port}
		}
		if s.Log != nil {
			sr.Log = &SerialLog{File: s.Log.File, Append: s.Log.Append}
		}
		d.Serials = append(d.Serials, sr)
	}
	for _, c := range x.Consoles {
		cr := Console{Alias: optAlias(c.Alias)}
		cr.Type, cr.Source = chardevSource(c.Source)
		if c.Target != nil {
			cr.Target = &ConsoleTarget{Port: c.Target.Port}
			if c.Target.Type != "" {
				t := c.Target.Type
				cr.Target.Type = &t
			}
		}
		d.Consoles = append(d.Consoles, cr)
	}
	for _, w := range x.Watchdogs {
		d.Watchdogs = append(d.Watchdogs, Watchdog{Model: w.Model, Action: w.Action,
			Alias: optAlias(w.Alias), Address: convertAddress(w.Address)})
	}
	if len(x.RNGs) > 0 {
		r := x.RNGs[0]
		rng := &Rng{Model: r.Model, Address: convertAddress(r.Address)}
		if b := r.Backend; b != nil {
			switch {
			case b.Random != nil:
				rng.Backend = &RngBackend{Model: "random", Source: b.Random.Device}
			case b.BuiltIn != nil:
				rng.Backend = &RngBackend{Model: "builtin"}
			}
		}
		d.Rng = rng
	}
	return d
}

func optUint(v uint) *uint {
	if v == 0 {
		return nil
	}
	return &v
}

// chardevSource gives the chardev type and, for unix/file/pty sources, the
// source in KubeVirt's shape.
func chardevSource(s *libvirtxml.DomainChardevSource) (string, *SerialSource) {
	switch {
	case s == nil:
		return "", nil
	case s.UNIX != nil:
		return "unix", &SerialSource{Mode: s.UNIX.Mode, Path: s.UNIX.Path}
	case s.Pty != nil:
		return "pty", nil
	case s.File != nil:
		return "file", &SerialSource{Path: s.File.Path}
	case s.Null != nil:
		return "null", nil
	}
	return "", nil
}

func convertInterface(x *libvirtxml.DomainInterface) Interface {
	i := Interface{
		XMLName:             xml.Name{Local: "interface"},
		Address:             convertAddress(x.Address),
		TrustGuestRxFilters: x.TrustGuestRXFilters,
		// Mandatory objects: virt-handler dereferences both.
		Alias: alias(x.Alias),
		MAC:   &MAC{},
	}
	if x.MAC != nil {
		i.MAC.MAC = x.MAC.Address
	}
	if s := x.Source; s != nil {
		switch {
		case s.Ethernet != nil:
			i.Type = "ethernet"
		case s.Bridge != nil:
			i.Type = "bridge"
			i.Source.Bridge = s.Bridge.Bridge
		case s.Network != nil:
			i.Type = "network"
			i.Source.Network = s.Network.Network
			i.Source.Bridge = s.Network.Bridge
		case s.Direct != nil:
			i.Type = "direct"
			i.Source.Device = s.Direct.Dev
			i.Source.Mode = s.Direct.Mode
		case s.User != nil:
			i.Type = "user"
		case s.VHostUser != nil:
			i.Type = "vhostuser"
		case s.Hostdev != nil:
			i.Type = "hostdev"
			if s.Hostdev.PCI != nil && s.Hostdev.PCI.Address != nil {
				i.Source.Address = pciAddress(s.Hostdev.PCI.Address)
			}
		case s.Null != nil:
			i.Type = "null"
		}
	}
	if t := x.Target; t != nil {
		i.Target = &InterfaceTarget{Device: t.Dev, Managed: t.Managed}
	}
	if x.Model != nil {
		i.Model = &Model{Type: x.Model.Type}
	}
	if x.MTU != nil {
		i.MTU = &MTU{Size: strconv.FormatUint(uint64(x.MTU.Size), 10)}
	}
	if x.Boot != nil {
		i.BootOrder = &BootOrder{Order: x.Boot.Order}
	}
	if x.Link != nil {
		i.LinkState = &LinkState{State: x.Link.State}
	}
	if x.FilterRef != nil {
		i.FilterRef = &FilterRef{Filter: x.FilterRef.Filter}
	}
	if dr := x.Driver; dr != nil {
		i.Driver = &InterfaceDriver{Name: dr.Name, Queues: optUint(dr.Queues), IOMMU: dr.IOMMU}
	}
	if x.ROM != nil {
		i.Rom = &Rom{Enabled: x.ROM.Enabled}
	}
	if x.ACPI != nil {
		i.ACPI = &ACPI{Index: x.ACPI.Index}
	}
	if b := x.Backend; b != nil {
		i.Backend = &InterfaceBackend{Type: b.Type, LogFile: b.LogFile}
	}
	return i
}

func convertChannel(x *libvirtxml.DomainChannel) Channel {
	c := Channel{}
	var src *SerialSource
	c.Type, src = chardevSource(x.Source)
	if src != nil {
		c.Source = &ChannelSource{Mode: src.Mode, Path: src.Path}
	}
	if t := x.Target; t != nil {
		switch {
		case t.VirtIO != nil:
			c.Target = &ChannelTarget{Type: "virtio", Name: t.VirtIO.Name, State: t.VirtIO.State}
		case t.GuestFWD != nil:
			c.Target = &ChannelTarget{Type: "guestfwd", Address: t.GuestFWD.Address}
			if p, err := strconv.ParseUint(t.GuestFWD.Port, 10, 0); err == nil {
				c.Target.Port = uint(p)
			}
		}
	}
	return c
}

func convertHostdev(x *libvirtxml.DomainHostdev) (HostDevice, bool) {
	h := HostDevice{
		XMLName: xml.Name{Local: "hostdev"},
		Managed: x.Managed,
		Mode:    "subsystem",
		Address: convertAddress(x.Address),
		Alias:   optAlias(x.Alias),
	}
	if x.Boot != nil {
		h.BootOrder = &BootOrder{Order: x.Boot.Order}
	}
	if x.ACPI != nil {
		h.ACPI = &ACPI{Index: x.ACPI.Index}
	}
	switch {
	case x.SubsysPCI != nil:
		h.Type = "pci"
		h.Display = x.SubsysPCI.Display
		h.RamFB = x.SubsysPCI.RamFB
		if s := x.SubsysPCI.Source; s != nil && s.Address != nil {
			h.Source.Address = pciAddress(s.Address)
		}
	case x.SubsysMDev != nil:
		h.Type = "mdev"
		h.Model = x.SubsysMDev.Model
		h.Display = x.SubsysMDev.Display
		h.RamFB = x.SubsysMDev.RamFB
		if s := x.SubsysMDev.Source; s != nil && s.Address != nil {
			h.Source.Address = &Address{UUID: s.Address.UUID}
		}
	case x.SubsysUSB != nil:
		h.Type = "usb"
		if s := x.SubsysUSB.Source; s != nil && s.Address != nil {
			h.Source.Address = &Address{Type: "usb", Bus: dec(s.Address.Bus), Device: dec(s.Address.Device)}
		}
	default:
		return HostDevice{}, false
	}
	return h, true
}

func convertDisk(x *libvirtxml.DomainDisk) Disk {
	d := Disk{
		Device:   x.Device,
		Snapshot: x.Snapshot,
		Serial:   x.Serial,
		Model:    x.Model,
		Address:  convertAddress(x.Address),
		// Mandatory on every disk with a source; harmless on the others.
		Alias: alias(x.Alias),
	}
	if s := x.Source; s != nil {
		d.Source.StartupPolicy = s.StartupPolicy
		switch {
		case s.File != nil:
			d.Type = "file"
			d.Source.File = s.File.File
		case s.Block != nil:
			d.Type = "block"
			d.Source.Dev = s.Block.Dev
		case s.Network != nil:
			d.Type = "network"
			d.Source.Protocol = s.Network.Protocol
			d.Source.Name = s.Network.Name
			if len(s.Network.Hosts) > 0 {
				d.Source.Host = &DiskSourceHost{Name: s.Network.Hosts[0].Name, Port: s.Network.Hosts[0].Port}
			}
		case s.Dir != nil:
			d.Type = "dir"
		case s.Volume != nil:
			d.Type = "volume"
		}
	}
	if d.Type == "" {
		// An empty CD-ROM tray: libvirt reports type file without a source.
		d.Type = "file"
	}
	if t := x.Target; t != nil {
		d.Target = DiskTarget{Bus: t.Bus, Device: t.Dev, Tray: t.Tray}
	}
	if dr := x.Driver; dr != nil {
		d.Driver = &DiskDriver{Cache: dr.Cache, ErrorPolicy: dr.ErrorPolicy, IO: dr.IO, Name: dr.Name,
			Type: dr.Type, IOThread: dr.IOThread, Queues: dr.Queues, Discard: dr.Discard, IOMMU: dr.IOMMU}
	}
	if x.ReadOnly != nil {
		d.ReadOnly = &FeatureEnabled{}
	}
	if x.Shareable != nil {
		d.Shareable = &FeatureEnabled{}
	}
	if x.Boot != nil {
		d.BootOrder = &BootOrder{Order: x.Boot.Order}
	}
	if b := x.BlockIO; b != nil {
		d.BlockIO = &BlockIO{LogicalBlockSize: b.LogicalBlockSize, PhysicalBlockSize: b.PhysicalBlockSize,
			DiscardGranularity: b.DiscardGranularity}
	}
	return d
}
