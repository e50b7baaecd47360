package functest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// report writes a ginkgo v2 JUnit report with the given name → status
// cases and reads it back.
func report(t *testing.T, cases map[string]string) *Report {
	t.Helper()
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<testsuites><testsuite name=\"KubeVirt Tests Suite\">\n")
	for name, status := range cases {
		b.WriteString(`<testcase name="` + name + `" classname="KubeVirt Tests Suite" status="` + status + `" time="1.5">`)
		if status == "failed" {
			b.WriteString(`<failure message="boom" type="failed">boom</failure>`)
		}
		b.WriteString("</testcase>\n")
	}
	b.WriteString("</testsuite></testsuites>\n")
	p := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ReadJUnit(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const (
	specA = "[It] [sig-compute]VMI should start [sig-compute, conformance]"
	specB = "[It] [sig-network]svc should answer [sig-network, conformance]"
	specC = "[It] other spec [conformance]"
)

func TestReadJUnitLabelsAndArea(t *testing.T) {
	r := report(t, map[string]string{specA: "passed", specC: "skipped"})
	a := r.Specs[specA]
	if a.Area != "sig-compute" || len(a.Labels) != 2 || a.Labels[1] != "conformance" || !a.Passed() || a.Secs != 1.5 {
		t.Errorf("spec A read as %+v", a)
	}
	if c := r.Specs[specC]; c.Area != "other" || c.Ran() {
		t.Errorf("spec C read as %+v", c)
	}
}

func TestReadJUnitRefusesEmpty(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(p, []byte("<testsuites><testsuite name=\"x\"></testsuite></testsuites>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJUnit(p); err == nil || !strings.Contains(err.Error(), "no testcase") {
		t.Errorf("empty report: err %v, want \"no testcase\"", err)
	}
}

func TestCompareRegression(t *testing.T) {
	control := report(t, map[string]string{specA: "passed", specB: "passed", specC: "failed"})
	ours := report(t, map[string]string{specA: "passed", specB: "failed", specC: "failed"})
	c := Compare(control, ours, nil)
	if c.OK() || len(c.Regressions) != 1 || c.Regressions[0].Name != specB || c.Regressions[0].Status != "failed" {
		t.Fatalf("comparison %+v: want one regression, spec B", c)
	}
	var out bytes.Buffer
	c.Write(&out)
	for _, want := range []string{"| sig-network | 1 | 1 | 0 |", "| all | 3 | 2 | 1 |", "REGRESSION: passed on the control, failed on ours: " + specB} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCompareDeviationListed(t *testing.T) {
	control := report(t, map[string]string{specA: "passed", specB: "passed"})
	ours := report(t, map[string]string{specA: "passed", specB: "failed"})
	c := Compare(control, ours, []Deviation{{Spec: specB, Reason: "needs a login"}})
	if !c.OK() || len(c.Deviated) != 1 {
		t.Fatalf("comparison %+v: want OK with one listed deviation", c)
	}
}

func TestCompareStaleDeviation(t *testing.T) {
	control := report(t, map[string]string{specA: "passed", specB: "failed"})
	ours := report(t, map[string]string{specA: "passed", specB: "failed"})
	// Listed but passing on ours, and listed but failing on the control too.
	c := Compare(control, ours, []Deviation{{Spec: specA, Reason: "r"}, {Spec: specB, Reason: "r"}})
	if c.OK() || len(c.Stale) != 2 {
		t.Fatalf("comparison %+v: want both entries stale", c)
	}
}

func TestCompareSelectionDiffers(t *testing.T) {
	control := report(t, map[string]string{specA: "passed", specB: "passed"})
	ours := report(t, map[string]string{specA: "passed", specC: "passed"})
	c := Compare(control, ours, nil)
	if c.OK() || len(c.Extra) != 2 || len(c.Regressions) != 1 || c.Regressions[0].Status != "missing" {
		t.Fatalf("comparison %+v: want B missing from ours (a regression) and both extras", c)
	}
}

func TestCompareSkippedOnBoth(t *testing.T) {
	control := report(t, map[string]string{specA: "skipped"})
	ours := report(t, map[string]string{specA: "skipped"})
	c := Compare(control, ours, nil)
	if !c.OK() || len(c.Areas) != 0 {
		t.Fatalf("comparison %+v: want OK, no area (nothing ran)", c)
	}
}

func TestReadDeviationsRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"no reason":     {`[{"spec": "x", "reason": " "}]`, "reason is empty"},
		"no spec":       {`[{"spec": "", "reason": "r"}]`, "spec is empty"},
		"twice":         {`[{"spec": "x", "reason": "r"}, {"spec": "x", "reason": "r"}]`, "listed twice"},
		"unknown field": {`[{"spec": "x", "reason": "r", "why": "w"}]`, "unknown field"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "deviations.json")
			if err := os.WriteFile(p, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadDeviations(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDryRunSpecs(t *testing.T) {
	report := `[{"SpecReports": [
	{"ContainerHierarchyTexts": ["[sig-compute]VM", "with a disk"], "LeafNodeText": "starts", "LeafNodeType": "It", "State": "passed"},
	{"ContainerHierarchyTexts": ["[sig-compute]VM"], "LeafNodeText": "filtered out", "LeafNodeType": "It", "State": "skipped"},
	{"LeafNodeText": "", "LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"}]}]`
	got, err := DryRunSpecs([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "[sig-compute]VM with a disk starts" {
		t.Errorf("selected %q, want the one passed It", got)
	}
	if _, err := DryRunSpecs([]byte(`[{"SpecReports": []}]`)); err == nil {
		t.Error("a dry run selecting nothing: no error")
	}
}

// TestCheckedInSelections: the allow-list in this directory reads.
func TestCheckedInSelections(t *testing.T) {
	sels, err := ReadSelections("selections.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sels["conformance-nologin"]; !ok {
		t.Error("no conformance-nologin selection (the Makefile's default)")
	}
	if _, err := ReadDeviations("deviations.json"); err != nil {
		t.Fatal(err)
	}
}

func TestReadSelectionsRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"no why":         {`{"s": {"why": "", "label": "conformance"}}`, "why is empty"},
		"nothing":        {`{"s": {"why": "w"}}`, "are all empty"},
		"skip no reason": {`{"s": {"why": "w", "label": "l", "skip": [{"spec": "x", "reason": ""}]}}`, "reason is empty"},
		"bad regexp":     {`{"s": {"why": "w", "label": "l", "skip": [{"spec": "(", "reason": "r"}]}}`, "skip 0: spec"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "selections.json")
			if err := os.WriteFile(p, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadSelections(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCompareNotRunOnOurs(t *testing.T) {
	control := report(t, map[string]string{specA: "passed", specB: "passed"})
	ours := report(t, map[string]string{specA: "passed", specB: "skipped"})
	c := Compare(control, ours, nil)
	if c.OK() || len(c.NotRun) != 1 || len(c.Regressions) != 0 {
		t.Fatalf("comparison %+v: want B not compared, no regression, not OK", c)
	}
	var out bytes.Buffer
	c.Write(&out)
	if !strings.Contains(out.String(), "NOT COMPARED: passed on the control, did not run on ours (skipped): "+specB) {
		t.Errorf("output:\n%s", out.String())
	}
}
