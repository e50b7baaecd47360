package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartBudget: the real monitor over a fake launcher that orphans a
// QEMU, a libvirt daemon and an swtpm, as a launcher's tree has them, and
// then dies of SIGKILL, every time. The monitor starts it again as often
// as the budget allows, stopping only the dead launcher's daemon each
// time (QEMU and swtpm stay until the end); then it cleans up as before
// and exits with the launcher's status.
func TestRestartBudget(t *testing.T) {
	named := func(name string) string {
		b, err := os.ReadFile("/bin/sleep")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	qemu, daemon, swtpm := fakeQemu(t, "/bin/sleep"), named("libvirtd"), named("swtpm")
	r := start(t, nil, "FAKE_ORPHAN_CMDS="+qemu+" 300;"+daemon+" 300;"+swtpm+" 300",
		"FAKE_KILL_SELF=9", EnvRestarts+"=2")
	code := r.wait(60 * time.Second)
	log := r.stderr.String()
	if code != 128+9 {
		t.Errorf("exit %d, want 137 (the last launcher's status); log:\n%s", code, log)
	}
	for _, c := range []struct {
		line string
		n    int
	}{
		{`"msg":"restarting virt-launcher`, 2},
		{"restart budget spent", 1},
		// One daemon stopped per restart; the last one with the rest of
		// the tree at the end.
		{"terminating libvirt daemon of the dead launcher", 2},
		// Every QEMU lived until the final clean-up.
		{"terminating QEMU left behind", 3},
	} {
		if n := strings.Count(log, c.line); n != c.n {
			t.Errorf("%d log lines %q, want %d; log:\n%s", n, c.line, c.n, log)
		}
	}
	if strings.Contains(log, `"comm":"swtpm","level":"info","msg":"terminating libvirt daemon`) ||
		strings.Count(log, `"comm":"swtpm"`) != 3 {
		t.Errorf("swtpm stopped other than at the end (want 3 lines, all at the clean-up); log:\n%s", log)
	}
}

// TestRestartsOff: with restarts off, the same death ends the pod at once.
func TestRestartsOff(t *testing.T) {
	qemu := fakeQemu(t, "/bin/sleep")
	r := start(t, nil, "FAKE_ORPHAN_CMDS="+qemu+" 300", "FAKE_KILL_SELF=9", EnvRestarts+"=0")
	code := r.wait(30 * time.Second)
	log := r.stderr.String()
	if code != 128+9 || strings.Contains(log, `"msg":"restarting virt-launcher`) || !strings.Contains(log, "restarts are switched off") {
		t.Errorf("exit %d, want 137 without a restart; log:\n%s", code, log)
	}
}
