package guestnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParsePublish(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // Publish.String(), or the error's words
		err  bool
	}{
		{"2222:22", "127.0.0.1:2222 -> guest port 22/tcp", false},
		{"8080:80/tcp", "127.0.0.1:8080 -> guest port 80/tcp", false},
		{"0.0.0.0:8080:80", "0.0.0.0:8080 -> guest port 80/tcp", false},
		{"[::1]:2222:22", "[::1]:2222 -> guest port 22/tcp", false},
		{"2222", "no guest port", true},
		{"2222:22/udp", "only tcp", true},
		{"2222:0", "guest port", true},
		{"2222:70000", "guest port", true},
		{"0:22", "host port 0", true},
		{"1.2.3:5:22", "host address", true},
		{"::1:2222:22", "host address", true},
	} {
		p, err := ParsePublish(c.in)
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.in)):
			t.Errorf("%q: %v, want an error naming it and saying %q", c.in, err, c.want)
		case !c.err && (err != nil || p.String() != c.want):
			t.Errorf("%q: %v, %v, want %s", c.in, p, err, c.want)
		}
	}
	if p, _ := ParsePublish("2222:22"); p.Host.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("default host address %s, want loopback", p.Host.Addr())
	}
}

// TestRecordedPublish: the ports a record lists are the ones the run was
// given (the record's form is written from them).
func TestRecordedPublish(t *testing.T) {
	for _, flag := range []string{"8080:80", "0.0.0.0:2222:22/tcp", "[::1]:8443:443"} {
		pb, err := ParsePublish(flag)
		if err != nil {
			t.Fatal(err)
		}
		recorded := pb.Recorded()
		got, err := ParseRecorded([]string{recorded})
		if err != nil || len(got) != 1 || got[0] != pb {
			t.Errorf("%s recorded as %q: %+v, %v; want %+v", flag, recorded, got, err, pb)
		}
	}
	if _, err := ParseRecorded([]string{"8080=>80"}); err == nil {
		t.Errorf("a malformed record was taken")
	}
}
