package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Console adds the serial port on a unix socket (with its log file) and a pty
// console on it, unless autoattachSerialConsole is false.
type Console struct{ Ctx *facts.Context }

func (c Console) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	d := vmi.Spec.Domain.Devices
	if !notFalse(d.AutoattachSerialConsole) {
		return nil
	}
	if vmi.UID == "" {
		return fmt.Errorf("metadata.uid: needed for the serial console socket path, but empty")
	}
	uid := string(vmi.UID)
	serial := libvirtxml.DomainSerial{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{
			Mode: "bind", Path: c.Ctx.Layout.SerialSocket(uid),
		}},
		Target: &libvirtxml.DomainSerialTarget{Port: uintPtr(0)},
	}
	logOn := !c.Ctx.SerialConsoleLogDisabled
	if d.LogSerialConsole != nil {
		logOn = *d.LogSerialConsole
	}
	if logOn {
		serial.Log = &libvirtxml.DomainChardevLog{File: c.Ctx.Layout.SerialLog(uid), Append: "on"}
	}
	devs := devices(dom)
	devs.Serials = append(devs.Serials, serial)
	devs.Consoles = append(devs.Consoles, libvirtxml.DomainConsole{
		Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
		Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: uintPtr(0)},
	})
	return nil
}
