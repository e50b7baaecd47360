package userstorage

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestStoreInUse: a store volume a live run's record names is refused,
// naming the volume, the run and its pid; a stale run's is not.
func TestStoreInUse(t *testing.T) {
	testenv.Root(t, "run records live in a directory of root's")
	dir := filepath.Join(t.TempDir(), "records")
	pid, start, err := runrecord.Self()
	if err != nil {
		t.Fatal(err)
	}
	vol := "/var/lib/vl/default/vm1/rootdv.img"
	rec := &runrecord.Record{Name: "vm1", Namespace: "default", Process: runrecord.Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/abcd",
		Takeover: runrecord.Takeover{Volumes: map[string]string{"rootdv": vol}}}
	if _, err := runrecord.Write(dir, rec); err != nil {
		t.Fatal(err)
	}
	paths := storedPaths([]VolumeMap{{Name: "rootdv", Path: vol, stored: true}, {Name: "mine", Path: "/srv/x.img"}})
	err = storeInUse(dir, paths)
	if want := "DataVolume rootdv: its volume " + vol + " is in use by the run of default/vm1 (pid "; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a volume a live run uses: %v; want %q", err, want)
	}
	if err := storeInUse(dir, storedPaths([]VolumeMap{{Name: "other", Path: "/var/lib/vl/default/vm2/rootdv.img", stored: true}})); err != nil {
		t.Errorf("a volume no run uses: %v", err)
	}
	rec.PIDStart++ // another process now: the run is gone
	rec.WorkDir = "/run/vl/abce"
	stale := filepath.Join(t.TempDir(), "stale")
	if _, err := runrecord.Write(stale, rec); err != nil {
		t.Fatal(err)
	}
	if err := storeInUse(stale, paths); err != nil {
		t.Errorf("a stale run's volume: %v", err)
	}
}
