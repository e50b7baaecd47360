package instancetype

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// applyPreference fills in what the VMI leaves unset with the preference's
// values. A few fields the VMI cannot leave "unset" (ACPI, disabled
// hotplug) take the preference's value whenever it has one, as KubeVirt
// does.
func applyPreference(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	preferCPUFeatures(p, spec)
	preferDevices(p, spec)
	preferFeatures(p, spec)
	preferFirmware(p, spec)
	if p.Machine != nil && p.Machine.PreferredMachineType != "" {
		if spec.Domain.Machine == nil {
			spec.Domain.Machine = &v1.Machine{}
		}
		if spec.Domain.Machine.Type == "" {
			spec.Domain.Machine.Type = p.Machine.PreferredMachineType
		}
	}
	preferClock(p, spec)
	if p.PreferredSubdomain != nil && spec.Subdomain == "" {
		spec.Subdomain = *p.PreferredSubdomain
	}
	if p.PreferredTerminationGracePeriodSeconds != nil && spec.TerminationGracePeriodSeconds == nil {
		s := *p.PreferredTerminationGracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &s
	}
	if p.PreferredArchitecture != nil && *p.PreferredArchitecture != "" && spec.Architecture == "" {
		spec.Architecture = *p.PreferredArchitecture
	}
	if p.PreferredLaunchSecurity != nil && spec.Domain.LaunchSecurity == nil {
		spec.Domain.LaunchSecurity = p.PreferredLaunchSecurity.DeepCopy()
	}
}

// preferCPUFeatures adds the preferred CPU features the VMI does not name.
func preferCPUFeatures(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	if p.CPU == nil || len(p.CPU.PreferredCPUFeatures) == 0 {
		return
	}
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &v1.CPU{}
	}
	have := map[string]bool{}
	for _, f := range spec.Domain.CPU.Features {
		have[f.Name] = true
	}
	for _, f := range p.CPU.PreferredCPUFeatures {
		if !have[f.Name] {
			spec.Domain.CPU.Features = append(spec.Domain.CPU.Features, f)
		}
	}
}

func boolCopy(b *bool) *bool { v := *b; return &v }

// preferAutoAttach sets the auto-attach switches the VMI leaves unset.
func preferAutoAttach(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	if p.Devices == nil {
		return
	}
	d, pd := &spec.Domain.Devices, p.Devices
	for _, s := range []struct {
		pref *bool
		vmi  **bool
	}{
		{pd.PreferredAutoattachGraphicsDevice, &d.AutoattachGraphicsDevice},
		{pd.PreferredAutoattachMemBalloon, &d.AutoattachMemBalloon},
		{pd.PreferredAutoattachPodInterface, &d.AutoattachPodInterface},
		{pd.PreferredAutoattachSerialConsole, &d.AutoattachSerialConsole},
		{pd.PreferredAutoattachInputDevice, &d.AutoattachInputDevice},
	} {
		if s.pref != nil && *s.vmi == nil {
			*s.vmi = boolCopy(s.pref)
		}
	}
}

