package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	timestampRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	posRE       = regexp.MustCompile(`^[A-Za-z0-9_.-]+\.go:\d+$`)
)

// checkLogs (kubevirt-wire.md 5.7): every line the monitor and the
// launcher wrote to stderr is one JSON object with sorted keys, the keys
// component, level, msg, pos and timestamp (UTC, microseconds), and reason
// on error lines; both components logged.
func checkLogs(t *testing.T, p *pod) {
	t.Helper()
	components := map[string]int{}
	subcomponents := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(p.Stderr.String(), "\n"), "\n")
	bad := 0
	for i, line := range lines {
		if err := checkLogLine(line, components, subcomponents); err != nil {
			bad++
			if bad <= 10 {
				t.Errorf("stderr line %d: %v\n%s", i+1, err, line)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d bad lines in all", bad)
	}
	for _, c := range []string{"virt-launcher", "virt-launcher-monitor"} {
		if components[c] == 0 {
			t.Errorf("no log line with component %q; components: %v", c, components)
		}
	}
	if out := p.Stdout.String(); out != "" {
		t.Logf("stdout is not empty (%d bytes); 5.7 puts logs on stderr:\n%.2000s", len(out), out)
	}
	t.Logf("%d stderr lines; components %v; subcomponents %v", len(lines), components, subcomponents)
}

func checkLogLine(line string, components, subcomponents map[string]int) error {
	keys, err := topLevelKeys(line)
	if err != nil {
		return fmt.Errorf("not one JSON object: %w", err)
	}
	if !slices.IsSorted(keys) {
		return fmt.Errorf("keys not sorted: %v", keys)
	}
	for j := 1; j < len(keys); j++ {
		if keys[j] == keys[j-1] {
			return fmt.Errorf("key %q twice", keys[j])
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return err
	}
	str := func(k string) (string, error) {
		v, ok := m[k]
		if !ok {
			return "", fmt.Errorf("no %q key", k)
		}
		s, ok := v.(string)
		if !ok || s == "" {
			return "", fmt.Errorf("%q is %v, want a non-empty string", k, v)
		}
		return s, nil
	}
	comp, err := str("component")
	if err != nil {
		return err
	}
	components[comp]++
	level, err := str("level")
	if err != nil {
		return err
	}
	if !slices.Contains([]string{"info", "warning", "error", "fatal"}, level) {
		return fmt.Errorf("level %q", level)
	}
	if _, err := str("msg"); err != nil {
		return err
	}
	pos, err := str("pos")
	if err != nil {
		return err
	}
	if !posRE.MatchString(pos) {
		return fmt.Errorf("pos %q is not file.go:line", pos)
	}
	ts, err := str("timestamp")
	if err != nil {
		return err
	}
	if !timestampRE.MatchString(ts) {
		return fmt.Errorf("timestamp %q is not 2006-01-02T15:04:05.000000Z", ts)
	}
	if tm, err := time.Parse("2006-01-02T15:04:05.000000Z", ts); err != nil || time.Since(tm) > time.Hour || time.Until(tm) > time.Minute {
		return fmt.Errorf("timestamp %q is not now in UTC (%v)", ts, err)
	}
	if level == "error" || level == "fatal" {
		if _, err := str("reason"); err != nil {
			return fmt.Errorf("%s line: %w", level, err)
		}
	}
	if sc, ok := m["subcomponent"].(string); ok {
		subcomponents[sc]++
	}
	return nil
}

// topLevelKeys returns the keys of a JSON object in their order, and fails
// unless line is exactly one object.
func topLevelKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("starts with %v", tok)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("trailing data %q", rest)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one value")
	}
	return keys, nil
}

// TestLogLineChecker: the checker above rejects what 5.7 forbids, so the
// log checks of the lifecycle tests can fail.
func TestLogLineChecker(t *testing.T) {
	good := `{"component":"virt-launcher","level":"info","msg":"m","pos":"a.go:1","timestamp":"` + time.Now().UTC().Format("2006-01-02T15:04:05.000000Z") + `"}`
	if err := checkLogLine(good, map[string]int{}, map[string]int{}); err != nil {
		t.Fatalf("good line rejected: %v", err)
	}
	ts := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	for name, line := range map[string]string{
		"not json":      `level=info msg=x`,
		"unsorted":      `{"level":"info","component":"virt-launcher","msg":"m","pos":"a.go:1","timestamp":"` + ts + `"}`,
		"no pos":        `{"component":"virt-launcher","level":"info","msg":"m","timestamp":"` + ts + `"}`,
		"millis":        `{"component":"virt-launcher","level":"info","msg":"m","pos":"a.go:1","timestamp":"` + time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + `"}`,
		"error no rsn":  `{"component":"virt-launcher","level":"error","msg":"m","pos":"a.go:1","timestamp":"` + ts + `"}`,
		"level warn":    `{"component":"virt-launcher","level":"warn","msg":"m","pos":"a.go:1","timestamp":"` + ts + `"}`,
		"two objects":   good + good,
		"duplicate key": `{"component":"virt-launcher","level":"info","msg":"m","msg":"n","pos":"a.go:1","timestamp":"` + ts + `"}`,
	} {
		if err := checkLogLine(line, map[string]int{}, map[string]int{}); err == nil {
			t.Errorf("%s: accepted %s", name, line)
		}
	}
}
