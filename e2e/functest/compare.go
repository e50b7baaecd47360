package functest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Deviation is a spec allowed to pass on the control and not on ours,
// and why.
type Deviation struct {
	Spec   string `json:"spec"`
	Reason string `json:"reason"`
}

// ReadDeviations reads the deviation list (a JSON array of Deviation).
// Every entry needs a spec name and a reason, and a spec is listed once.
func ReadDeviations(path string) ([]Deviation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("deviation list: %w", err)
	}
	var ds []Deviation
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ds); err != nil {
		return nil, fmt.Errorf("deviation list %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, d := range ds {
		switch {
		case strings.TrimSpace(d.Spec) == "":
			return nil, fmt.Errorf("deviation list %s: entry %d: spec is empty", path, i)
		case strings.TrimSpace(d.Reason) == "":
			return nil, fmt.Errorf("deviation list %s: entry %d (%s): reason is empty: say why ours may fail it", path, i, d.Spec)
		case seen[d.Spec]:
			return nil, fmt.Errorf("deviation list %s: entry %d: spec %q listed twice", path, i, d.Spec)
		}
		seen[d.Spec] = true
	}
	return ds, nil
}

// Comparison is the verdict on a run on ours against the control's.
type Comparison struct {
	// Regressions passed on the control and failed on ours (or were
	// missing from ours), and are not on the deviation list.
	Regressions []Spec
	// NotRun passed on the control and did not run on ours (skipped:
	// the run's deadline, or a spec's own skip): not compared.
	NotRun []Spec
	// Deviated passed on the control, did not pass on ours, and are on
	// the list.
	Deviated []Deviation
	// Stale are entries of the list whose spec passed on ours or did not
	// pass on the control: the list must say only what is true.
	Stale []Deviation
	// Extra is what the runs did not agree on the selection of: specs
	// in one report and not in the other.
	Extra []string
	// Areas is the table per area (sig label).
	Areas []AreaRow
}

// AreaRow counts one area's specs (ginkgo's It nodes; the suite-level
// nodes are compared, not counted): those that ran on the control (the
// JUnit report lists every spec of the suite, those filtered out as
// skipped), passed there, and passed on ours.
type AreaRow struct {
	Area                      string
	Ran                       int
	PassedControl, PassedOurs int
}

// OK says whether ours did what the control did.
func (c Comparison) OK() bool {
	return len(c.Regressions) == 0 && len(c.NotRun) == 0 && len(c.Stale) == 0 && len(c.Extra) == 0
}

// Compare checks ours against control.
func Compare(control, ours *Report, devs []Deviation) Comparison {
	var c Comparison
	allowed := map[string]Deviation{}
	for _, d := range devs {
		allowed[d.Spec] = d
	}
	used := map[string]bool{}
	areas := map[string]*AreaRow{}
	for _, name := range control.Names() {
		cs := control.Specs[name]
		os, inOurs := ours.Specs[name]
		if !inOurs {
			c.Extra = append(c.Extra, "only in the control's report: "+name)
		}
		if strings.HasPrefix(name, "[It] ") && (cs.Ran() || os.Ran()) {
			row := areas[cs.Area]
			if row == nil {
				row = &AreaRow{Area: cs.Area}
				areas[cs.Area] = row
			}
			if cs.Ran() {
				row.Ran++
			}
			if cs.Passed() {
				row.PassedControl++
			}
			if os.Passed() {
				row.PassedOurs++
			}
		}
		if !cs.Passed() || os.Passed() {
			continue
		}
		if d, ok := allowed[name]; ok {
			c.Deviated = append(c.Deviated, d)
			used[name] = true
			continue
		}
		switch {
		case !inOurs:
			c.Regressions = append(c.Regressions, Spec{Name: name, Status: "missing", Area: cs.Area})
		case !os.Ran():
			c.NotRun = append(c.NotRun, os)
		default:
			c.Regressions = append(c.Regressions, os)
		}
	}
	for _, name := range ours.Names() {
		if _, ok := control.Specs[name]; !ok {
			c.Extra = append(c.Extra, "only in our report: "+name)
		}
	}
	for _, d := range devs {
		if !used[d.Spec] {
			c.Stale = append(c.Stale, d)
		}
	}
	for _, row := range areas {
		c.Areas = append(c.Areas, *row)
	}
	sort.Slice(c.Areas, func(i, j int) bool { return c.Areas[i].Area < c.Areas[j].Area })
	return c
}

// Write prints the comparison: the table per area, then what is wrong.
func (c Comparison) Write(w io.Writer) {
	fmt.Fprintf(w, "| area | ran on control | passed on control | passed on ours |\n|---|---|---|---|\n")
	var tot AreaRow
	for _, r := range c.Areas {
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", r.Area, r.Ran, r.PassedControl, r.PassedOurs)
		tot.Ran += r.Ran
		tot.PassedControl += r.PassedControl
		tot.PassedOurs += r.PassedOurs
	}
	fmt.Fprintf(w, "| all | %d | %d | %d |\n", tot.Ran, tot.PassedControl, tot.PassedOurs)
	for _, s := range c.Regressions {
		fmt.Fprintf(w, "REGRESSION: passed on the control, %s on ours: %s\n", s.Status, s.Name)
	}
	for _, s := range c.NotRun {
		fmt.Fprintf(w, "NOT COMPARED: passed on the control, did not run on ours (%s): %s\n", s.Status, s.Name)
	}
	for _, d := range c.Deviated {
		fmt.Fprintf(w, "deviation (listed): %s: %s\n", d.Spec, d.Reason)
	}
	for _, d := range c.Stale {
		fmt.Fprintf(w, "STALE deviation (passed on ours, or did not pass on the control): remove it: %s\n", d.Spec)
	}
	for _, e := range c.Extra {
		fmt.Fprintf(w, "SELECTION DIFFERS: %s\n", e)
	}
}
