package libvirtd

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"
)

func TestCheckHostUUID(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" for accepted
	}{
		{"6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10", ""},
		// Upper case is the same UUID; libvirt reports it in lower case.
		{"6F1C2E0A-2F57-4D8E-9A41-0B9D7C3E5A10", ""},
		{"00000000-0000-0000-0000-000000000000", "all equal"},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", "all equal"},
		{"6f1c2e0a2f574d8e9a410b9d7c3e5a10", "8-4-4-4-12"},
		{"urn:uuid:6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10", "8-4-4-4-12"},
		{"{6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10}", "8-4-4-4-12"},
		{"not-a-uuid", "8-4-4-4-12"},
		{`6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a1"`, "8-4-4-4-12"},
	}
	for _, tt := range tests {
		err := checkHostUUID(tt.in)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("checkHostUUID(%q) = %v, want nil", tt.in, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("checkHostUUID(%q) = %v, want an error mentioning %q", tt.in, err, tt.want)
		}
	}
	c := Config{Dir: "/p/libvirt", RuntimeDir: "/r", HostUUID: "00000000-0000-0000-0000-000000000000"}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "HostUUID") {
		t.Errorf("validate with an all-zero HostUUID = %v, want an error naming HostUUID", err)
	}
}

func TestDaemonConfHostUUID(t *testing.T) {
	c := Config{Dir: "/p/libvirt", RuntimeDir: "/r", HostUUID: "6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10"}
	if got := c.daemonConf(); !strings.Contains(got, "host_uuid = \"6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10\"\n") {
		t.Errorf("daemon conf lacks host_uuid:\n%s", got)
	}
	if got := (Config{}).daemonConf(); strings.Contains(got, "host_uuid") {
		t.Errorf("daemon conf without HostUUID names one:\n%s", got)
	}
}

// capsHostUUID asks the daemon behind sock for its capabilities'
// host/uuid, the UUID libvirt also puts in its migration cookies.
func capsHostUUID(t *testing.T, d *Daemon, sock string) string {
	t.Helper()
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(2*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI(d.URI())); err != nil {
		t.Fatalf("connect %s: %v", sock, err)
	}
	defer l.Disconnect()
	x, err := l.ConnectGetCapabilities()
	if err != nil {
		t.Fatalf("capabilities from %s: %v", sock, err)
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(x); err != nil {
		t.Fatalf("parse the capabilities from %s: %v", sock, err)
	}
	return caps.Host.UUID
}

// TestHostUUIDs: two daemons side by side report distinct host UUIDs, each
// the one it was given (configured, or picked by Start), so libvirt's
// same-host check lets one migrate to the other. The UUID survives a
// daemon restart. With libvirtd, KubeVirt's virtqemud-sock name reaches the
// same daemon through a relative link, which Stop removes.
func TestHostUUIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const configured = "6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10"
	cfgs := []Config{testConfig(t), testConfig(t)}
	cfgs[0].HostUUID = configured // the second is left to Start
	var ds []*Daemon
	for _, cfg := range cfgs {
		d, err := Start(ctx, cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background())
		ds = append(ds, d)
	}
	if ds[0].HostUUID() != configured {
		t.Errorf("HostUUID() = %s, want the configured %s", ds[0].HostUUID(), configured)
	}
	if err := checkHostUUID(ds[1].HostUUID()); err != nil {
		t.Errorf("the UUID Start picked: %v", err)
	}
	got := []string{capsHostUUID(t, ds[0], ds[0].Socket()), capsHostUUID(t, ds[1], ds[1].Socket())}
	for i, d := range ds {
		if got[i] != d.HostUUID() {
			t.Errorf("daemon %d reports host UUID %s, want %s", i, got[i], d.HostUUID())
		}
	}
	if got[0] == got[1] {
		t.Fatalf("both daemons report host UUID %s: libvirt would refuse a migration between them", got[0])
	}
	t.Logf("%s host UUIDs: %s, %s", ds[0].Kind(), got[0], got[1])

	// By KubeVirt's name.
	d := ds[1]
	if d.Kind() == "libvirtd" {
		if target, err := os.Readlink(d.KubeVirtSocket()); err != nil || target != "libvirt-sock" {
			t.Errorf("%s: link to %q, %v; want the relative libvirt-sock", d.KubeVirtSocket(), target, err)
		}
	}
	if u := capsHostUUID(t, d, d.KubeVirtSocket()); u != d.HostUUID() {
		t.Errorf("through %s: host UUID %s, want %s", d.KubeVirtSocket(), u, d.HostUUID())
	}

	// A restarted daemon reads the same config file: same UUID.
	killDaemon(ctx, t, d)
	l, err := reconnect(d)
	if err != nil {
		t.Fatal(err)
	}
	l.Disconnect()
	if u := capsHostUUID(t, d, d.KubeVirtSocket()); u != d.HostUUID() {
		t.Errorf("after a restart: host UUID %s, want %s", u, d.HostUUID())
	}

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := d.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if d.Kind() == "libvirtd" {
		if _, err := os.Lstat(d.KubeVirtSocket()); !os.IsNotExist(err) {
			t.Errorf("%s left after Stop: %v", d.KubeVirtSocket(), err)
		}
	}
}
