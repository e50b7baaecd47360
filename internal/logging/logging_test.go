package logging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

var tsRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// keysInOrder decodes one JSON object and returns its keys as they appear,
// failing on anything but a flat object.
func keysInOrder(t *testing.T, line string) ([]string, map[string]any) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("line is not JSON: %v\n%s", err, line)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("line does not start an object: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys, m
}

func lines(t *testing.T, buf *bytes.Buffer) []string {
	t.Helper()
	s := buf.String()
	if s != "" && !strings.HasSuffix(s, "\n") {
		t.Fatalf("output does not end with a newline: %q", s)
	}
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func TestLineShape(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "virt-launcher", 2)
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "1234-abcd"}}
	before := time.Now().UTC().Truncate(time.Microsecond)
	ForVMI(log, vmi).Error("Failed to sync vmi", "err", errors.New("boom \"quoted\"\nnext"))
	after := time.Now().UTC()

	ls := lines(t, &buf)
	if len(ls) != 1 {
		t.Fatalf("want 1 line, got %d: %q", len(ls), buf.String())
	}
	keys, m := keysInOrder(t, ls[0])
	want := []string{"component", "kind", "level", "msg", "name", "namespace", "pos", "reason", "timestamp", "uid"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	wantVals := map[string]string{
		"component": "virt-launcher", "kind": "VirtualMachineInstance", "level": "error",
		"msg": "Failed to sync vmi", "name": "vm1", "namespace": "ns1", "uid": "1234-abcd",
		"reason": "boom \"quoted\"\nnext",
	}
	for k, v := range wantVals {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if pos, _ := m["pos"].(string); !regexp.MustCompile(`^logging_test\.go:\d+$`).MatchString(pos) {
		t.Errorf("pos = %q, want logging_test.go:<line>", pos)
	}
	ts, _ := m["timestamp"].(string)
	if !tsRE.MatchString(ts) {
		t.Fatalf("timestamp %q does not have the form %s", ts, TimeFormat)
	}
	parsed, err := time.Parse(TimeFormat, ts)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Before(before) || parsed.After(after) {
		t.Errorf("timestamp %v not within [%v, %v]", parsed, before, after)
	}
}

func TestLevelsAndVerbosity(t *testing.T) {
	cases := []struct {
		verbosity int
		level     slog.Level
		shown     bool
		name      string
	}{
		{2, slog.LevelInfo, true, "info"},
		{2, V(3), false, ""},
		{3, V(3), true, "info"},
		{2, slog.LevelDebug, false, ""},
		{5, slog.LevelDebug, false, ""},
		{6, slog.LevelDebug, true, "info"},
		{0, slog.LevelInfo, true, "info"},
		{-1, slog.LevelInfo, false, ""},
		{-1, slog.LevelWarn, true, "warning"},
		{2, slog.LevelWarn, true, "warning"},
		{2, slog.LevelError, true, "error"},
		{2, LevelFatal, true, "fatal"},
		{9, V(9), true, "info"},
		{8, V(9), false, ""},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		New(&buf, "c", c.verbosity).Log(t.Context(), c.level, "m")
		ls := lines(t, &buf)
		if !c.shown {
			if len(ls) != 0 {
				t.Errorf("v=%d level=%v: want nothing, got %q", c.verbosity, c.level, ls)
			}
			continue
		}
		if len(ls) != 1 {
			t.Errorf("v=%d level=%v: want one line, got %q", c.verbosity, c.level, ls)
			continue
		}
		_, m := keysInOrder(t, ls[0])
		if m["level"] != c.name {
			t.Errorf("v=%d level=%v: level %q, want %q", c.verbosity, c.level, m["level"], c.name)
		}
	}
}

func TestVerbosityEnv(t *testing.T) {
	cases := []struct {
		env  string
		flag int
		want int
	}{
		{"", 2, 2},
		{"", 4, 4},
		{"7", 2, 7},
		{"0", 4, 0},
		{"notanumber", 3, 3},
	}
	for _, c := range cases {
		t.Setenv(EnvVerbosity, c.env)
		if got := Verbosity(c.flag); got != c.want {
			t.Errorf("env %q flag %d: got %d, want %d", c.env, c.flag, got, c.want)
		}
	}
}

func TestAttributes(t *testing.T) {
	cases := []struct {
		name string
		log  func(*slog.Logger)
		want map[string]any
	}{
		{"reason key", func(l *slog.Logger) { l.Warn("w", "reason", "r1") }, map[string]any{"reason": "r1"}},
		{"error value any key", func(l *slog.Logger) { l.Error("e", "cause", io.EOF) }, map[string]any{"reason": "EOF"}},
		{"error key string", func(l *slog.Logger) { l.Error("e", "error", "text") }, map[string]any{"reason": "text"}},
		{"subcomponent", func(l *slog.Logger) { Subcomponent(l, "qemu").Info("q") }, map[string]any{"subcomponent": "qemu"}},
		{"typed values", func(l *slog.Logger) {
			l.Info("t", "i", -3, "u", uint64(7), "f", 1.5, "b", true, "d", 1500*time.Millisecond, "nan", 0.0/zero())
		}, map[string]any{"i": -3.0, "u": 7.0, "f": 1.5, "b": true, "d": "1.5s", "nan": "NaN"}},
		{"group flattened", func(l *slog.Logger) { l.WithGroup("g").Info("x", "k", "v", slog.Group("h", "z", 1)) },
			map[string]any{"g.k": "v", "g.h.z": 1.0}},
		{"record overrides with", func(l *slog.Logger) { l.With("name", "a").Info("x", "name", "b") }, map[string]any{"name": "b"}},
		{"struct value", func(l *slog.Logger) { l.Info("x", "s", struct{ A int }{4}) }, map[string]any{"s": map[string]any{"A": 4.0}}},
		{"control and invalid utf8", func(l *slog.Logger) { l.Info("a\x01b\xffc\u2028") }, map[string]any{"msg": "a\x01b\ufffdc\u2028"}},
		{"user cannot clobber level", func(l *slog.Logger) { l.Info("x", "level", "fatal") }, map[string]any{"level": "info"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			c.log(New(&buf, "comp", 2))
			ls := lines(t, &buf)
			if len(ls) != 1 {
				t.Fatalf("want one line, got %q", buf.String())
			}
			keys, m := keysInOrder(t, ls[0])
			for i := 1; i < len(keys); i++ {
				if keys[i-1] >= keys[i] {
					t.Errorf("keys not sorted and unique: %v", keys)
				}
			}
			for k, v := range c.want {
				got, _ := json.Marshal(m[k])
				exp, _ := json.Marshal(v)
				if !bytes.Equal(got, exp) {
					t.Errorf("%s = %s, want %s (line %s)", k, got, exp, ls[0])
				}
			}
		})
	}
}

func zero() float64 { return 0 }

// TestConcurrent checks that lines written from many goroutines never
// interleave.
func TestConcurrent(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "c", 2)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := log.With("g", g)
			for i := range 200 {
				l.Info(strings.Repeat("x", i), "i", i)
			}
		}()
	}
	wg.Wait()
	n := 0
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		keysInOrder(t, sc.Text())
		n++
	}
	if n != 1600 {
		t.Errorf("got %d lines, want 1600", n)
	}
}

func BenchmarkInfo(b *testing.B) {
	log := New(io.Discard, "virt-launcher", 2)
	vlog := log.With("kind", KindVMI, "name", "vm1", "namespace", "ns1", "uid", "u")
	b.ReportAllocs()
	for b.Loop() {
		vlog.Info("Synced vmi", "reason", "none")
	}
}
