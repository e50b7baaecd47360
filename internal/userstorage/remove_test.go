package userstorage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestRemoveVolumes: vlctl rm --volumes removes the VM's directory of
// the store and its files, and the namespace's directory once empty,
// leaving other VMs' volumes; it refuses while a live run uses a volume
// or an import into the directory holds its lock, removing nothing, and
// refuses names that are not names (no path leads out of the store).
func TestRemoveVolumes(t *testing.T) {
	testenv.Root(t, "the volume store is root's")
	tmp := t.TempDir()
	store, records := filepath.Join(tmp, "store"), filepath.Join(tmp, "records")
	put := func(rel string) string {
		p := filepath.Join(store, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("disk"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vol := put("default/vm1/rootdv.img")
	temp := put("default/vm1/.datadv.img.import-0123456789abcdef")
	other := put("default/vm2/rootdv.img")
	elsewhere := put("team/vm1/rootdv.img")

	if nss, err := StoreNamespaces(store, "vm1"); err != nil || !slices.Equal(nss, []string{"default", "team"}) {
		t.Errorf("StoreNamespaces(vm1): %v, %v", nss, err)
	}
	for _, bad := range [][2]string{{"default", "../vm2"}, {"..", "vm1"}, {"default", "vm1/../vm2"}} {
		if _, err := RemoveVolumes(store, records, bad[0], bad[1]); err == nil {
			t.Errorf("RemoveVolumes(%q, %q) accepted", bad[0], bad[1])
		}
	}

	// An import going on holds its file's lock.
	f, err := os.Open(temp)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveVolumes(store, records, "default", "vm1"); err == nil || !strings.Contains(err.Error(), "an import into it goes on") {
		t.Errorf("an import going on: %v", err)
	}
	f.Close()
	if _, err := os.Stat(temp); err != nil {
		t.Errorf("the import's file went: %v", err)
	}

	// A live run uses the volume.
	pid, start, err := runrecord.Self()
	if err != nil {
		t.Fatal(err)
	}
	rec := &runrecord.Record{Name: "vm1", Namespace: "default", Process: runrecord.Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/abcd",
		Takeover: runrecord.Takeover{Volumes: map[string]string{"rootdv": vol}}}
	path, err := runrecord.Write(records, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveVolumes(store, records, "default", "vm1"); err == nil || !strings.Contains(err.Error(), "in use by the run of default/vm1") {
		t.Errorf("a volume a live run uses: %v", err)
	}
	if _, err := os.Stat(vol); err != nil {
		t.Errorf("the volume in use went: %v", err)
	}
	runrecord.Remove(path)

	removed, err := RemoveVolumes(store, records, "default", "vm1")
	if err != nil || !slices.Equal(removed, []string{temp, vol}) {
		t.Errorf("RemoveVolumes: %v, %v; want %v", removed, err, []string{temp, vol})
	}
	if _, err := os.Stat(filepath.Dir(vol)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the VM's directory is left: %v", err)
	}
	for _, p := range []string{other, elsewhere} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("another VM's volume %s went: %v", p, err)
		}
	}
	if removed, err := RemoveVolumes(store, records, "default", "vm1"); err != nil || len(removed) != 0 {
		t.Errorf("RemoveVolumes again: %v, %v", removed, err)
	}
	if _, err := RemoveVolumes(store, records, "team", "vm1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(store, "team")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the namespace's empty directory is left: %v", err)
	}
}
