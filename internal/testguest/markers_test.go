package testguest

import (
	"reflect"
	"testing"
)

// TestFindMarker: only complete lines count (the console is read while the
// guest writes it), a marker must not match a longer one, and a carriage
// return ends the text.
func TestFindMarker(t *testing.T) {
	for _, c := range []struct {
		out, marker, want string
		ok                bool
	}{
		{"VL-DHCP 10.0.2.2/24 router 10.0.2.1\n", MarkerDHCP, "10.0.2.2/24 router 10.0.2.1", true},
		{"VL-DHCP 10.0.2.2/24 router 10.", MarkerDHCP, "", false},
		{"boot\nVL-DHCP 10.0.2.2/24 rou", MarkerDHCP, "", false},
		{"VL-DISK-WRITTEN /dev/vda\nVL-DISK vda size 1\r\n", "VL-DISK", "vda size 1", true},
		{"VL-DISK-WRITTEN /dev/vda\n", "VL-DISK", "", false},
		{"VL-READY\n", "VL-READY", "", true},
		{"", "VL-READY", "", false},
	} {
		got, ok := FindMarker(c.out, c.marker)
		if got != c.want || ok != c.ok {
			t.Errorf("FindMarker(%q, %q) = %q, %v; want %q, %v", c.out, c.marker, got, ok, c.want, c.ok)
		}
	}
}

func TestCountMarker(t *testing.T) {
	out := "VL-READY uptime 3.1\nVL-READY-NOT x\nboot again\nVL-READY uptime 2.9\nVL-READY upt"
	if n := CountMarker(out, MarkerReady); n != 2 {
		t.Errorf("CountMarker = %d, want 2 (the half line and VL-READY-NOT do not count)", n)
	}
	if n := CountMarker("", MarkerReady); n != 0 {
		t.Errorf("CountMarker of nothing = %d", n)
	}
}

func TestCounts(t *testing.T) {
	console := "VL-COUNT-0\nVL-COUNT-1\n[   3.2] random: crng init VL-COUNT-2\nVL-COUNT-\nVL-COUNT-13"
	if got, want := Counts(console), []int{0, 1, 2, 13}; !reflect.DeepEqual(got, want) {
		t.Errorf("Counts: %v, want %v", got, want)
	}
	if got := Counts("no counter here"); len(got) != 0 {
		t.Errorf("Counts without counts: %v", got)
	}
}
