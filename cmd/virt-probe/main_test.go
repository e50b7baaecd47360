package main

// The launcher side here is the real command server with a fake Manager
// (cmdservertest), with a guest agent or without one.

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

func TestProbe(t *testing.T) {
	sock := cmdservertest.Start(t, &cmdservertest.Fake{})
	healthy := cmdservertest.Start(t, &cmdservertest.Fake{FakeAgent: cmdservertest.FakeAgent{Agent: true, ExecOut: "ok"}})
	failing := cmdservertest.Start(t, &cmdservertest.Fake{FakeAgent: cmdservertest.FakeAgent{Agent: true, ExecOut: "bad", ExecCode: 3}})
	exec := []string{"--domainName", "ns_vm", "--timeoutSeconds", "2", "--command", "cat", "--", "/tmp/healthy"}
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"exec without agent", append([]string{"--socket", sock}, exec...), 1, "no guest agent in the fake manager"},
		{"ping without agent", []string{"--socket", sock, "--domainName", "ns_vm", "--guestAgentPing"}, 1, "no guest agent in the fake manager"},
		{"exec exits 0", append([]string{"--socket", healthy}, exec...), 0, ""},
		{"exec exits 3", append([]string{"--socket", failing}, exec...), 3, ""},
		{"ping", []string{"--socket", healthy, "--domainName", "ns_vm", "--guestAgentPing"}, 0, ""},
		{"no launcher", []string{"--socket", filepath.Join(t.TempDir(), "none"), "--guestAgentPing"}, 1, "connect to launcher"},
		{"nothing to do", []string{"--socket", sock}, 2, "--command or --guestAgentPing is required"},
		{"bad timeout", []string{"--socket", sock, "--guestAgentPing", "--timeoutSeconds", "0"}, 2, "must be positive"},
		{"unknown flag", []string{"--bogus"}, 2, "unknown flag"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.msg) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d with %q", c.name, code, errOut.String(), c.code, c.msg)
		}
	}
}
