package runrecord

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// TestPeerOwnedBy: a socket whose listener (this test process) is below
// the recorded run is accepted; one below another process is refused, and
// so is one of a run that is gone.
func TestPeerOwnedBy(t *testing.T) {
	dial := launchertest.Listening(t)
	recordOf := func(pid int) *Record {
		st, err := procfs.ReadStat("/proc", pid)
		if err != nil {
			t.Fatal(err)
		}
		return &Record{Name: "vm", Namespace: "ns", Process: Process{PID: pid, PIDStart: st.StartTime}}
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	gone := recordOf(os.Getppid())
	gone.PIDStart++
	for _, c := range []struct {
		name string
		rec  *Record
		err  string
	}{
		{"listener below the run", recordOf(os.Getppid()), ""},
		{"listener is not below the run", recordOf(other.Process.Pid), "is not a process of its vlctl run"},
		{"listener is the run itself", recordOf(os.Getpid()), "is not a process of its vlctl run"},
		{"run gone", gone, "is gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.rec.PeerOwnedBy(dial())
			if c.err == "" && err != nil {
				t.Errorf("refused: %v", err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("error %v, want one with %q", err, c.err)
			}
		})
	}
}
