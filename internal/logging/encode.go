package logging

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TimeFormat is KubeVirt's log timestamp layout (always UTC).
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// appendTime appends the record's time as a JSON string.
func appendTime(b []byte, r slog.Record) []byte {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"')
}

// position is "file.go:line" of the record's caller, or "" without a PC.
func position(pc uintptr) string {
	if pc == 0 {
		return ""
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	if f.File == "" {
		return ""
	}
	file := f.File
	if i := strings.LastIndexByte(file, '/'); i >= 0 {
		file = file[i+1:]
	}
	return file + ":" + strconv.Itoa(f.Line)
}

// isReasonKey reports whether an attribute key names the line's error.
func isReasonKey(k string) bool { return k == "reason" || k == "err" || k == "error" }

// appendAttr encodes a (resolving LogValuers, flattening groups) onto fs,
// writing the encoded values into vals. A field's val slices vals; when a
// later append moves vals, earlier slices still see their bytes in the old
// array, so they stay valid.
func appendAttr(fs []field, vals []byte, prefix string, a slog.Attr) ([]field, []byte) {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return fs, vals // slog's rule: empty attributes are ignored
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p = prefix + a.Key + "."
		}
		for _, g := range v.Group() {
			fs, vals = appendAttr(fs, vals, p, g)
		}
		return fs, vals
	}
	key := prefix + a.Key
	if prefix == "" {
		if isReasonKey(a.Key) {
			key = "reason"
		} else if v.Kind() == slog.KindAny {
			if _, ok := v.Any().(error); ok {
				key = "reason"
			}
		}
	}
	start := len(vals)
	vals = appendValue(vals, v)
	return append(fs, field{key: key, val: vals[start:len(vals):len(vals)]}), vals
}

func appendValue(b []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		f := v.Float64()
		if math.IsNaN(f) || math.IsInf(f, 0) { // not representable in JSON
			return appendString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		return appendString(b, v.Duration().String())
	case slog.KindTime:
		return appendString(b, v.Time().UTC().Format(TimeFormat))
	}
	switch x := v.Any().(type) {
	case nil:
		return append(b, "null"...)
	case error:
		return appendString(b, x.Error())
	case fmt.Stringer:
		return appendString(b, x.String())
	case []byte:
		return appendString(b, string(x))
	}
	// The slow path, for structured values only.
	js, err := json.Marshal(v.Any())
	if err != nil {
		return appendString(b, fmt.Sprintf("%+v", v.Any()))
	}
	return append(b, js...)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD;
// <, > and & are left alone (these lines are not embedded in HTML).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
