package facts

import (
	"fmt"
	"regexp"
	"strconv"

	"libvirt.org/go/libvirtxml"
)

var pciRE = regexp.MustCompile(`^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// PCIAddress parses a PCI address "DDDD:BB:SS.F" (the domain may be left
// out) into libvirt's form.
func PCIAddress(s string) (*libvirtxml.DomainAddressPCI, error) {
	m := pciRE.FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("%q is not a PCI address like 0000:81:00.1", s)
	}
	num := func(h string) *uint {
		if h == "" {
			h = "0"
		}
		v, _ := strconv.ParseUint(h, 16, 32)
		u := uint(v)
		return &u
	}
	a := &libvirtxml.DomainAddressPCI{Domain: num(m[1]), Bus: num(m[2]), Slot: num(m[3]), Function: num(m[4])}
	if *a.Slot > 0x1f {
		return nil, fmt.Errorf("%q: slot %#x is above 0x1f", s, *a.Slot)
	}
	return a, nil
}
