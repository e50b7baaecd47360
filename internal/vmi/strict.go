package vmi

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
)

// Strict decoding.
//
// encoding/json (and sigs.k8s.io/json's strict mode) cannot be trusted to
// reject unknown fields in a VMI: VirtualMachineInstanceSpec, PodNetwork and
// DHCPOptions have their own UnmarshalJSON that calls the plain, lenient,
// case-insensitive encoding/json.Unmarshal, so anything below spec is decoded
// without any strictness. And errors from leaf unmarshalers (a Quantity that
// does not parse) carry no field path.
//
// So the document is first parsed into a small tree (which also catches
// duplicate keys), the tree is checked against the Go type by reflection
// (field names, value kinds, leaf unmarshalers), and only then is it decoded
// for real. Every problem names its field path.

// maxDepth bounds the nesting of the input; no VMI field is anywhere near it,
// and it keeps recursion on hostile input short.
const maxDepth = 128

// maxParseErrors caps how many field errors one document reports.
const maxParseErrors = 20

// object is a JSON object that remembers its key order, so errors come out in
// document order.
type object struct {
	keys []string
	vals map[string]any
}

// MarshalJSON writes the object back in its original key order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// parseTree parses one JSON value into object / []any / string / json.Number
// / bool / nil, rejecting duplicate keys and trailing data.
func parseTree(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the document")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fieldErr(path, "nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("unexpected end of document")
		}
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("invalid JSON: %w", err)
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("invalid JSON: object key %v is not a string", kt)
				}
				kp := joinField(path, k)
				if _, dup := o.vals[k]; dup {
					return nil, fieldErr(kp, "duplicate field")
				}
				v, err := parseValue(dec, kp, depth+1)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			return o, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := parseValue(dec, fmt.Sprintf("%s[%d]", path, len(arr)), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			return arr, nil
		default:
			return nil, fmt.Errorf("invalid JSON: unexpected %q", t)
		}
	default:
		return t, nil // string, json.Number, bool, nil
	}
}

func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// plainStructs have an UnmarshalJSON that only post-processes a plain
// decode (KubeVirt's IP/CIDR sanitizers); they are checked field by field
// like any struct, so their insides are strict too.
var plainStructs = map[reflect.Type]bool{
	reflect.TypeOf(v1.VirtualMachineInstanceSpec{}): true,
	reflect.TypeOf(v1.PodNetwork{}):                 true,
	reflect.TypeOf(v1.DHCPOptions{}):                true,
}