func preferDevices(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	pd := p.Devices
	if pd == nil {
		return
	}
	d := &spec.Domain.Devices
	for _, s := range []struct {
		pref *bool
		vmi  **bool
	}{
		{pd.PreferredUseVirtioTransitional, &d.UseVirtioTransitional},
		{pd.PreferredBlockMultiQueue, &d.BlockMultiQueue},
		{pd.PreferredNetworkInterfaceMultiQueue, &d.NetworkInterfaceMultiQueue},
	} {
		if s.pref != nil && *s.vmi == nil {
			*s.vmi = boolCopy(s.pref)
		}
	}
	// DisableHotplug is a plain bool: the preference's value wins.
	if pd.PreferredDisableHotplug != nil {
		d.DisableHotplug = *pd.PreferredDisableHotplug
	}
	// Only a sound device the VMI has gets the preferred model.
	if pd.PreferredSoundModel != "" && d.Sound != nil && d.Sound.Model == "" {
		d.Sound.Model = pd.PreferredSoundModel
	}
	if pd.PreferredRng != nil && d.Rng == nil {
		d.Rng = pd.PreferredRng.DeepCopy()
	}
	if pd.PreferredTPM != nil && d.TPM == nil {
		d.TPM = pd.PreferredTPM.DeepCopy()
	}
	if pd.PreferredVideoType != nil {
		if d.Video == nil {
			d.Video = &v1.VideoDevice{}
		}
		if d.Video.Type == "" {
			d.Video.Type = *pd.PreferredVideoType
		}
	}
	preferAutoAttach(p, spec)
	preferDisks(pd, d)
	preferInterfaces(pd, spec)
	for i := range d.Inputs {
		in := &d.Inputs[i]
		if pd.PreferredInputBus != "" && in.Bus == "" {
			in.Bus = pd.PreferredInputBus
		}
		if pd.PreferredInputType != "" && in.Type == "" {
			in.Type = pd.PreferredInputType
		}
	}
	preferPanicDevices(pd, d)
}

// preferDisks sets each disk's bus and options the VMI leaves unset; a
// disk with no device kind becomes a disk first.
func preferDisks(pd *v1beta1.DevicePreferences, d *v1.Devices) {
	for i := range d.Disks {
		disk := &d.Disks[i]
		dev := &disk.DiskDevice
		if dev.Disk == nil && dev.CDRom == nil && dev.LUN == nil {
			dev.Disk = &v1.DiskTarget{}
		}
		switch {
		case dev.Disk != nil:
			if pd.PreferredDiskBus != "" && dev.Disk.Bus == "" {
				dev.Disk.Bus = pd.PreferredDiskBus
			}
			if pd.PreferredDiskBlockSize != nil && disk.BlockSize == nil {
				disk.BlockSize = pd.PreferredDiskBlockSize.DeepCopy()
			}
			if pd.PreferredDiskCache != "" && disk.Cache == "" {
				disk.Cache = pd.PreferredDiskCache
			}
			if pd.PreferredDiskIO != "" && disk.IO == "" {
				disk.IO = pd.PreferredDiskIO
			}
			// A dedicated I/O thread only for a virtio disk.
			if pd.PreferredDiskDedicatedIoThread != nil && disk.DedicatedIOThread == nil && dev.Disk.Bus == v1.DiskBusVirtio {
				disk.DedicatedIOThread = boolCopy(pd.PreferredDiskDedicatedIoThread)
			}
		case dev.CDRom != nil:
			if pd.PreferredCdromBus != "" && dev.CDRom.Bus == "" {
				dev.CDRom.Bus = pd.PreferredCdromBus
			}
		case dev.LUN != nil:
			if pd.PreferredLunBus != "" && dev.LUN.Bus == "" {
				dev.LUN.Bus = pd.PreferredLunBus
			}
		}
	}
}

// preferInterfaces sets each interface's model the VMI leaves unset, and
// masquerade on a pod network interface with no binding.
func preferInterfaces(pd *v1beta1.DevicePreferences, spec *v1.VirtualMachineInstanceSpec) {
	onPod := map[string]bool{}
	for _, n := range spec.Networks {
		if _, seen := onPod[n.Name]; !seen {
			onPod[n.Name] = n.Pod != nil
		}
	}
	for i := range spec.Domain.Devices.Interfaces {
		ifc := &spec.Domain.Devices.Interfaces[i]
		if pd.PreferredInterfaceModel != "" && ifc.Model == "" {
			ifc.Model = pd.PreferredInterfaceModel
		}
		unbound := ifc.Binding == nil && reflect.ValueOf(ifc.InterfaceBindingMethod).IsZero()
		if pd.PreferredInterfaceMasquerade != nil && unbound && onPod[ifc.Name] {
			ifc.Masquerade = pd.PreferredInterfaceMasquerade.DeepCopy()
		}
	}
}

