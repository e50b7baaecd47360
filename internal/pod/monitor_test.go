package pod

import (
	"io"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
)

// TestMonitorCommandParses: the command line and environment Command
// renders read back, through the monitor's own parser and then the
// launcher's, as the pod they describe: the monitor sees the directories,
// uid and verbosity the launcher gets, finds the launcher binary through
// its environment, and passes every launcher flag on unchanged.
func TestMonitorCommandParses(t *testing.T) {
	flags := launcherflags.Defaults()
	flags.SetLayout(layout.Under("/pods/a"))
	flags.Name, flags.Namespace, flags.UID = "vm", "ns", "0f6c2e0a-uid"
	flags.Verbosity = 5
	flags.GracePeriodSeconds = 45
	m := Monitor{Bin: "/bin/virt-launcher-monitor", Launcher: "/opt/vl/virt-launcher", Flags: flags, Extra: []string{"--qemu-timeout=7m"}}
	cfg, got, _ := readBack(t, m.Command())
	for _, c := range []struct{ what, got, want string }{
		{"container disk dir", cfg.ContainerDiskDir, flags.ContainerDiskDir},
		{"share dir", cfg.ShareDir, flags.ShareDir},
		{"private dir", cfg.PrivateDir, flags.PrivateDir},
		{"uid", cfg.UID, flags.UID},
		{"launcher", cfg.LauncherPath, m.Launcher},
	} {
		if c.got != c.want {
			t.Errorf("the monitor reads %s %q, want %q", c.what, c.got, c.want)
		}
	}
	if cfg.Verbosity != flags.Verbosity {
		t.Errorf("the monitor reads verbosity %d, want %d", cfg.Verbosity, flags.Verbosity)
	}
	want := flags
	want.QemuTimeout = 7 * time.Minute
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("the launcher gets\n%+v\nwant\n%+v", *got, want)
	}
}

// readBack reads a monitor's command line back as the monitor does, and
// the launcher's part of it as the launcher does, and returns the
// environment it gets.
func readBack(t *testing.T, cmd *exec.Cmd) (monitor.Config, *launcherflags.Options, map[string]string) {
	t.Helper()
	env := map[string]string{}
	for _, kv := range cmd.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg, err := monitor.ParseArgs(cmd.Args[1:], func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("monitor.ParseArgs(%q): %v", cmd.Args[1:], err)
	}
	o, err := launcherflags.Parse(cfg.LauncherArgs, io.Discard)
	if err != nil {
		t.Fatalf("launcherflags.Parse(%q): %v", cfg.LauncherArgs, err)
	}
	return cfg, o, env
}
