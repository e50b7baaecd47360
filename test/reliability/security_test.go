package reliability

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// checkSecurity checks a running pod: the QEMU sandbox is on, no process
// of the pod runs as root, none listens on a TCP or UDP port, and every
// socket and private directory the launcher made is owner-only.
func checkSecurity(t *testing.T, p *pod, qpid int) {
	procs := p.Descendants()
	names := map[string]bool{}
	for _, d := range procs {
		names[d.Comm] = true
	}
	// virtlogd runs only with --virtlogd (off by default: QEMU writes its
	// logs itself, one libvirt process fewer per pod).
	if !names["virt-launcher"] {
		t.Errorf("no virt-launcher under the monitor: %v", procs)
	}
	if !names["libvirtd"] && !names["virtqemud"] {
		t.Errorf("no libvirt daemon under the monitor: %v", procs)
	}

	// The sandbox.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", qpid))
	launchertest.Must(t, err)
	args := strings.Split(string(cmdline), "\x00")
	sandbox := ""
	for i, a := range args {
		if a == "-sandbox" && i+1 < len(args) {
			sandbox = args[i+1]
		}
	}
	if !strings.HasPrefix(sandbox, "on") {
		t.Errorf("QEMU runs without -sandbox on (got %q)", sandbox)
	}

	// Non-root: the monitor itself and every descendant.
	all := append([]launchertest.Proc{{PID: p.Cmd.Process.Pid, Comm: "virt-launcher-monitor"}}, procs...)
	for _, d := range all {
		uids, gids := idLine(d.PID, "Uid:"), idLine(d.PID, "Gid:")
		for _, id := range append(uids, gids...) {
			if id == "0" {
				t.Errorf("%s runs with root ids: Uid %v Gid %v", d, uids, gids)
				break
			}
		}
	}

	// No TCP or UDP socket of any process of the pod.
	inodes := map[string]string{}
	for _, d := range all {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.PID))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.PID, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = d.String()
			}
		}
	}
	if len(inodes) == 0 {
		t.Errorf("no sockets found at all: the check cannot work")
	}
	checked := 0
	for _, d := range all {
		for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
			for _, e := range netEntries(fmt.Sprintf("/proc/%d/net/%s", d.PID, f)) {
				checked++
				if owner, ok := inodes[e.inode]; ok {
					t.Errorf("%s has a %s socket %s (state %s)", owner, f, e.local, e.state)
				}
			}
		}
	}

	// Modes. Two levels: (1) no socket and no private directory can be
	// reached by another user (one outside the owner and its group, which
	// must be the launcher user's own); (2) what virtlauncher itself
	// creates (not libvirt or QEMU) is owner-only.
	checkOwnGroup(t)
	strict := map[string]bool{p.Layout.PrivateDir: true, p.Layout.LibvirtRunDir: true, p.Layout.SocketsDir(): true,
		p.Layout.VMIPrivateDir(p.UID): true, p.Layout.ReadySocket(): true,
		filepath.Join(p.Layout.LibvirtRunDir, "empty-disks"): true}
	var sockets, dirs int
	var notOwnerOnly []string
	filepath.Walk(p.Dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		mode := fi.Mode()
		isSock := mode&os.ModeSocket != 0
		if !isSock && !(fi.IsDir() && isPrivateDir(p, path)) {
			return nil
		}
		if isSock {
			sockets++
		} else {
			dirs++
		}
		if reachableByOthers(p.Dir, path, isSock) {
			t.Errorf("%s (mode %v) can be reached by any user", path, mode.Perm())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != env.Cred.Uid {
			t.Errorf("%s is owned by uid %d, not the launcher's %d", path, st.Uid, env.Cred.Uid)
		}
		if strict[path] && mode.Perm()&0o077 != 0 {
			notOwnerOnly = append(notOwnerOnly, fmt.Sprintf("%s %v", path, mode.Perm()))
		}
		return nil
	})
	if sockets < 3 {
		t.Errorf("only %d sockets found in the pod directory", sockets)
	}
	t.Logf("security: %d processes non-root, sandbox %q, %d socket inodes vs %d TCP/UDP entries, %d sockets and %d private dirs unreachable by others",
		len(all), sandbox, len(inodes), checked, sockets, dirs)
	if len(notOwnerOnly) > 0 {
		t.Errorf("not owner-only (the launcher makes these 0700: makeDirs, VMIPrivateDir): %s", strings.Join(notOwnerOnly, "; "))
	}
}

// reachableByOthers: a user outside the owner and group could reach path:
// every directory from root down lets others search it, and a socket lets
// them write (connect) or a directory lets them read or write.
func reachableByOthers(root, path string, isSock bool) bool {
	fi, err := os.Lstat(path)
	if err != nil {
		return false
	}
	if isSock && fi.Mode().Perm()&0o002 == 0 {
		return false
	}
	if !isSock && fi.Mode().Perm()&0o007 == 0 {
		return false
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		di, err := os.Stat(d)
		if err != nil || di.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == root || d == "/" {
			return true
		}
	}
}

// checkOwnGroup: the launcher user's group is its own (no other member,
// no other user's primary group), so group permission is owner-only in
// effect.
func checkOwnGroup(t *testing.T) {
	gid := strconv.Itoa(int(env.Cred.Gid))
	uid := strconv.Itoa(int(env.Cred.Uid))
	if b, err := os.ReadFile("/etc/group"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) == 4 && f[2] == gid && f[3] != "" && f[3] != "virtlauncher" {
				t.Errorf("group %s of the launcher user has other members: %s", f[0], f[3])
			}
		}
	}
	if b, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) > 3 && f[3] == gid && f[2] != uid {
				t.Errorf("user %s has the launcher's group %s as primary group", f[0], gid)
			}
		}
	}
}

