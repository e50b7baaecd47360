package procfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Thread is one thread of a process: its id, name (comm) and the CPUs the
// kernel lets it run on (Cpus_allowed_list of its status, the affinity
// within its cpuset).
type Thread struct {
	TID     int
	Comm    string
	Allowed string
}

// Threads lists the threads of process pid; threads that end while they
// are read are left out.
func Threads(procRoot string, pid int) ([]Thread, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err1 := os.ReadFile(filepath.Join(dir, e.Name(), "comm"))
		status, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err := errors.Join(err1, err2); err != nil {
			if ended(err) {
				continue
			}
			return nil, err
		}
		out = append(out, Thread{TID: tid, Comm: strings.TrimSpace(string(comm)), Allowed: statusField(status, "Cpus_allowed_list")})
	}
	return out, nil
}

// statusField is the value of one "Name:\tvalue" line of a status file.
func statusField(status []byte, name string) string {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(name+":")); ok {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}