// preferPanicDevices adds a panic device of the preferred model when the
// VMI has none, and gives those without a model the preferred one.
func preferPanicDevices(pd *v1beta1.DevicePreferences, d *v1.Devices) {
	if pd.PreferredPanicDeviceModel == nil {
		return
	}
	if len(d.PanicDevices) == 0 {
		d.PanicDevices = []v1.PanicDevice{{Model: pd.PreferredPanicDeviceModel}}
		return
	}
	for i := range d.PanicDevices {
		if d.PanicDevices[i].Model == nil {
			d.PanicDevices[i].Model = pd.PreferredPanicDeviceModel
		}
	}
}

func preferFeatures(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	pf := p.Features
	if pf == nil {
		return
	}
	if spec.Domain.Features == nil {
		spec.Domain.Features = &v1.Features{}
	}
	f := spec.Domain.Features
	// ACPI is a plain struct: the preference's value wins.
	if pf.PreferredAcpi != nil {
		f.ACPI = *pf.PreferredAcpi.DeepCopy()
	}
	if pf.PreferredApic != nil && f.APIC == nil {
		f.APIC = pf.PreferredApic.DeepCopy()
	}
	if pf.PreferredHyperv != nil {
		preferHyperv(pf.PreferredHyperv, f)
	}
	if pf.PreferredKvm != nil && f.KVM == nil {
		f.KVM = pf.PreferredKvm.DeepCopy()
	}
	if pf.PreferredPvspinlock != nil && f.Pvspinlock == nil {
		f.Pvspinlock = pf.PreferredPvspinlock.DeepCopy()
	}
	if pf.PreferredSmm != nil && f.SMM == nil {
		f.SMM = pf.PreferredSmm.DeepCopy()
	}
}

// preferHyperv sets each Hyper-V enlightenment the VMI leaves unset (every
// field of FeatureHyperv is a pointer; a preferred one fills a nil one).
func preferHyperv(pref *v1.FeatureHyperv, f *v1.Features) {
	if f.Hyperv == nil {
		f.Hyperv = &v1.FeatureHyperv{}
	}
	src, dst := reflect.ValueOf(pref.DeepCopy()).Elem(), reflect.ValueOf(f.Hyperv).Elem()
	for i := 0; i < src.NumField(); i++ {
		if s, d := src.Field(i), dst.Field(i); s.Kind() == reflect.Pointer && !s.IsNil() && d.IsNil() {
			d.Set(s)
		}
	}
}

func preferFirmware(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	pf := p.Firmware
	if pf == nil {
		return
	}
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &v1.Firmware{}
	}
	fw := spec.Domain.Firmware
	if fw.Bootloader == nil {
		fw.Bootloader = &v1.Bootloader{}
	}
	bl := fw.Bootloader
	if pf.PreferredUseBios != nil && *pf.PreferredUseBios && bl.BIOS == nil && bl.EFI == nil {
		bl.BIOS = &v1.BIOS{}
	}
	if pf.PreferredUseBiosSerial != nil && bl.BIOS != nil && bl.BIOS.UseSerial == nil {
		bl.BIOS.UseSerial = boolCopy(pf.PreferredUseBiosSerial)
	}
	if pf.PreferredEfi != nil && bl.EFI == nil && bl.BIOS == nil {
		// The preferred EFI replaces the older useEfi/useSecureBoot.
		bl.EFI = pf.PreferredEfi.DeepCopy()
		return
	}
	if pf.DeprecatedPreferredUseEfi != nil && *pf.DeprecatedPreferredUseEfi && bl.EFI == nil && bl.BIOS == nil {
		bl.EFI = &v1.EFI{}
	}
	if pf.DeprecatedPreferredUseSecureBoot != nil && bl.EFI != nil && bl.EFI.SecureBoot == nil {
		bl.EFI.SecureBoot = boolCopy(pf.DeprecatedPreferredUseSecureBoot)
	}
}