// isPrivateDir: the directories that hold the launcher's private state:
// the private dir, the libvirt run dir, the command sockets' directory.
func isPrivateDir(p *pod, path string) bool {
	for _, root := range []string{p.Layout.PrivateDir, p.Layout.LibvirtRunDir, p.Layout.SocketsDir()} {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

func idLine(pid int, key string) []string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), key) {
			return strings.Fields(strings.TrimPrefix(sc.Text(), key))
		}
	}
	return nil
}

type netEntry struct{ local, state, inode string }

func netEntries(path string) []netEntry {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netEntry
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 {
			continue
		}
		out = append(out, netEntry{local: f[1], state: f[3], inode: f[9]})
	}
	return out
}

// TestLayoutPathsStayInside: every Layout path built from a (validated)
// name stays inside its directory, and CheckName refuses what could leave
// it.
func TestLayoutPathsStayInside(t *testing.T) {
	l := layout.Under("/w")
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "/abs", "x\x00y"} {
		if layout.CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
	inside := func(what, path, dir string) {
		t.Helper()
		if !strings.HasPrefix(filepath.Clean(path), dir+"/") {
			t.Errorf("%s = %s, outside %s", what, path, dir)
		}
	}
	for _, name := range []string{"root", "a-b", "x0"} {
		inside("DiskOverlay", l.DiskOverlay(name), l.EphemeralDiskDir+"/disk-data/"+name)
		inside("EmptyDisk", l.EmptyDisk(name), l.LibvirtRunDir+"/empty-disks")
		inside("PVCDisk", l.PVCDisk(name), l.PrivateDir+"/vmi-disks/"+name)
		inside("ConfigMapISO", l.ConfigMapISO(name), l.PrivateDir+"/config-map-disks")
		inside("HotplugFile", l.HotplugFile(name), l.HotplugDiskDir)
	}
	// hostDisk paths are user input in full; only their base name is used.
	for _, path := range []string{"/var/tmp/disk.img", "../../etc/shadow", "/a/../../b"} {
		got, err := l.HostDisk("vol", path)
		if err != nil {
			t.Errorf("HostDisk(vol, %q): %v", path, err)
			continue
		}
		inside(fmt.Sprintf("HostDisk(vol, %q)", path), got, l.PrivateDir+"/vmi-disks/vol")
	}
	for _, path := range []string{"", "..", "/", ".", "/a/.."} {
		if got, err := l.HostDisk("vol", path); err == nil {
			t.Errorf("HostDisk(vol, %q) = %s, want an error", path, got)
		}
	}
}

// TestReapOrphansEndToEnd: the real monitor binary, with a launcher (a
// shell script) that orphans 1,000 children at once: the monitor is their
// subreaper and reaps every one; none is left, zombie or alive. The unit
// variant with the fake launcher is internal/monitor TestReapOrphans.
func TestReapOrphansEndToEnd(t *testing.T) {
	env.NeedBinaries(t)
	t.Parallel()
	n := 1000
	if soak() {
		n = 10000
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "launcher.sh")
	launchertest.Must(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
i=0
while [ $i -lt %d ]; do
	( /bin/sleep 0.2 & )
	i=$((i+1))
done
: > %s/spawned
exec /bin/sleep 600
`, n, dir)), 0o755))
	var out testenv.SyncBuffer
	cmd := exec.Command(filepath.Join(env.BinDir, "virt-launcher-monitor"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "VIRT_LAUNCHER_BIN=" + script}
	cmd.Stdout, cmd.Stderr = &out, &out
	launchertest.Must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			for _, d := range launchertest.DescendantsOf(cmd.Process.Pid) {
				syscall.Kill(d.PID, syscall.SIGKILL)
			}
			cmd.Process.Kill()
			<-exited
		}
	})
	mon := cmd.Process.Pid
	begin := time.Now()
	var maxChildren int
	for {
		if _, err := os.Stat(filepath.Join(dir, "spawned")); err == nil {
			break
		}
		if k := len(childrenOf(mon)); k > maxChildren {
			maxChildren = k
		}
		if time.Since(begin) > 120*time.Second {
			t.Fatalf("the launcher script did not finish spawning:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	spawned := time.Since(begin)
	deadline := time.Now().Add(20 * time.Second)
	for {
		kids := childrenOf(mon)
		zombies := 0
		for _, k := range kids {
			if k.State == "Z" {
				zombies++
			}
		}
		if len(kids) == 1 && zombies == 0 && strings.Contains(kids[0].Comm, "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after spawning, the monitor has %d children, %d zombies", len(kids), zombies)
		}
		time.Sleep(20 * time.Millisecond)
	}
	reaped := time.Since(begin) - spawned
	if maxChildren < 2 {
		t.Logf("never saw an orphan re-parented (all too fast); the reap check still holds")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("monitor did not exit after SIGTERM:\n%s", out.String())
	}
	t.Logf("zombies: %d orphans spawned in %v, all reaped %v later (at most %d children seen at once)",
		n, spawned.Round(time.Millisecond), reaped.Round(time.Millisecond), maxChildren)
}

// childrenOf lists direct children, zombies included.
func childrenOf(pid int) []launchertest.Proc {
	var out []launchertest.Proc
	for _, q := range launchertest.AllProcs() {
		if q.PPID == pid {
			out = append(out, q)
		}
	}
	return out
}
