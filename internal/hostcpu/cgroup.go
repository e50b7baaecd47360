package hostcpu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is a cpuset cgroup of our own making that confines a process
// tree to some host CPUs: what a Kubernetes CPU manager does for a pod with
// dedicated CPUs, for a launcher that runs outside a cluster (vlctl run,
// the tests). It is made next to the caller's own cpuset group (at the
// root on cgroup v2) and removed by Remove; nothing else is changed.
type Cgroup struct {
	Dir string // the group's directory
	v2  bool
}

// NewCgroup makes a cpuset group named prefix plus a random suffix with
// cpus (and the memory nodes of its parent).
func NewCgroup(prefix string, cpus []uint) (*Cgroup, error) {
	if len(cpus) == 0 {
		return nil, errors.New("no CPUs for the cgroup")
	}
	parent, v2, err := cpusetParent()
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, err
	}
	cg := &Cgroup{Dir: filepath.Join(parent, prefix+hex.EncodeToString(suffix)), v2: v2}
	if err := os.Mkdir(cg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	mems := "cpuset.mems"
	if v2 {
		mems = "cpuset.mems.effective"
	}
	err = cg.copyFrom(parent, mems, "cpuset.mems")
	if err == nil {
		err = cg.write("cpuset.cpus", FormatList(cpus))
	}
	if err != nil {
		os.Remove(cg.Dir)
		return nil, err
	}
	return cg, nil
}

// cpusetParent is where our groups go: the root of a unified hierarchy
// whose root hands the cpuset controller down, else this process's group in
// the v1 cpuset hierarchy.
func cpusetParent() (dir string, v2 bool, err error) {
	const unified = "/sys/fs/cgroup"
	if b, err := os.ReadFile(filepath.Join(unified, "cgroup.subtree_control")); err == nil {
		if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpuset ") {
			return "", false, fmt.Errorf("%s: the cpuset controller is not enabled for child groups (%s/cgroup.subtree_control)", unified, unified)
		}
		return unified, true, nil
	}
	groups, err := Sys{Root: "/"}.cgroups("self")
	if err != nil {
		return "", false, err
	}
	g, ok := groups["cpuset"]
	if !ok {
		return "", false, errors.New("no cgroup v2 hierarchy with cpuset and no v1 cpuset hierarchy")
	}
	dir = filepath.Join(unified, "cpuset", g)
	if _, err := os.Stat(filepath.Join(dir, "cpuset.cpus")); err != nil {
		return "", false, fmt.Errorf("the v1 cpuset group of this process: %w", err)
	}
	return dir, false, nil
}

func (cg *Cgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(cg.Dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: %w", file, err)
	}
	return nil
}

func (cg *Cgroup) copyFrom(parent, from, to string) error {
	b, err := os.ReadFile(filepath.Join(parent, from))
	if err != nil {
		return err
	}
	return cg.write(to, strings.TrimSpace(string(b)))
}

// Place puts cmd, when it starts, into the group. On cgroup v2 the clone
// itself does (CLONE_INTO_CGROUP), so nothing else moves. On v1 the
// returned step, run on the thread that starts cmd (internal/pod's enter
// steps), moves that thread alone in first, and done, which the caller
// calls once cmd has started, moves it back to the parent group: the
// child has inherited the group by then, and the thread (perhaps the main
// thread, which the runtime never ends) must not keep it in use.
func (cg *Cgroup) Place(cmd *exec.Cmd) (enter func() error, done func() error, err error) {
	if !cg.v2 {
		tid := 0
		enter = func() error {
			tid = unix.Gettid()
			return cg.write("tasks", strconv.Itoa(tid))
		}
		done = func() error {
			if tid == 0 {
				return nil
			}
			return os.WriteFile(filepath.Join(filepath.Dir(cg.Dir), "tasks"), []byte(strconv.Itoa(tid)), 0o644)
		}
		return enter, done, nil
	}
	fd, err := unix.Open(cg.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open cgroup: %w", err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	return nil, func() error { return unix.Close(fd) }, nil
}

// Remove removes the group once the processes in it have ended, waiting
// for them until ctx ends.
func (cg *Cgroup) Remove(ctx context.Context) error {
	for {
		err := unix.Rmdir(cg.Dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", cg.Dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove cgroup %s: still in use: %w", cg.Dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
