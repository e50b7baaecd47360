package runrecord

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	k8smeta "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

// recordJSON is a fully populated record as the flat Record struct (one
// object of 21 fields, before they were grouped) encoded it: every key,
// in the order of that struct's fields. Records are read by whichever
// vlctl is installed now, and written by any still running, older or
// newer, so this text must not change. (encoding/json writes ">" as
// \u003e: so did every vlctl.)
const recordJSON = `{` +
	`"name":"web",` +
	`"namespace":"prod",` +
	`"pid":4242,` +
	`"pidStart":987654321,` +
	`"workDir":"/run/vl/ab12",` +
	`"socket":"/run/vl/ab12/launcher.sock",` +
	`"console":"/run/vl/ab12/console.sock",` +
	`"control":"/run/vl/ab12/control.sock",` +
	`"addresses":[{"ip":"192.168.67.2","netns":"vlout-ab12"},{"ip":"10.0.2.2"}],` +
	`"published":["127.0.0.1:8080-\u003e80/tcp"],` +
	`"started":"2026-12-07T19:30:05.000000123Z",` +
	`"vmi":{"metadata":{"name":"web","namespace":"prod"},"spec":{"domain":{"resources":{},"devices":{}}},"status":{"guestOSInfo":{},"runtimeUser":0}},` +
	`"vm":{"metadata":{"name":"web","namespace":"prod"},"spec":{"runStrategy":"Always","template":null},"status":{}},` +
	`"netns":["vlpod-ab12","vlout-ab12"],` +
	`"grants":[{"path":"/home/u/disk.img","dev":2049,"ino":131,"before":"AQI=","after":"AQID"}],` +
	`"keep":true,` +
	`"uid":100042,` +
	`"launcherRoot":"/run/vl/9f00",` +
	`"emulation":true,` +
	`"images":{"registry.example/disk:1":"/var/cache/vl/sha256-aa","registry.example/kernel:2":"/var/cache/vl/sha256-bb"},` +
	`"volumes":{"rootdv":"/var/lib/vl/prod/web/rootdv.img"}` +
	`}`

func fullRecord() *Record {
	always := v1.RunStrategyAlways
	meta := k8smeta.ObjectMeta{Name: "web", Namespace: "prod"}
	return &Record{
		Name: "web", Namespace: "prod", WorkDir: "/run/vl/ab12",
		Started: time.Date(2026, 12, 7, 19, 30, 5, 123, time.UTC),
		VMI:     &v1.VirtualMachineInstance{ObjectMeta: meta},
		VM:      &v1.VirtualMachine{ObjectMeta: meta, Spec: v1.VirtualMachineSpec{RunStrategy: &always}},
		Process: Process{PID: 4242, PIDStart: 987654321},
		Sockets: Sockets{Socket: "/run/vl/ab12/launcher.sock", Console: "/run/vl/ab12/console.sock", Control: "/run/vl/ab12/control.sock"},
		Endpoints: Endpoints{
			Addresses: []Address{{IP: "192.168.67.2", NetNS: "vlout-ab12"}, {IP: "10.0.2.2"}},
			Published: []string{"127.0.0.1:8080->80/tcp"},
		},
		Cleanup: Cleanup{
			NetNS:  []string{"vlpod-ab12", "vlout-ab12"},
			Grants: []Grant{{Path: "/home/u/disk.img", Dev: 2049, Ino: 131, Before: []byte{1, 2}, After: []byte{1, 2, 3}}},
			Keep:   true,
			UID:    100042,
		},
		Takeover: Takeover{
			LauncherRoot: "/run/vl/9f00",
			Emulation:    true,
			Images:       map[string]string{"registry.example/disk:1": "/var/cache/vl/sha256-aa", "registry.example/kernel:2": "/var/cache/vl/sha256-bb"},
			Volumes:      map[string]string{"rootdv": "/var/lib/vl/prod/web/rootdv.img"},
		},
	}
}

// TestRecordJSON pins the record's on-disk encoding both ways: the
// grouped struct writes exactly the flat object, and reads it back whole.
func TestRecordJSON(t *testing.T) {
	rec := fullRecord()
	got, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != recordJSON {
		t.Errorf("record encodes as\n%s\nwant\n%s", got, recordJSON)
	}
	// Write stores the indented form; it must be the same object.
	indented, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Indent(&want, []byte(recordJSON), "", "  "); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(indented, want.Bytes()) {
		t.Errorf("record's indented encoding\n%s\nwant\n%s", indented, want.Bytes())
	}

	var back Record
	dec := json.NewDecoder(strings.NewReader(recordJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decode the flat record: %v", err)
	}
	if !reflect.DeepEqual(&back, rec) {
		t.Errorf("flat record decodes as\n%+v\nwant\n%+v", back, *rec)
	}

	// The keys left out when empty stay left out, the others stay.
	min, err := json.Marshal(&Record{Name: "web", Namespace: "prod", Process: Process{PID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const minJSON = `{"name":"web","namespace":"prod","pid":1,"pidStart":0,"workDir":"","socket":"","console":"","started":"0001-01-01T00:00:00Z","vmi":null}`
	if string(min) != minJSON {
		t.Errorf("empty record encodes as\n%s\nwant\n%s", min, minJSON)
	}
}
