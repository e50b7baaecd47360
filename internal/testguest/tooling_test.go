package testguest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestToolingNames: no tooling program may share a busybox applet's name
// (its file would be written through the applet's link, over busybox), and
// the check catches one that does.
func TestToolingNames(t *testing.T) {
	out, err := exec.Command(DefaultBusybox, "--list").Output()
	if err != nil {
		t.Skipf("%s --list: %v", DefaultBusybox, err)
	}
	applets := strings.Fields(string(out))
	if err := checkToolingNames(ToolingPrograms, applets); err != nil {
		t.Error(err)
	}
	bad := map[string]string{"/bin/ls": "/usr/bin/ls"}
	if err := checkToolingNames(bad, applets); err == nil || !strings.Contains(err.Error(), "ls is a busybox applet") {
		t.Errorf("an applet's name: %v", err)
	}
	if err := checkToolingNames(nil, append(applets, "systemctl")); err == nil {
		t.Error("a busybox with a systemctl applet was not refused")
	}
}
