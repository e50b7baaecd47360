package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// WithID lists the processes of procRoot that hold id as any of their
// user ids (real, effective, saved, file system) or, when gid is set, any
// of their group ids, supplementary groups included. Zombies are left out
// (they hold nothing but their exit status; where PID 1 does not reap
// orphans they stay for good), and so is a process that ends while it is
// read.
func WithID(procRoot string, id uint32, gid bool) ([]int, error) {
	names, err := pids(procRoot)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range names {
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("\nState:\tZ")) {
			continue
		}
		ids, err := statusIDs(b, gid)
		if err != nil {
			return nil, fmt.Errorf("%s/%d/status: %w", procRoot, pid, err)
		}
		for _, v := range ids {
			if v == id {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

// statusIDs picks the ids of a /proc/<pid>/status: the Uid line's four, or
// the Gid line's four and the Groups line's.
func statusIDs(status []byte, gid bool) ([]uint32, error) {
	keys := [][]byte{[]byte("Uid:")}
	if gid {
		keys = [][]byte{[]byte("Gid:"), []byte("Groups:")}
	}
	var ids []uint32
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		for _, k := range keys {
			if !bytes.HasPrefix(line, k) {
				continue
			}
			for _, f := range bytes.Fields(line[len(k):]) {
				v, err := strconv.ParseUint(string(f), 10, 32)
				if err != nil {
					return nil, fmt.Errorf("%s %q", k, f)
				}
				ids = append(ids, uint32(v))
			}
		}
	}
	return ids, sc.Err()
}
