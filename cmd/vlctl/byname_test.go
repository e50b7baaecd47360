package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

func TestUptime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                     "0s",
		0:                                "0s",
		45 * time.Second:                 "45s",
		3*time.Minute + 12*time.Second:   "3m12s",
		2*time.Hour + 5*time.Minute + 59: "2h05m",
		76*time.Hour + 30*time.Minute:    "3d04h",
	} {
		if got := uptime(d); got != want {
			t.Errorf("uptime(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestWritePS(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		rows []psRow
		want string
	}{
		{name: "none", want: "NAME  NAMESPACE  STATE  UPTIME  RESTARTS  ADDRESSES  CONSOLE\n"},
		{name: "running, paused and stale", rows: []psRow{
			{Name: "web", Namespace: "default", State: "Running", Started: now.Add(-90 * time.Second), Restarts: 2,
				Addresses:      []runrecord.Address{{IP: "192.168.67.2", NetNS: "vlout-ab"}},
				GuestAddresses: []string{"10.0.2.2"}, Console: "/run/vl/ab12/s/virt-serial0"},
			{Name: "database", Namespace: "prod", State: "Paused", Started: now.Add(-2 * time.Hour), Console: "/run/vl/cd34/s/virt-serial0"},
			{Name: "old", Namespace: "default", State: psStale, Console: "/run/vl/ef56/s/virt-serial0"},
		}, want: "" +
			"NAME      NAMESPACE  STATE                       UPTIME  RESTARTS  ADDRESSES                                        CONSOLE\n" +
			"web       default    Running                     1m30s   2         192.168.67.2 (netns vlout-ab), 10.0.2.2 (guest)  /run/vl/ab12/s/virt-serial0\n" +
			"database  prod       Paused                      2h00m   0         -                                                /run/vl/cd34/s/virt-serial0\n" +
			"old       default    stale (vlctl gc cleans up)  -       0         -                                                /run/vl/ef56/s/virt-serial0\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			writePS(&b, c.rows, now)
			if got := b.String(); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestWritePSJSON: vlctl ps -o json is an array of objects with the
// documented field names; empty lists are [], never null, and no
// started time is left out.
func TestWritePSJSON(t *testing.T) {
	started := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	if err := writePSJSON(&b, nil); err != nil || b.String() != "[]\n" {
		t.Errorf("no rows: %q, %v", b.String(), err)
	}
	b.Reset()
	rows := []psRow{
		{Name: "web", Namespace: "default", PID: 42, State: "Running", Started: started, Restarts: 1,
			Addresses: []runrecord.Address{{IP: "192.168.67.2", NetNS: "vlout-ab"}}, Published: []string{"127.0.0.1:2222->22/tcp"},
			GuestAddresses: []string{"10.0.2.2"}, Console: "/run/vl/ab12/console.sock"},
		{Name: "new", Namespace: "default", PID: 43, State: "starting"},
	}
	if err := writePSJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	want := []map[string]any{
		{"name": "web", "namespace": "default", "pid": 42.0, "state": "Running", "started": "2026-12-02T03:00:00Z", "restarts": 1.0,
			"addresses": []any{map[string]any{"ip": "192.168.67.2", "netns": "vlout-ab"}}, "published": []any{"127.0.0.1:2222->22/tcp"},
			"guestAddresses": []any{"10.0.2.2"}, "console": "/run/vl/ab12/console.sock"},
		{"name": "new", "namespace": "default", "pid": 43.0, "state": "starting", "restarts": 0.0,
			"addresses": []any{}, "published": []any{}, "guestAddresses": []any{}, "console": ""},
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("got:\n%s\nwant:\n%s", gb, wb)
	}
}

// TestWithBackground: vlctl ps adds a background run with no run
// recorded as starting while its supervisor runs, and with -a one that
// ended as exited or failed; one with a run recorded is that run's row.
func TestWithBackground(t *testing.T) {
	rows := []psRow{{Name: "web", Namespace: "default", State: "Running"}}
	bgs := []runrecord.Background{
		{BackgroundState: runrecord.BackgroundState{Name: "web", Namespace: "default"}, Running: true},
		{BackgroundState: runrecord.BackgroundState{Name: "again", Namespace: "default", PID: 7}, Running: true},
		{BackgroundState: runrecord.BackgroundState{Name: "done", Namespace: "default"}},
		{BackgroundState: runrecord.BackgroundState{Name: "bad", Namespace: "default", Error: "boom"}},
	}
	state := func(rows []psRow) string {
		var s []string
		for _, r := range rows {
			s = append(s, r.Name+"="+r.State)
		}
		return strings.Join(s, " ")
	}
	if got, want := state(withBackground(slices.Clone(rows), bgs, false)), "again=starting web=Running"; got != want {
		t.Errorf("ps: %s, want %s", got, want)
	}
	if got, want := state(withBackground(slices.Clone(rows), bgs, true)), "again=starting bad=failed done=exited web=Running"; got != want {
		t.Errorf("ps -a: %s, want %s", got, want)
	}
}

// TestVerbArgs: a verb gets NAME or --socket with -f, never both or
// neither; the check comes before anything is dialled or read.
func TestVerbArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"pause"}, "give a VM's NAME, or --socket and -f"},
		{[]string{"pause", "--socket", "/x"}, "give a VM's NAME, or --socket and -f"},
		{[]string{"unpause", "vm", "--socket", "/x"}, "not both"},
		{[]string{"kill", "vm", "-f", "/x.yaml"}, "not both"},
		{[]string{"pause", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"stop"}, "accepts 1 arg"},
		{[]string{"get"}, "give a VM's NAME, or --socket"},
		{[]string{"get", "vm", "--socket", "/x"}, "not both"},
		{[]string{"get", "vm", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"guestinfo"}, "guestinfo: give a VM's NAME, or --socket"},
		{[]string{"guestinfo", "vm", "--socket", "/x"}, "guestinfo: give NAME or --socket, not both"},
	} {
		cmds := append(newCtlCmds(), newByNameCmds()...)
		var cmd = cmds[0]
		for _, k := range cmds {
			if k.Name() == c.args[0] {
				cmd = k
			}
		}
		cmd.SetArgs(c.args[1:])
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("vlctl %s: %v, want an error with %q", strings.Join(c.args, " "), err, c.err)
		}
	}
}
