package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNeed runs this package's test binary again on a test that needs a
// program that does not exist: the fast tier skips it, the full run fails
// it (a missing dependency must not pass by skipping).
func TestNeed(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		t.Skip("the child's test runs only through TestNeed")
	}
	for _, c := range []struct {
		short    bool
		wantFail bool
		want     string
	}{
		{short: true, want: "-short: needs"},
		{short: false, wantFail: true, want: "no-such-program-vl not installed"},
	} {
		args := []string{"-test.run=^TestChildNeedsMissing$", "-test.v"}
		if c.short {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1")
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.wantFail {
			t.Errorf("short=%v: failed=%v, want %v\n%s", c.short, failed, c.wantFail, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("short=%v: output lacks %q:\n%s", c.short, c.want, out)
		}
	}
}

func TestChildNeedsMissing(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "1" {
		t.Skip("run by TestNeed in a child process")
	}
	Programs(t, "no-such-program-vl")
	t.Error("reached the test's body without its program")
}
