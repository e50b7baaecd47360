// Package procfs reads the few facts about processes that the launcher's
// tools need from /proc: one parser of /proc/<pid>/stat for all of them.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is the part of /proc/<pid>/stat that is used.
type Stat struct {
	PID, PPID int
	// Comm is the command name (at most 15 bytes; may hold spaces and
	// parentheses).
	Comm string
	// State is R, S, D, Z, ...
	State byte
	// StartTime is when the process started, in clock ticks after boot:
	// with the pid it names one process, never a later one that reuses the
	// pid. Zero when the line is too short to hold it.
	StartTime uint64
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks (zero when the line is too short).
	UTime, STime uint64
}

// ReadStat reads <procRoot>/<pid>/stat (procRoot is "/proc" but for tests).
func ReadStat(procRoot string, pid int) (Stat, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(pid, b)
}

// ParseStat parses one stat line. The comm field is in parentheses and may
// itself contain spaces and parentheses, so the fields after it are found
// from the last ')'.
func ParseStat(pid int, b []byte) (Stat, error) {
	malformed := errors.New("malformed stat of pid " + strconv.Itoa(pid))
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open || closing+4 > len(b) {
		return Stat{}, malformed
	}
	// Fields after comm: state(3) ppid(4) ... utime(14) stime(15) ...
	// starttime(22), numbered as in proc(5).
	rest := strings.Fields(string(b[closing+1:]))
	if len(rest) < 2 || len(rest[0]) != 1 {
		return Stat{}, malformed
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return Stat{}, fmt.Errorf("stat of pid %d: ppid: %w", pid, err)
	}
	s := Stat{PID: pid, PPID: ppid, Comm: string(b[open+1 : closing]), State: rest[0][0]}
	if len(rest) > 12 {
		if s.UTime, err = strconv.ParseUint(rest[11], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("stat of pid %d: utime: %w", pid, err)
		}
		if s.STime, err = strconv.ParseUint(rest[12], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("stat of pid %d: stime: %w", pid, err)
		}
	}
	if len(rest) > 19 {
		if s.StartTime, err = strconv.ParseUint(rest[19], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("stat of pid %d: starttime: %w", pid, err)
		}
	}
	return s, nil
}

// IsAncestor reports whether ancestor is pid itself or on pid's parent
// chain in procRoot, read now.
func IsAncestor(procRoot string, ancestor, pid int) bool {
	for n := 0; n < 256 && pid > 0; n++ {
		if pid == ancestor {
			return true
		}
		s, err := ReadStat(procRoot, pid)
		if err != nil {
			return false
		}
		pid = s.PPID
	}
	return false
}
