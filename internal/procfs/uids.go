package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// errZombie: the process has exited and holds nothing but its status.
var errZombie = errors.New("zombie")

// IDs reads the user ids (real, effective, saved, file system) and group
// ids (the same four, then the supplementary groups) of process pid. A
// zombie is an error: it holds nothing but its exit status (and where PID
// 1 does not reap orphans it stays for good).
func IDs(procRoot string, pid int) (uids, gids []uint32, err error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, nil, err
	}
	uids, gids, err = statusIDs(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s/%d/status: %w", procRoot, pid, err)
	}
	return uids, gids, nil
}

// Holding lists the processes of procRoot that hold id as any of their
// user or group ids, supplementary groups included; zombies and processes
// that end while they are read are left out.
func Holding(procRoot string, id uint32) ([]int, error) {
	names, err := pids(procRoot)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range names {
		uids, gids, err := IDs(procRoot, pid)
		if errors.Is(err, errZombie) || ended(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(uids, id) || slices.Contains(gids, id) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// statusIDs picks the ids of a /proc/<pid>/status: the Uid line's four,
// and the Gid line's four and the Groups line's.
func statusIDs(status []byte) (uids, gids []uint32, err error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("State:\tZ")) {
			return nil, nil, errZombie
		}
		into := &gids
		switch {
		case bytes.HasPrefix(line, []byte("Uid:")):
			into = &uids
		case bytes.HasPrefix(line, []byte("Gid:")), bytes.HasPrefix(line, []byte("Groups:")):
		default:
			continue
		}
		_, rest, _ := bytes.Cut(line, []byte(":"))
		for _, f := range bytes.Fields(rest) {
			v, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("%q", line)
			}
			*into = append(*into, uint32(v))
		}
	}
	return uids, gids, sc.Err()
}

// ended says whether err, from reading a file of /proc/<pid>, means the
// process ended meanwhile: the file is gone (ENOENT), or it was opened
// while the process ran and read after it ended (ESRCH). vlctl run's
// clean-up took the second for a failure once: it kept the VM's uid lease
// and its run record, and exited 1 ("read /proc/13147/status: no such
// process"), and a later run's gc then found that record.
func ended(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
