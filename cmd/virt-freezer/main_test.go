package main

// The launcher side here is the real command server with a fake Manager
// (cmdservertest).

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

func TestFreezer(t *testing.T) {
	running := &cmdservertest.Fake{}
	sock := cmdservertest.Start(t, running)
	paused := domainjson.Gone("vm", "ns", domainjson.Metadata{UID: "U"}, time.Now())
	paused.DeletionTimestamp = nil
	paused.Status.Status = domainjson.StatusPaused
	pausedSock := cmdservertest.Start(t, &cmdservertest.Fake{Dom: paused})
	failSock := cmdservertest.Start(t, &cmdservertest.Fake{Err: errors.New("freeze: no agent connected")})
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"freeze", []string{"--socket", sock, "--freeze", "--name", "vm", "--namespace", "ns"}, 0, ""},
		{"unfreeze", []string{"--socket", sock, "--unfreeze", "--name", "vm", "--namespace", "ns"}, 0, ""},
		{"freeze fails", []string{"--socket", failSock, "--freeze", "--name", "vm", "--namespace", "ns"}, 1, "no agent connected"},
		{"paused", []string{"--socket", pausedSock, "--freeze", "--name", "vm", "--namespace", "ns"}, 0, "paused"},
		{"neither", []string{"--socket", sock, "--name", "vm", "--namespace", "ns"}, 1, "exactly one of"},
		{"both", []string{"--socket", sock, "--freeze", "--unfreeze", "--name", "vm", "--namespace", "ns"}, 1, "exactly one of"},
		{"no name", []string{"--socket", sock, "--freeze", "--namespace", "ns"}, 1, "--name and --namespace"},
	}
	for _, c := range cases {
		var errOut bytes.Buffer
		code := run(c.args, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.msg) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d with %q", c.name, code, errOut.String(), c.code, c.msg)
		}
	}
	// The paused VMI is not frozen; the others reach the manager in order.
	if calls := strings.Join(running.Calls(), ","); calls != "Freeze vm,Unfreeze vm" {
		t.Errorf("the manager got %q, want Freeze vm,Unfreeze vm", calls)
	}
}