var (
	jsonUnmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textUnmarshalerType = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

// checker walks a tree against a Go type. It caches the JSON field table of
// each struct type for the duration of one Parse.
type checker struct {
	fields map[reflect.Type]map[string]reflect.Type
	errs   []error
	// lenient drops unknown fields from the tree (recording their paths in
	// ignored) instead of failing on them.
	lenient bool
	ignored []string
}

func newChecker() *checker {
	return &checker{fields: map[reflect.Type]map[string]reflect.Type{}}
}

func (c *checker) fail(path, format string, args ...any) {
	if len(c.errs) < maxParseErrors {
		c.errs = append(c.errs, fieldErr(path, format, args...))
	}
}

// check verifies that v can be decoded into a value of type t exactly, with
// no field dropped and no value coerced.
func (c *checker) check(path string, v any, t reflect.Type) {
	if len(c.errs) >= maxParseErrors {
		return
	}
	if v == nil {
		return // null is accepted (and ignored) for every Go type, like encoding/json
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == quantityType {
		c.checkQuantity(path, v)
		return
	}
	if !plainStructs[t] {
		pt := reflect.PointerTo(t)
		if pt.Implements(jsonUnmarshalerType) {
			c.checkUnmarshaler(path, v, t)
			return
		}
		if pt.Implements(textUnmarshalerType) {
			s, ok := v.(string)
			if !ok {
				c.fail(path, "wrong type: expected string, got %s", describe(v))
				return
			}
			if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
				c.fail(path, "invalid value %q: %v", s, err)
			}
			return
		}
	}
	switch t.Kind() {
	case reflect.Interface:
		return // any JSON value fits
	case reflect.Struct:
		o, ok := v.(*object)
		if !ok {
			c.fail(path, "wrong type: expected object, got %s", describe(v))
			return
		}
		fields := c.fieldsOf(t)
		kept := o.keys[:0:0]
		for _, k := range o.keys {
			ft, ok := fields[k]
			if !ok {
				if c.lenient {
					c.ignored = append(c.ignored, joinField(path, k))
					delete(o.vals, k)
					continue
				}
				c.fail(joinField(path, k), "unknown field")
				continue
			}
			kept = append(kept, k)
			c.check(joinField(path, k), o.vals[k], ft)
		}
		o.keys = kept
	case reflect.Map:
		o, ok := v.(*object)
		if !ok {
			c.fail(path, "wrong type: expected object, got %s", describe(v))
			return
		}
		if t.Key().Kind() != reflect.String {
			c.fail(path, "unsupported map key type %s", t.Key())
			return
		}
		for _, k := range o.keys {
			c.check(fmt.Sprintf("%s[%s]", path, k), o.vals[k], t.Elem())
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			s, ok := v.(string)
			if !ok {
				c.fail(path, "wrong type: expected base64 string, got %s", describe(v))
				return
			}
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				c.fail(path, "invalid base64: %v", err)
			}
			return
		}
		arr, ok := v.([]any)
		if !ok {
			c.fail(path, "wrong type: expected list, got %s", describe(v))
			return
		}
		for i, e := range arr {
			c.check(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
		}
	case reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			c.fail(path, "wrong type: expected list, got %s", describe(v))
			return
		}
		if len(arr) > t.Len() {
			c.fail(path, "too many items: %d, at most %d", len(arr), t.Len())
			return
		}
		for i, e := range arr {
			c.check(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
		}
	case reflect.String:
		switch v.(type) {
		case string:
		case bool, json.Number:
			// YAML 1.1 reads unquoted yes/no/on/off/y/n as booleans.
			c.fail(path, "wrong type: expected string, got %s (quote the value in YAML)", describe(v))
		default:
			c.fail(path, "wrong type: expected string, got %s", describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			c.fail(path, "wrong type: expected boolean, got %s", describe(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			c.fail(path, "wrong type: expected integer, got %s", describe(v))
			return
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			c.fail(path, "invalid value %s: want an integer that fits in %d bits", n, t.Bits())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, ok := v.(json.Number)
		if !ok {
			c.fail(path, "wrong type: expected integer, got %s", describe(v))
			return
		}
		if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err != nil {
			c.fail(path, "invalid value %s: want a non-negative integer that fits in %d bits", n, t.Bits())
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			c.fail(path, "wrong type: expected number, got %s", describe(v))
			return
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			c.fail(path, "invalid value %s: %v", n, err)
		}
	default:
		c.fail(path, "cannot decode into %s", t)
	}
}

// maxQuantityLength and maxQuantityExponent keep hostile quantities
// ("1e9000000000000000000") away from resource.Quantity, whose arbitrary
// precision arithmetic takes minutes or more on them. No real size or CPU
// count comes near 1e30.
const (
	maxQuantityLength   = 64
	maxQuantityExponent = 30
)

var quantityType = reflect.TypeOf(resource.Quantity{})

func (c *checker) checkQuantity(path string, v any) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = string(x)
	default:
		c.fail(path, "wrong type: expected a quantity such as 1Gi or 500m, got %s", describe(v))
		return
	}
	if len(s) > maxQuantityLength {
		c.fail(path, "quantity %q is longer than %d characters", truncate(s, 40), maxQuantityLength)
		return
	}
	// An "e"/"E" suffix followed by digits is a decimal exponent ("E" and
	// "Ei" alone are the exa suffixes).
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if rest := s[i+1:]; rest != "" && rest != "i" {
			exp, err := strconv.Atoi(rest)
			if len(strings.TrimLeft(rest, "+-")) > 3 || (err == nil && (exp > maxQuantityExponent || exp < -maxQuantityExponent)) {
				c.fail(path, "quantity %q: exponent beyond ±%d", s, maxQuantityExponent)
				return
			}
		}
	}
	if _, err := resource.ParseQuantity(s); err != nil {
		c.fail(path, "invalid value %q: %v", truncate(s, 40), err)
	}
}

// checkUnmarshaler runs a leaf type's own decoder (Quantity, IntOrString,
// Time ...) on the subtree, so that its complaint gets a path.
func (c *checker) checkUnmarshaler(path string, v any, t reflect.Type) {
	b, err := json.Marshal(v)
	if err != nil {
		c.fail(path, "cannot re-encode value: %v", err)
		return
	}
	if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b); err != nil {
		c.fail(path, "invalid value %s: %v", truncate(string(b), 80), err)
	}
}

// fieldsOf returns the JSON field table of struct type t, following
// encoding/json's rules: tag names, embedded structs without a tag name are
// flattened, and a shallower field hides a deeper one of the same name.
func (c *checker) fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := c.fields[t]; ok {
		return f
	}
	type cand struct {
		typ    reflect.Type
		depth  int
		tagged bool
		count  int
	}
	cands := map[string]*cand{}
	var walk func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			ft := sf.Type
			if sf.Anonymous {
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
				walk(ft, depth+1, seen)
				continue
			}
			tagged := name != ""
			if name == "" {
				name = sf.Name
			}
			old := cands[name]
			switch {
			case old == nil || depth < old.depth || (depth == old.depth && tagged && !old.tagged):
				cands[name] = &cand{typ: sf.Type, depth: depth, tagged: tagged, count: 1}
			case depth == old.depth && tagged == old.tagged:
				old.count++
			}
		}
	}
	walk(t, 0, map[reflect.Type]bool{})
	out := make(map[string]reflect.Type, len(cands))
	for name, cd := range cands {
		if cd.count == 1 { // ambiguous names are dropped, as encoding/json does
			out[name] = cd.typ
		}
	}
	c.fields[t] = out
	return out
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", truncate(x, 40))
	case json.Number:
		return "number " + string(x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case []any:
		return "list"
	case *object:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
