// Package functest reads what KubeVirt's own functional test suite
// (kubevirt.io/kubevirt/tests, built by `make e2e-functest-build`) reports
// when run against the e2e cluster, and compares a run on KubeVirt's own
// launcher image (the control) with a run on ours: every spec that passes
// on the control must pass on ours, unless the checked-in deviation list
// says why not.
package functest

import (
	"encoding/xml"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Spec is one spec's result in a run.
type Spec struct {
	Name   string // ginkgo's full text, the leaf type and labels included
	Status string // ginkgo's state: passed, failed, skipped, pending, panicked, timedout, ...
	Area   string // the spec's first sig-* label, or "other"
	Labels []string
	Secs   float64
}

// Passed says whether the spec ran and passed.
func (s Spec) Passed() bool { return s.Status == "passed" }

// Ran says whether the spec ran (not skipped or pending).
func (s Spec) Ran() bool { return s.Status != "skipped" && s.Status != "pending" }

// Report is one run of the suite: its specs by name.
type Report struct {
	Path  string
	Specs map[string]Spec
}

// junit is what ginkgo v2's --ginkgo.junit-report writes.
type junit struct {
	Suites []struct {
		Cases []struct {
			Name   string  `xml:"name,attr"`
			Status string  `xml:"status,attr"`
			Time   float64 `xml:"time,attr"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ReadJUnit reads a ginkgo v2 JUnit report. The suite-level nodes
// (BeforeSuite and the like) are kept as specs: a suite whose set-up
// failed must not read as a run with nothing selected.
func ReadJUnit(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("JUnit report: %w", err)
	}
	var j junit
	if err := xml.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("JUnit report %s: %w", path, err)
	}
	r := &Report{Path: path, Specs: map[string]Spec{}}
	for _, s := range j.Suites {
		for _, c := range s.Cases {
			if c.Name == "" || c.Status == "" {
				return nil, fmt.Errorf("JUnit report %s: a testcase without name or status (not ginkgo v2's report?)", path)
			}
			if _, dup := r.Specs[c.Name]; dup {
				return nil, fmt.Errorf("JUnit report %s: spec %q twice", path, c.Name)
			}
			labels := labelsOf(c.Name)
			r.Specs[c.Name] = Spec{Name: c.Name, Status: c.Status, Area: areaOf(labels), Labels: labels, Secs: c.Time}
		}
	}
	if len(r.Specs) == 0 {
		return nil, fmt.Errorf("JUnit report %s: no testcase", path)
	}
	return r, nil
}

// labelsOf returns the labels ginkgo appends to a testcase name as
// " [a, b, c]".
func labelsOf(name string) []string {
	if !strings.HasSuffix(name, "]") {
		return nil
	}
	i := strings.LastIndex(name, " [")
	if i < 0 {
		return nil
	}
	return strings.Split(name[i+2:len(name)-1], ", ")
}

func areaOf(labels []string) string {
	for _, l := range labels {
		if strings.HasPrefix(l, "sig-") {
			return l
		}
	}
	return "other"
}

// Names returns the report's spec names, sorted.
func (r *Report) Names() []string {
	names := make([]string, 0, len(r.Specs))
	for n := range r.Specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
