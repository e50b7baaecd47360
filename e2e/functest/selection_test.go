package functest

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSelectionFilterArgs(t *testing.T) {
	s := Selection{
		Why:        "w",
		Label:      "!(QUARANTINE)",
		Focus:      "VNC",
		FocusFiles: []string{"/tests/network/", `/tests/vnc_test\.go$`},
		Skip:       []Skip{{Spec: "a$", Reason: "r"}, {Spec: `\[test_id:1\]`, Reason: "r"}},
	}
	want := []string{
		"--ginkgo.label-filter=!(QUARANTINE)",
		"--ginkgo.focus=VNC",
		"--ginkgo.focus-file=/tests/network/",
		`--ginkgo.focus-file=/tests/vnc_test\.go$`,
		`--ginkgo.skip=(?:a$)|(?:\[test_id:1\])`,
	}
	if got := s.FilterArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("FilterArgs:\n got %q\nwant %q", got, want)
	}
	if got := (Selection{Label: "x"}).FilterArgs(); !reflect.DeepEqual(got, []string{"--ginkgo.label-filter=x"}) {
		t.Errorf("label only: %q", got)
	}
}

func TestSelectionCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  Selection
		err  string
	}{
		{"focus files alone", Selection{Why: "w", FocusFiles: []string{"/tests/hotplug/"}}, ""},
		{"nothing chosen", Selection{Why: "w"}, "all empty"},
		{"empty focus file", Selection{Why: "w", Label: "x", FocusFiles: []string{" "}}, "focus file 0"},
		{"focus file with lines", Selection{Why: "w", Label: "x", FocusFiles: []string{"a.go:10-20"}}, "without a colon"},
		{"bad focus file", Selection{Why: "w", Label: "x", FocusFiles: []string{"(a"}}, "focus file 0"},
		{"skip without reason", Selection{Why: "w", Label: "x", Skip: []Skip{{Spec: "a"}}}, "reason is empty"},
	} {
		err := tc.sel.check()
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		}
	}
}

// TestCheckedInSelectionsByArea reads the checked-in allow-list: the
// selections by area are there, no spec is left out of one twice (a second
// entry would hide which reason holds), and focus files name the suite's
// tests/ (ginkgo matches them against the spec's whole file path).
func TestCheckedInSelectionsByArea(t *testing.T) {
	sels, err := ReadSelections("selections.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"conformance", "lifecycle", "vm", "devices", "network", "migration", "hotplug", "storage-nocdi", "hooks"} {
		if _, ok := sels[n]; !ok {
			t.Errorf("selection %q missing", n)
		}
	}
	for n, s := range sels {
		seen := map[string]bool{}
		for _, k := range s.Skip {
			if seen[k.Spec] {
				t.Errorf("%s: %q left out twice", n, k.Spec)
			}
			seen[k.Spec] = true
		}
		for _, f := range s.FocusFiles {
			if !strings.HasPrefix(f, "/tests/") {
				t.Errorf("%s: focus file %q: not under the suite's /tests/", n, f)
			}
		}
	}
}

// TestDryRunPassesTheSelection runs DryRun against a stand-in for the
// suite's binary that records its arguments and answers with a ginkgo JSON
// report: the dry run must give the binary the selection's every filter.
func TestDryRunPassesTheSelection(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "suite.test")
	script := `#!/bin/sh
for a in "$@"; do
  echo "$a" >> "$PWD/args"
  case "$a" in --ginkgo.json-report=*) report="${a#--ginkgo.json-report=}";; esac
done
cat > "$report" <<'JSON'
[{"SpecReports":[
 {"ContainerHierarchyTexts":["[sig-network] Probes"],"LeafNodeText":"should answer","LeafNodeType":"It","State":"passed"},
 {"ContainerHierarchyTexts":["[sig-network] Probes"],"LeafNodeText":"skipped one","LeafNodeType":"It","State":"skipped"},
 {"ContainerHierarchyTexts":[],"LeafNodeText":"","LeafNodeType":"BeforeSuite","State":"passed"}]}]
JSON
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sel := Selection{Why: "w", Label: "!(QUARANTINE)", FocusFiles: []string{"/tests/network/"}, Skip: []Skip{{Spec: "x$", Reason: "r"}}}
	texts, err := DryRun(context.Background(), bin, dir, sel)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"[sig-network] Probes should answer"}; !reflect.DeepEqual(texts, want) {
		t.Errorf("texts %q, want %q", texts, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !reflect.DeepEqual(args[:2], []string{"--ginkgo.dry-run", "--ginkgo.json-report=" + filepath.Join(dir, "dry-run.json")}) {
		t.Errorf("the binary's first arguments %q: not a dry run with a JSON report", args[:2])
	}
	if got, want := args[len(args)-3:], sel.FilterArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("the binary's filters %q, want %q", got, want)
	}
}

// TestShard: the shares of a list of specs partition it, and do not depend
// on the order the dry run listed them in (its random seed's).
func TestShard(t *testing.T) {
	texts := []string{"e", "b", "a", "d", "c", "g", "f"}
	shuffled := []string{"c", "g", "a", "f", "e", "d", "b"}
	seen := map[string]int{}
	for i := 1; i <= 3; i++ {
		mine := Shard(texts, i, 3)
		if other := Shard(shuffled, i, 3); !slices.Equal(mine, other) {
			t.Errorf("share %d/3 is %q from one order and %q from another", i, mine, other)
		}
		for _, s := range mine {
			seen[s]++
		}
	}
	for _, s := range texts {
		if seen[s] != 1 {
			t.Errorf("spec %q is in %d shares, want 1", s, seen[s])
		}
	}
}
