package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// complete runs vlctl __complete ARGS..., as the shells' completion
// scripts do, and returns the words offered and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(append([]string{cobra.ShellCompRequestCmd}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("vlctl __complete %q: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var words []string
	for _, l := range lines[:len(lines)-1] {
		words = append(words, strings.SplitN(l, "\t", 2)[0])
	}
	return words, lines[len(lines)-1]
}

// TestCompleteVMNames: the commands that take a VM's name complete it
// from the run records in --record-dir: the live runs and the background
// runs starting, a name two namespaces have as NAMESPACE/NAME; vlctl rm
// and logs also the runs that ended; never a stale run for stop.
func TestCompleteVMNames(t *testing.T) {
	testenv.Root(t, "run records are root's")
	dir := filepath.Join(t.TempDir(), "records")
	pid, start, err := runrecord.Self()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []runrecord.Record{
		{Name: "web", Namespace: "default", Process: runrecord.Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/a"},
		{Name: "db", Namespace: "prod", Process: runrecord.Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/b"},
		{Name: "web", Namespace: "prod", Process: runrecord.Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/c"},
		{Name: "old", Namespace: "default", Process: runrecord.Process{PID: gone.Process.Pid, PIDStart: start}, WorkDir: "/run/vl/d"},
	} {
		if _, err := runrecord.Write(dir, &r); err != nil {
			t.Fatal(err)
		}
	}
	_, lock, log, err := runrecord.NewBackground(dir, "default", "bgstarting")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	log.Close()
	_, lock2, log2, err := runrecord.NewBackground(dir, "default", "bgdone")
	if err != nil {
		t.Fatal(err)
	}
	lock2.Close()
	log2.Close()

	for _, c := range []struct {
		args      []string
		want      []string
		directive string
	}{
		{[]string{"stop", ""}, []string{"bgstarting", "db", "default/web", "prod/web"}, ":4"},
		{[]string{"attach", "d"}, []string{"db", "default/web"}, ":4"},
		{[]string{"ssh", "prod/"}, []string{"prod/db", "prod/web"}, ":4"},
		{[]string{"kill", "-n", "prod", ""}, []string{"db", "web"}, ":4"},
		{[]string{"rm", ""}, []string{"bgdone", "bgstarting", "db", "default/web", "old", "prod/web"}, ":4"},
		{[]string{"logs", "b"}, []string{"bgdone", "bgstarting"}, ":4"},
		{[]string{"screenshot", "db", ""}, nil, ":0"}, // the file
		{[]string{"exec", "db", ""}, nil, ":4"},
		{[]string{"cp", "d"}, []string{"db:", "default/web:"}, ":6"},
		{[]string{"cp", "./"}, nil, ":0"},
		{[]string{"console", "/run/"}, nil, ":0"},
		{[]string{"run", "--migrate-from", ""}, []string{"bgstarting", "db", "default/web", "prod/web"}, ":4"},
	} {
		args := append([]string{c.args[0], "--record-dir", dir}, c.args[1:]...)
		got, directive := complete(t, args...)
		slices.Sort(got)
		if !slices.Equal(got, c.want) || directive != c.directive {
			t.Errorf("vlctl __complete %s: %q %s, want %q %s", strings.Join(c.args, " "), got, directive, c.want, c.directive)
		}
	}
}

// TestEveryNameCompletes: every command that finds a VM by name (it has
// --record-dir) and takes arguments completes them.
func TestEveryNameCompletes(t *testing.T) {
	for _, c := range newRootCmd().Commands() {
		if c.Flags().Lookup("record-dir") == nil || c.Name() == "run" {
			continue
		}
		if c.Args != nil && c.Args(c, []string{"x"}) != nil { // takes no argument: ps, gc
			continue
		}
		if c.ValidArgsFunction == nil {
			t.Errorf("vlctl %s takes a VM's name but completes nothing", c.Name())
		}
	}
}
