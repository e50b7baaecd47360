package vmi

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
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
