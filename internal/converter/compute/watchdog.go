package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Watchdog maps devices.watchdog: i6300esb on amd64, diag288 on s390x.
type Watchdog struct{ Ctx *facts.Context }

func (w Watchdog) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	wd := vmi.Spec.Domain.Devices.Watchdog
	if wd == nil {
		return nil
	}
	var model string
	var action v1.WatchdogAction
	switch a := arch(vmi, w.Ctx); {
	case wd.I6300ESB != nil && a == "amd64":
		model, action = "i6300esb", wd.I6300ESB.Action
	case wd.Diag288 != nil && a == "s390x":
		model, action = "diag288", wd.Diag288.Action
	default:
		return fmt.Errorf("spec.domain.devices.watchdog: no watchdog model supported on %s was given", a)
	}
	switch action {
	case "":
		action = v1.WatchdogActionReset
	case v1.WatchdogActionReset, v1.WatchdogActionPoweroff, v1.WatchdogActionShutdown:
	default:
		return fmt.Errorf("spec.domain.devices.watchdog.action: %q is not one of reset, poweroff, shutdown", action)
	}
	devices(dom).Watchdogs = append(devices(dom).Watchdogs, libvirtxml.DomainWatchdog{
		Model: model, Action: string(action), Alias: alias(wd.Name),
	})
	return nil
}
