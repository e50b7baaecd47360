package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestStatusIDs(t *testing.T) {
	status := []byte("Name:\tqemu\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\nGid:\t2000\t2001\t2002\t2003\nGroups:\t36 2004 \nVmRSS:\t12 kB\n")
	uids, gids, err := statusIDs(status)
	if err != nil || !slices.Equal(uids, []uint32{1000, 1001, 1002, 1003}) || !slices.Equal(gids, []uint32{2000, 2001, 2002, 2003, 36, 2004}) {
		t.Errorf("got %v %v, %v", uids, gids, err)
	}
	if _, _, err := statusIDs([]byte("Uid:\t1\tx\n")); err == nil {
		t.Error("a malformed Uid line was accepted")
	}
	if _, _, err := statusIDs([]byte("State:\tZ (zombie)\nUid:\t5\t5\t5\t5\n")); !errors.Is(err, errZombie) {
		t.Errorf("zombie: %v", err)
	}
}

// TestHolding reads a fake /proc: the processes with the id anywhere in
// their user or group ids are found, the others (and zombies) are not.
func TestHolding(t *testing.T) {
	root := t.TempDir()
	for pid, s := range map[string]string{
		"7":  "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\n",
		"8":  "Uid:\t1\t1\t9\t1\nGid:\t1\t1\t1\t1\nGroups:\t6\n",
		"9":  "Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\n",
		"10": "Name:\tx\nState:\tZ (zombie)\nUid:\t5\t5\t5\t5\n",
		"no": "Uid:\t5\t5\t5\t5\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		id   uint32
		want []int
	}{
		{5, []int{7}}, {9, []int{8}}, {6, []int{7, 8}}, {4, nil},
	} {
		got, err := Holding(root, c.id)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Holding(%d) = %v, %v; want %v", c.id, got, err, c.want)
		}
	}
	if uids, _, err := IDs(root, 8); err != nil || !slices.Equal(uids, []uint32{1, 1, 9, 1}) {
		t.Errorf("IDs(8) = %v, %v", uids, err)
	}
}

// TestEnded: a process that ended while its files were read is told by
// ENOENT (the file is gone) or ESRCH (opened before, read after); other
// errors are failures.
func TestEnded(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&os.PathError{Op: "open", Path: "/proc/1/status", Err: syscall.ENOENT}, true},
		{&os.PathError{Op: "read", Path: "/proc/1/status", Err: syscall.ESRCH}, true},
		{fmt.Errorf("status: %w", syscall.ESRCH), true},
		{&os.PathError{Op: "open", Path: "/proc/1/status", Err: syscall.EACCES}, false},
		{errZombie, false},
	} {
		if got := ended(c.err); got != c.want {
			t.Errorf("ended(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
