package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Under lists the live processes (zombies left out) that belong to the
// directory dir: their command line names a path inside it, or their
// working directory is it or inside it. Every process of one launcher pod
// on a plain machine does (the monitor by its working directory and
// flags, the daemons by their config files, QEMU by its disks), and a
// fresh, randomly named dir is named by nobody else's. The Stat's
// StartTime lets the caller tell a pid reused since.
func Under(procRoot, dir string) ([]Stat, error) {
	dir = filepath.Clean(dir)
	needle := dir + "/"
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		base := filepath.Join(procRoot, e.Name())
		cmdline, err := os.ReadFile(filepath.Join(base, "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		cwd, _ := os.Readlink(filepath.Join(base, "cwd"))
		if !strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), needle) && cwd != dir && !strings.HasPrefix(cwd, needle) {
			continue
		}
		st, err := ReadStat(procRoot, pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}
