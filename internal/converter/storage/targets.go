package storage

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
)

// targetNames hands out guest device names: "vd" for virtio, "sd" for sata,
// scsi and usb, which share one sequence. Names pinned by the VMI status
// (hotplugged or migrated volumes) are kept and skipped by the sequence.
type targetNames struct {
	fixed map[string]string // disk name -> target
	taken map[string]bool
	next_ map[string]int // prefix -> next index to try
}

func newTargetNames(vmi *v1.VirtualMachineInstance) *targetNames {
	t := &targetNames{fixed: map[string]string{}, taken: map[string]bool{}, next_: map[string]int{}}
	for _, vs := range vmi.Status.VolumeStatus {
		if vs.Target != "" {
			t.fixed[vs.Name] = vs.Target
			t.taken[vs.Target] = true
		}
	}
	return t
}

func prefixOf(bus v1.DiskBus) string {
	if bus == v1.DiskBusVirtio {
		return "vd"
	}
	return "sd"
}

// next returns the target for disk name on bus.
func (t *targetNames) next(name string, bus v1.DiskBus) (string, error) {
	prefix := prefixOf(bus)
	if dev, ok := t.fixed[name]; ok && strings.HasPrefix(dev, prefix) && suffixIndex(dev[len(prefix):]) >= 0 {
		return dev, nil
	}
	for i := t.next_[prefix]; i < 1<<20; i++ {
		dev := prefix + suffix(i)
		if !t.taken[dev] {
			t.taken[dev] = true
			t.next_[prefix] = i + 1
			return dev, nil
		}
	}
	return "", fmt.Errorf("no free %s* target name", prefix)
}

// index is the position of a target name in its sequence (sda = 0).
func (t *targetNames) index(dev string) int { return suffixIndex(dev[2:]) }

// suffix spells i in bijective base 26: 0 a, 25 z, 26 aa, 701 zz, 702 aaa.
func suffix(i int) string {
	var b []byte
	for i++; i > 0; i = (i - 1) / 26 {
		b = append([]byte{byte('a' + (i-1)%26)}, b...)
	}
	return string(b)
}

// suffixIndex is the inverse of suffix; -1 for a malformed suffix.
func suffixIndex(s string) int {
	if s == "" || len(s) > 4 {
		return -1
	}
	n := 0
	for _, c := range s {
		if c < 'a' || c > 'z' {
			return -1
		}
		n = n*26 + int(c-'a') + 1
	}
	return n - 1
}
