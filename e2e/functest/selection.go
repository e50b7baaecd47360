package functest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Selection is one checked-in choice of the suite's specs: a ginkgo label
// filter, an optional focus, optional focus files (regular expressions on
// the specs' source files: an area of the suite is mostly a directory or a
// few files of tests/, not a label), and the specs left out of it each
// with why (their regular expressions become ginkgo's --skip).
type Selection struct {
	Why          string   `json:"why"`
	Label        string   `json:"label"`
	Focus        string   `json:"focus,omitempty"`
	FocusFiles   []string `json:"focusFiles,omitempty"`
	Skip         []Skip   `json:"skip,omitempty"`
	FeatureGates []string `json:"featureGates,omitempty"`
}

// Skip leaves the specs matching Spec (a regular expression on ginkgo's
// full text) out of a selection.
type Skip struct {
	Spec   string `json:"spec"`
	Reason string `json:"reason"`
}

// SkipRegexp is the selection's skips as one regular expression for
// ginkgo's --skip, or "" when there are none.
func (s Selection) SkipRegexp() string {
	var parts []string
	for _, k := range s.Skip {
		parts = append(parts, "(?:"+k.Spec+")")
	}
	return strings.Join(parts, "|")
}

// FilterArgs are the suite binary's ginkgo flags that select s's specs:
// the label filter, the focus, one --ginkgo.focus-file per focus file
// (ginkgo runs the specs of any of them) and the skips.
func (s Selection) FilterArgs() []string {
	var args []string
	if s.Label != "" {
		args = append(args, "--ginkgo.label-filter="+s.Label)
	}
	if s.Focus != "" {
		args = append(args, "--ginkgo.focus="+s.Focus)
	}
	for _, f := range s.FocusFiles {
		args = append(args, "--ginkgo.focus-file="+f)
	}
	if k := s.SkipRegexp(); k != "" {
		args = append(args, "--ginkgo.skip="+k)
	}
	return args
}

// ReadSelections reads the allow-list of selections (a JSON object of
// name → Selection) and checks each entry.
func ReadSelections(path string) (map[string]Selection, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("selections: %w", err)
	}
	var sels map[string]Selection
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sels); err != nil {
		return nil, fmt.Errorf("selections %s: %w", path, err)
	}
	names := make([]string, 0, len(sels))
	for n := range sels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := sels[n].check(); err != nil {
			return nil, fmt.Errorf("selections %s: %s: %w", path, n, err)
		}
	}
	return sels, nil
}

func (s Selection) check() error {
	if strings.TrimSpace(s.Why) == "" {
		return fmt.Errorf("why is empty: say what the selection is for")
	}
	if strings.TrimSpace(s.Label) == "" && strings.TrimSpace(s.Focus) == "" && len(s.FocusFiles) == 0 {
		return fmt.Errorf("label, focus and focus files are all empty: that selects the whole suite")
	}
	if _, err := regexp.Compile(s.Focus); err != nil {
		return fmt.Errorf("focus: %w", err)
	}
	for i, f := range s.FocusFiles {
		// ginkgo reads FILE_REGEX[:LINES]; a selection names files only.
		if strings.TrimSpace(f) == "" || strings.Contains(f, ":") {
			return fmt.Errorf("focus file %d (%q): want a regular expression on a file path, without a colon", i, f)
		}
		if _, err := regexp.Compile(f); err != nil {
			return fmt.Errorf("focus file %d: %w", i, err)
		}
	}
	for i, k := range s.Skip {
		if strings.TrimSpace(k.Reason) == "" {
			return fmt.Errorf("skip %d (%s): reason is empty", i, k.Spec)
		}
		if strings.TrimSpace(k.Spec) == "" {
			return fmt.Errorf("skip %d: spec is empty", i)
		}
		if _, err := regexp.Compile(k.Spec); err != nil {
			return fmt.Errorf("skip %d: spec: %w", i, err)
		}
	}
	return nil
}

// Shard is the i-th (1-based) of n shares of the specs texts: every n-th
// of them in byte order. The order is the texts' own, not the suite's: a
// dry run lists the specs in the order of its random seed, and shares dealt
// from that order would overlap from one run to the next and leave specs
// out of every share.
func Shard(texts []string, i, n int) []string {
	sorted := slices.Clone(texts)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var mine []string
	for k, t := range sorted {
		if k%n == i-1 {
			mine = append(mine, t)
		}
	}
	return mine
}
