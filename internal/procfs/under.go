package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Under lists the live processes (zombies left out) that belong to the
// directory dir: an argument on their command line is dir, ends in "="+dir
// (a flag's value) or names a path inside it, or their working directory
// is dir or inside it. Every process of one launcher pod on a plain machine
// does (the monitor by its working directory and flags, the daemons by
// their config files, QEMU by its disks), and a fresh, randomly named dir
// is named by nobody else's. The Stat's StartTime lets the caller tell a
// pid reused since. This process is left out.
func Under(procRoot, dir string) ([]Stat, error) {
	dir = filepath.Clean(dir)
	all, err := pids(procRoot)
	if err != nil {
		return nil, err
	}
	var out []Stat
	for _, pid := range all {
		if pid == os.Getpid() {
			continue
		}
		args, err := Cmdline(procRoot, pid)
		if err != nil {
			continue // gone meanwhile
		}
		cwd, _ := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "cwd"))
		if !names(args, dir) && !inside(cwd, dir) {
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

// names reports whether an argument names dir or a path inside it.
func names(args []string, dir string) bool {
	for _, a := range args {
		if a == dir || strings.HasSuffix(a, "="+dir) || strings.Contains(a, dir+"/") {
			return true
		}
	}
	return false
}

// inside reports whether path is dir or below it.
func inside(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
