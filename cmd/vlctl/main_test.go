package main

import (
	"strings"
	"testing"
)

// TestAttachIsConsole: vlctl attach NAME is vlctl console NAME, as docker
// attach is for a container: the same command line, listed in the help.
func TestAttachIsConsole(t *testing.T) {
	root := newRootCmd()
	attach, rest, err := root.Find([]string{"attach", "vm"})
	if err != nil {
		t.Fatalf("vlctl attach: %v", err)
	}
	console, _, err := root.Find([]string{"console", "vm"})
	if err != nil {
		t.Fatal(err)
	}
	if attach.Name() != "attach" || len(rest) != 1 || rest[0] != "vm" {
		t.Fatalf("vlctl attach vm found %q with %q", attach.Name(), rest)
	}
	if !strings.HasPrefix(attach.Use, "attach NAME") || !strings.Contains(attach.Long, "vlctl console") {
		t.Errorf("attach's help: %q\n%s", attach.Use, attach.Long)
	}
	for _, f := range []string{"namespace", "record-dir"} {
		if attach.Flags().Lookup(f) == nil || console.Flags().Lookup(f) == nil {
			t.Errorf("--%s: attach %v, console %v", f, attach.Flags().Lookup(f), console.Flags().Lookup(f))
		}
	}
	if err := attach.Args(attach, []string{}); err == nil {
		t.Error("attach without NAME accepted")
	}
}
