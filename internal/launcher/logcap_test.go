package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRotateLog: a log that an O_APPEND writer (QEMU) keeps open is moved
// to .0 once too large and truncated in place; the writer's next bytes land
// at the start of the emptied file.
func TestRotateLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "virt-serial0-log")
	w, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := bytes.Repeat([]byte("console line\n"), 100)
	if _, err := w.Write(first); err != nil {
		t.Fatal(err)
	}
	if rotated, err := rotateLog(path, int64(len(first))); err != nil || rotated {
		t.Fatalf("at the limit: rotated %v, %v; want no rotation", rotated, err)
	}
	if _, err := w.Write([]byte("one more\n")); err != nil {
		t.Fatal(err)
	}
	rotated, err := rotateLog(path, int64(len(first)))
	if err != nil || !rotated {
		t.Fatalf("over the limit: rotated %v, %v", rotated, err)
	}
	backup, err := os.ReadFile(path + ".0")
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, first...), "one more\n"...); !bytes.Equal(backup, want) {
		t.Fatalf("backup has %d bytes, want %d", len(backup), len(want))
	}
	if _, err := w.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "after\n" {
		t.Fatalf("log after rotation = %q, want %q", got, "after\n")
	}
	// A missing log (console logging off) is not an error.
	if rotated, err := rotateLog(path+"-none", 1); err != nil || rotated {
		t.Fatalf("missing log: %v %v", rotated, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 2 {
		t.Fatalf("files left: %v, want the log and its backup", ents)
	}
}
