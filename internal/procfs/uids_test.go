package procfs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStatusIDs(t *testing.T) {
	status := []byte("Name:\tqemu\nUid:\t1000\t1001\t1002\t1003\nGid:\t2000\t2001\t2002\t2003\nGroups:\t36 2004 \nVmRSS:\t12 kB\n")
	for _, c := range []struct {
		gid  bool
		want []uint32
	}{
		{false, []uint32{1000, 1001, 1002, 1003}},
		{true, []uint32{2000, 2001, 2002, 2003, 36, 2004}},
	} {
		got, err := statusIDs(status, c.gid)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("gid %v: got %v, %v; want %v", c.gid, got, err, c.want)
		}
	}
	if _, err := statusIDs([]byte("Uid:\t1\tx\n"), false); err == nil {
		t.Error("a malformed Uid line was accepted")
	}
}

// TestWithID reads a fake /proc: the process with the id anywhere in its
// ids is found, the others are not.
func TestWithID(t *testing.T) {
	root := t.TempDir()
	for pid, s := range map[string]string{
		"7":  "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\n",
		"8":  "Uid:\t1\t1\t9\t1\nGid:\t1\t1\t1\t1\nGroups:\t6\n",
		"9":  "Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\nGroups:\n",
		"no": "Uid:\t5\t5\t5\t5\n",
		"10": "Name:\tx\nState:\tZ (zombie)\nUid:\t5\t5\t5\t5\n",
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
		gid  bool
		want []int
	}{
		{5, false, []int{7}}, {9, false, []int{8}}, {6, true, []int{7, 8}}, {4, false, nil},
	} {
		got, err := WithID(root, c.id, c.gid)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("WithID(%d, gid %v) = %v, %v; want %v", c.id, c.gid, got, err, c.want)
		}
	}
}
