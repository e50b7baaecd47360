package reliability

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// envMonitor is the monitor of TestCleanEnvironment: it writes down the
// environment it was started with, and fails.
const envMonitor = `#!/bin/sh
env >'@OUT@/env'
exit 3
`

// TestCleanEnvironment: vlctl run starts the monitor
// (run as the launcher's user, which every QEMU runs as) with an
// allow-listed environment, not root's: a secret and a STANDALONE_VMI in
// the caller's environment do not reach it. Not parallel: it sets the
// test process's environment.
func TestCleanEnvironment(t *testing.T) {
	u := needLinkUser(t)
	out := userDir(t, u)
	t.Setenv("VL_TEST_SECRET", "root-only-token")
	t.Setenv("STANDALONE_VMI", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\n")
	t.Setenv("LD_PRELOAD", "/nonexistent/preload.so")
	l := newLinkRun(t, u, strings.ReplaceAll(envMonitor, "@OUT@", out))
	if _, err := l.run(t); err == nil {
		t.Fatal("vlctl run with a failing monitor succeeded")
	}
	b, err := os.ReadFile(filepath.Join(out, "env"))
	if err != nil {
		t.Fatalf("the monitor wrote no environment: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, _, _ := strings.Cut(line, "=")
		names = append(names, name)
	}
	t.Logf("the monitor's environment: %q", names)
	for _, leaked := range []string{"VL_TEST_SECRET", "STANDALONE_VMI", "LD_PRELOAD", "HOME", "USER", "SUDO_USER"} {
		if slices.Contains(names, leaked) {
			t.Errorf("%s reached the monitor from vlctl's environment", leaked)
		}
	}
	// The shell itself adds PWD (and SHLVL, _): everything else is the
	// allow-list.
	for _, n := range names {
		switch n {
		case "PATH", "VIRT_LAUNCHER_BIN", "PWD", "SHLVL", "_":
		default:
			t.Errorf("%s in the monitor's environment: not on the allow-list", n)
		}
	}
	if !slices.Contains(names, "VIRT_LAUNCHER_BIN") {
		t.Error("the monitor has no VIRT_LAUNCHER_BIN")
	}
	l.nothingLeft(t)
}
