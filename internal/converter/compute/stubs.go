// Package compute converts everything that is not storage, network or a host
// device: metadata, CPU, memory, firmware, clock and the small devices.
package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
)

// Stubs: each of these is replaced by a file of its own.

type Metadata struct{}
type TPM struct{}
type Channels struct{}
type Clock struct{}
type RNG struct{ Ctx *facts.Context }
type Input struct{}
type Balloon struct{ Ctx *facts.Context }
type Graphics struct{ Ctx *facts.Context }
type Sound struct{}
type Watchdog struct{ Ctx *facts.Context }
type Console struct{ Ctx *facts.Context }
type Panic struct{}
type Features struct{ Ctx *facts.Context }
type SysInfo struct{ Ctx *facts.Context }
type OS struct{ Ctx *facts.Context }
type USBRedir struct{ Ctx *facts.Context }
type Controllers struct{ Ctx *facts.Context }
type CPU struct{ Ctx *facts.Context }
type Memory struct{ Ctx *facts.Context }
type MemoryBacking struct{}
type RebootPolicy struct{}
type Hypervisor struct{ Ctx *facts.Context }

func (Metadata) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (TPM) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error           { return nil }
func (Channels) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (Clock) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error         { return nil }
func (RNG) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error           { return nil }
func (Input) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error         { return nil }
func (Balloon) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error       { return nil }
func (Graphics) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (Sound) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error         { return nil }
func (Watchdog) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (Console) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error       { return nil }
func (Panic) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error         { return nil }
func (Features) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (SysInfo) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error       { return nil }
func (OS) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error            { return nil }
func (USBRedir) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error      { return nil }
func (Controllers) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error   { return nil }
func (CPU) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error           { return nil }
func (Memory) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error        { return nil }
func (MemoryBacking) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error { return nil }
func (RebootPolicy) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error  { return nil }
func (Hypervisor) Configure(*v1.VirtualMachineInstance, *libvirtxml.Domain) error    { return nil }