// preferClock sets the clock offset only when the VMI has none at all (no
// partial mix), and the timers when it has none.
func preferClock(p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) {
	pc := p.Clock
	if pc == nil {
		return
	}
	if spec.Domain.Clock == nil {
		spec.Domain.Clock = &v1.Clock{}
	}
	c := spec.Domain.Clock
	if pc.PreferredClockOffset != nil && c.ClockOffset.UTC == nil && c.ClockOffset.Timezone == nil {
		c.ClockOffset = *pc.PreferredClockOffset.DeepCopy()
	}
	if pc.PreferredTimer != nil && c.Timer == nil {
		c.Timer = pc.PreferredTimer.DeepCopy()
	}
}

// checkRequirements refuses a VM whose instancetype (or, without one, its
// own CPU and memory) gives less than the preference requires.
func checkRequirements(it *v1beta1.VirtualMachineInstancetypeSpec, p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) error {
	if p == nil || p.Requirements == nil {
		return nil
	}
	r := p.Requirements
	if r.CPU != nil {
		if err := checkCPURequirement(it, p, spec); err != nil {
			return err
		}
	}
	if r.Memory != nil {
		have, where := resource.MustParse("0"), fieldBase+".domain.memory"
		if it != nil {
			have, where = it.Memory.Guest, "spec.instancetype"
		}
		if spec.Domain.Memory != nil && spec.Domain.Memory.Guest != nil {
			have, where = *spec.Domain.Memory.Guest, fieldBase+".domain.memory.guest"
		}
		if have.Cmp(r.Memory.Guest) < 0 {
			return fmt.Errorf("%s: %s of memory, the preference requires at least %s", where, have.String(), r.Memory.Guest.String())
		}
	}
	if r.Architecture != nil && spec.Architecture != *r.Architecture {
		return fmt.Errorf("%s.architecture: %q, the preference requires %q", fieldBase, spec.Architecture, *r.Architecture)
	}
	return nil
}

func checkCPURequirement(it *v1beta1.VirtualMachineInstancetypeSpec, p *v1beta1.VirtualMachinePreferenceSpec, spec *v1.VirtualMachineInstanceSpec) error {
	need := p.Requirements.CPU.Guest
	if it != nil {
		if it.CPU.Guest < need {
			return fmt.Errorf("spec.instancetype: %d vCPUs, the preference requires at least %d", it.CPU.Guest, need)
		}
		return nil
	}
	cpu := spec.Domain.CPU
	if cpu == nil {
		return fmt.Errorf("%s.domain.cpu: not set, the preference requires at least %d vCPUs", fieldBase, need)
	}
	var have uint32
	var what string
	switch preferredTopology(p) {
	case v1beta1.Threads, v1beta1.DeprecatedPreferThreads:
		have, what = cpu.Threads, "threads"
	case v1beta1.Cores, v1beta1.DeprecatedPreferCores:
		have, what = cpu.Cores, "cores"
	case v1beta1.Sockets, v1beta1.DeprecatedPreferSockets:
		have, what = cpu.Sockets, "sockets"
	case v1beta1.Spread, v1beta1.DeprecatedPreferSpread:
		switch _, across := spreadOptions(p); across {
		case v1beta1.SpreadAcrossCoresThreads:
			have, what = cpu.Cores*cpu.Threads, "cores and threads"
		case v1beta1.SpreadAcrossSocketsCoresThreads:
			have, what = cpu.Sockets*cpu.Cores*cpu.Threads, "sockets, cores and threads"
		default:
			have, what = cpu.Sockets*cpu.Cores, "sockets and cores"
		}
	default:
		have, what = cpu.Sockets*cpu.Cores*cpu.Threads, "sockets, cores and threads"
	}
	if have < need {
		return fmt.Errorf("%s.domain.cpu: %d vCPUs as %s, the preference requires at least %d", fieldBase, have, what, need)
	}
	return nil
}
