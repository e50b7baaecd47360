package vmi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
)

// FuzzLoad feeds arbitrary bytes to the loader. Seeds live in
// testdata/fuzz/FuzzLoad (KubeVirt's example manifests and broken inputs).
// Beyond "never panics" it checks what callers rely on: a loaded VMI is
// valid, re-defaulting changes nothing, and its JSON (what virt-handler
// would send back) parses again.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(minimalVMI))
	f.Add([]byte(validBase))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A hang is a bug too (resource.Quantity can spin for minutes on a
		// hostile exponent). Panicking from the timer kills the worker, so
		// the fuzzer saves the input.
		tm := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("input took over 10s: %q", data)) })
		defer tm.Stop()
		// Parse and Validate alone, on a VMI nobody defaulted.
		if parsed, err := Parse(data); err == nil {
			_ = Validate(parsed)
		}
		if parsed, _, err := ParseLenient(data); err == nil {
			SetDefaults(parsed, Options{})
			_ = Validate(parsed)
		}
		for _, o := range []Options{{}, {Arch: "arm64", DefaultBinding: BindingBridge}, {Arch: "s390x"}} {
			vmi, err := Load(data, o)
			if err != nil {
				continue
			}
			if err := Validate(vmi); err != nil {
				t.Fatalf("loaded VMI fails validation: %v", err)
			}
			again := vmi.DeepCopy()
			SetDefaults(again, o)
			if !equality.Semantic.DeepEqual(vmi, again) {
				t.Fatalf("SetDefaults not idempotent (options %+v)", o)
			}
			js, err := json.Marshal(vmi)
			if err != nil {
				t.Fatalf("marshal loaded VMI: %v", err)
			}
			if _, err := Parse(js); err != nil {
				t.Fatalf("JSON of a loaded VMI does not parse: %v\n%s", err, js)
			}
		}
	})
}

// FuzzDefaultsValidate builds VMIs field by field from the fuzzer's bytes
// (by reflection over the API types, with strings drawn from a small
// dictionary so names match and enums hit their cases) and runs SetDefaults
// and Validate on them. Byte-level fuzzing of YAML rarely gets this deep.
func FuzzDefaultsValidate(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("VMI with a lot of bytes to spend on fields, so pointers get set and lists get items"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vmi := &v1.VirtualMachineInstance{}
		g := &gen{data: data}
		g.fill(reflect.ValueOf(vmi).Elem(), 0)
		for _, o := range []Options{{}, {Arch: "arm64"}, {Arch: "s390x", DefaultBinding: BindingBridge}} {
			c := vmi.DeepCopy()
			_ = Validate(c) // undefaulted
			SetDefaults(c, o)
			err := Validate(c)
			again := c.DeepCopy()
			SetDefaults(again, o)
			if !equality.Semantic.DeepEqual(c, again) {
				t.Fatalf("SetDefaults not idempotent (options %+v)", o)
			}
			for _, fe := range FieldErrors(err) {
				if fe.Path == "" {
					t.Fatalf("error without a path: %v", fe)
				}
			}
		}
	})
}

// gen turns fuzzer bytes into values.
type gen struct {
	data []byte
	pos  int
}

func (g *gen) byte() byte {
	if g.pos >= len(g.data) {
		return 0
	}
	b := g.data[g.pos]
	g.pos++
	return b
}

var genStrings = []string{
	"", "a", "b", "default", "virtio", "sata", "scsi", "usb", "ide", "1Gi", "2Mi", "1Gi", "TCP", "UDP", "SCTP",
	"amd64", "arm64", "s390x", "q35", "virt", "host-model", "Disk", "DiskOrCreate", "/var/data/disk.img", "../x",
	"02:00:00:00:00:00", "0000:00:1f.0", "open", "closed", "none", "native", "stop", "absent", "require",
	"tablet", "keyboard", "Always", "img:latest", "A_B", "x/y", "1e30",
}

var genQuantities = []string{"0", "1", "100m", "1500m", "2", "128Mi", "1Gi", "1024M", "2Gi", "-1", "16Ti", "17Ti", "9e30", "1Ei"}

var quantityValueType = reflect.TypeOf(resource.Quantity{})

func (g *gen) fill(v reflect.Value, depth int) {
	if depth > 10 || g.pos >= len(g.data) {
		return
	}
	if v.Type() == quantityValueType {
		v.Set(reflect.ValueOf(resource.MustParse(genQuantities[int(g.byte())%len(genQuantities)])))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if g.byte()%2 == 1 {
			v.Set(reflect.New(v.Type().Elem()))
			g.fill(v.Elem(), depth+1)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		n := int(g.byte() % 4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			g.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		n := int(g.byte() % 3)
		m := reflect.MakeMap(v.Type())
		for i := 0; i < n; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			g.fill(k, depth+1)
			g.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString(genStrings[int(g.byte())%len(genStrings)])
	case reflect.Bool:
		v.SetBool(g.byte()%2 == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b := g.byte()
		switch b % 4 {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(int64(int8(g.byte())))
		case 2:
			v.SetInt(1 << (v.Type().Bits() - 1)) // min
		default:
			v.SetInt(int64(b))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b := g.byte()
		switch b % 4 {
		case 0:
			v.SetUint(0)
		case 1:
			v.SetUint(uint64(g.byte()))
		case 2:
			v.SetUint(1<<v.Type().Bits() - 1) // max
		default:
			v.SetUint(uint64(b) * 7)
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(g.byte()))
	}
}
