// Package logging writes KubeVirt-style JSON log lines through log/slog.
//
// Every line is one JSON object with its keys sorted, as KubeVirt's launcher
// and monitor write them (kubevirt-wire.md 5.7):
//
//	{"component":"virt-launcher","kind":"VirtualMachineInstance","level":"error",
//	 "msg":"Failed to sync vmi","name":"vm1","namespace":"ns1","pos":"server.go:272",
//	 "reason":"...","timestamp":"2025-01-02T03:04:05.123456Z","uid":"..."}
//
// Keys: component, level (info, warning, error, fatal), msg, pos (file.go:line
// of the caller), timestamp (UTC, microseconds). An error attribute becomes
// "reason": an attribute whose key is "reason", "err" or "error", or any
// attribute whose value is an error. Object-scoped lines carry kind, name,
// namespace and uid (see ForObject and ForVMI); relayed lines carry
// subcomponent (libvirt, qemu). Any other attribute is written under its own
// key, sorted with the rest; groups are flattened as "group.key".
//
// # Verbosity
//
// KubeVirt filters with glog-style V-levels; the default verbosity is 2 and
// VIRT_LAUNCHER_LOG_VERBOSITY overrides -v. They map to slog levels as:
//
//	V(0..2)  -> slog.LevelInfo (always shown unless verbosity < 0)
//	V(n>2)   -> slog.Level(2-n): V(3) = -1, V(4) = -2, V(6) = slog.LevelDebug
//	warning  -> slog.LevelWarn, error -> slog.LevelError, fatal -> LevelFatal
//
// A logger built with verbosity v shows every record at or above V(v), so
// -v 6 (the level at which KubeVirt also turns on libvirt debug logs) shows
// slog.Debug lines. Records below Warn are written with level "info", as
// KubeVirt writes its V(n).Info lines.
package logging

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
)

// DefaultVerbosity is KubeVirt's default -v.
const DefaultVerbosity = 2

// LevelFatal is logged as "fatal". slog has no fatal level; callers exit
// themselves after logging at it.
const LevelFatal = slog.Level(12)

// EnvVerbosity is the environment variable that overrides -v.
const EnvVerbosity = "VIRT_LAUNCHER_LOG_VERBOSITY"

// V returns the slog level of a KubeVirt V(n) line.
func V(n int) slog.Level {
	if n <= DefaultVerbosity {
		return slog.LevelInfo
	}
	return slog.Level(DefaultVerbosity - n)
}

// Verbosity returns the effective verbosity: the integer in
// VIRT_LAUNCHER_LOG_VERBOSITY if it is set and valid, else flagValue.
func Verbosity(flagValue int) int {
	if s := os.Getenv(EnvVerbosity); s != "" {
		if v, err := strconv.Atoi(s); err == nil {
			return v
		}
	}
	return flagValue
}

// New returns a logger writing JSON lines for component to w, showing
// records at or above V(verbosity).
func New(w io.Writer, component string, verbosity int) *slog.Logger {
	return slog.New(NewHandler(w, component, verbosity))
}

// NewHandler is New's handler, for callers that wrap it.
func NewHandler(w io.Writer, component string, verbosity int) *Handler {
	min := V(verbosity)
	if verbosity < 0 {
		min = slog.LevelWarn
	}
	h := &Handler{out: &output{w: w}, min: min}
	h.attrs = []field{{key: "component", val: appendString(nil, component)}}
	return h
}

// Handler is the slog.Handler behind New. It is safe for concurrent use.
type Handler struct {
	out    *output
	min    slog.Level
	prefix string  // group prefix for attributes added later, "a.b."
	attrs  []field // pre-encoded attributes from WithAttrs
}

type output struct {
	mu sync.Mutex
	w  io.Writer
}

// field is one key with its value already encoded as JSON.
type field struct {
	key string
	val []byte
}

// Enabled reports whether a record at level l would be written.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	h2 := *h
	h2.attrs = make([]field, len(h.attrs), len(h.attrs)+len(attrs))
	copy(h2.attrs, h.attrs)
	var vals []byte
	for _, a := range attrs {
		h2.attrs, vals = appendAttr(h2.attrs, vals, h.prefix, a)
	}
	return &h2
}

// WithGroup returns a handler that prefixes later attribute keys with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix = h.prefix + name + "."
	return &h2
}

// scratch is the per-line working memory, pooled so that a line costs a
// few allocations at most.
type scratch struct {
	fields []field
	vals   []byte
	line   []byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{vals: make([]byte, 0, 512), line: make([]byte, 0, 512)} }}

// Handle writes one line.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	fields := append(s.fields[:0], h.attrs...)
	vals := s.vals[:0]
	r.Attrs(func(a slog.Attr) bool {
		fields, vals = appendAttr(fields, vals, h.prefix, a)
		return true
	})
	mark := len(vals)
	next := func(key string) { // the bytes since mark are key's value
		fields = append(fields, field{key: key, val: vals[mark:len(vals):len(vals)]})
		mark = len(vals)
	}
	vals = appendString(vals, levelName(r.Level))
	next("level")
	vals = appendString(vals, r.Message)
	next("msg")
	vals = appendTime(vals, r)
	next("timestamp")
	if pos := position(r.PC); pos != "" {
		vals = appendString(vals, pos)
		next("pos")
	}
	fields = sortDedup(fields)

	buf := append(s.line[:0], '{')
	for i, f := range fields {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, f.key)
		buf = append(buf, ':')
		buf = append(buf, f.val...)
	}
	buf = append(buf, '}', '\n')

	h.out.mu.Lock()
	_, err := h.out.w.Write(buf)
	h.out.mu.Unlock()

	// Keep the grown buffers, but not huge ones, and drop references.
	clear(fields)
	if cap(buf) <= 64<<10 && cap(vals) <= 64<<10 {
		s.fields, s.vals, s.line = fields[:0], vals[:0], buf[:0]
	} else {
		s.fields, s.vals, s.line = nil, nil, nil
	}
	return err
}

func levelName(l slog.Level) string {
	switch {
	case l >= LevelFatal:
		return "fatal"
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warning"
	default:
		return "info"
	}
}

// sortDedup sorts fields by key (insertion sort: lines have a dozen keys)
// and keeps the last value of a repeated key, so a record's own attribute
// overrides one from With, and the handler's level/msg/timestamp/pos
// override any user attribute of that name.
func sortDedup(fs []field) []field {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].key < fs[j-1].key; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
	out := fs[:0]
	for i, f := range fs {
		if i+1 < len(fs) && fs[i+1].key == f.key {
			continue // a later one wins; the sort is stable
		}
		out = append(out, f)
	}
	return out
}
