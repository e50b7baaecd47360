package standalone_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlVerbsByName: two `vlctl run`s of the test guest (with its pod
// network) in two namespaces are listed by `vlctl ps` with their names,
// states and addresses; a run shows its guest agent's report, and `vlctl
// guestinfo NAME` all of it; `vlctl pause NAME` and `unpause NAME` change the
// state the launcher reports; a stale record (its pid now another
// process's) is shown as stale, never acted on, and removed by vlctl gc
// without signalling that process; `vlctl stop NAME` ends
// one run, gracefully and completely, while the other keeps running; `vlctl
// kill NS/NAME` ends the other at once.
func TestVlctlVerbsByName(t *testing.T) {
	needRoot(t)
	t.Parallel()
	records := workRoot(t) // a fresh directory under /run: root's alone
	type vm struct {
		name, ns, root string
		cmd            *exec.Cmd
		stdout, stderr *testenv.SyncBuffer
		exited         chan error
	}
	vms := []*vm{{name: "alpha", ns: "default"}, {name: "beta", ns: "team"}}
	for _, v := range vms {
		manifest := testGuestText(t, v.name)
		if !strings.Contains(manifest, "namespace: default\n") {
			t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
		}
		manifest = strings.Replace(manifest, "namespace: default\n", "namespace: "+v.ns+"\n", 1)
		file := filepath.Join(t.TempDir(), v.name+".yaml")
		if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		v.root = workRoot(t)
		v.cmd, v.stdout, v.stderr, v.exited = startVlctl(t, "run", "--emulation", "--workdir", v.root, "--record-dir", records, file)
	}
	for _, v := range vms {
		waitFor(t, v.name+"'s guest", 4*time.Minute, v.exited, func() bool {
			return strings.Contains(v.stdout.String(), testguest.MarkerReady)
		})
		want := "vlctl: VM " + v.ns + "/" + v.name + " is running; console: vlctl console " + v.ns + "/" + v.name + " (socket " + v.root + "/"
		if !strings.Contains(v.stderr.String(), want) {
			t.Errorf("vlctl run of %s did not print its name and console: want %q in\n%s", v.name, want, v.stderr.String())
		}
	}

	// ps prints one line per VM: NAME NAMESPACE STATE UPTIME RESTARTS ADDRESSES... CONSOLE.
	ps := func() map[string]string {
		t.Helper()
		code, out, stderr := vlctl(t, time.Minute, "ps", "--record-dir", records)
		if code != 0 {
			t.Fatalf("vlctl ps: exit %d: %s", code, stderr)
		}
		t.Logf("vlctl ps:\n%s", out)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "NAME ") {
			t.Fatalf("vlctl ps: no header:\n%s", out)
		}
		rows := map[string]string{}
		for _, l := range lines[1:] {
			rows[strings.Fields(l)[0]] = l
		}
		return rows
	}
	// The guest's own address follows once its agent has reported it.
	addr := regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\S+)\s+(\d+[smhd]\d*[smh]?)\s+0\s+(192\.168\.\d+\.\d+) \(netns (vlout-\S+)\)(?:, \d+\.\d+\.\d+\.\d+ \(guest\))?\s+(/\S+/console\.sock)$`)
	rows := ps()
	netns := map[string]bool{}
	for _, v := range vms {
		m := addr.FindStringSubmatch(rows[v.name])
		if m == nil || m[2] != v.ns || m[3] != "Running" || !strings.HasPrefix(m[7], v.root+"/") {
			t.Fatalf("vlctl ps line of %s: %q, want it %s, Running, with an address and its console", v.name, rows[v.name], v.ns)
		}
		netns[m[6]] = true
	}
	if len(netns) != 2 {
		t.Errorf("the two VMs share an outside namespace: %v", netns)
	}
	checkIsolated(t, records)

	// The guest agent's report: in vlctl run's output once it comes, and
	// in full from vlctl guestinfo.
	beta := vms[1]
	report := "vlctl: guest agent: " + testguest.OSName + " " + testguest.OSVersionID + "; eth0 10.0.2.2"
	waitFor(t, "beta's guest agent report", 2*time.Minute, beta.exited, func() bool {
		return strings.Contains(beta.stderr.String(), report)
	})
	gcode, gout, gerr := vlctl(t, time.Minute, "guestinfo", "team/beta", "--record-dir", records)
	if gcode != 0 {
		t.Fatalf("vlctl guestinfo team/beta: exit %d: %s", gcode, gerr)
	}
	if info, err := kvshape.DecodeGuestInfo([]byte(gout)); err != nil {
		t.Errorf("vlctl guestinfo team/beta: %v\n%s", err, gout)
	} else if info.OS.ID != testguest.OSID || info.Hostname != "beta" || info.GAVersion == "" {
		t.Errorf("vlctl guestinfo team/beta: OS %q, host name %q, agent %q; want %s, beta, a version", info.OS.ID, info.Hostname, info.GAVersion, testguest.OSID)
	}

	// Pause and unpause by name change what the launcher reports.
	state := func(name string) string {
		f := strings.Fields(ps()[name])
		if len(f) < 3 {
			t.Fatalf("vlctl ps has no %s", name)
		}
		return f[2]
	}
	for _, step := range []struct{ verb, want string }{{"pause", "Paused"}, {"unpause", "Running"}} {
		if code, _, stderr := vlctl(t, time.Minute, step.verb, "alpha", "--record-dir", records); code != 0 {
			t.Fatalf("vlctl %s alpha: exit %d: %s", step.verb, code, stderr)
		}
		if got := state("alpha"); got != step.want {
			t.Errorf("after vlctl %s alpha: state %s, want %s", step.verb, got, step.want)
		}
		if got := state("beta"); got != "Running" {
			t.Errorf("after vlctl %s alpha: beta is %s", step.verb, got)
		}
	}

	// alpha's launcher user points alpha's command socket at beta's: vlctl
	// sees that the listener is not of alpha's run and refuses.
	entries, err := runrecord.List(records)
	if err != nil || len(entries) != 2 {
		t.Fatalf("records: %+v %v", entries, err)
	}
	sockA, sockB := entries[0].Socket, entries[1].Socket
	if entries[0].Name != "alpha" || !strings.HasPrefix(sockA, vms[0].root+"/") {
		t.Fatalf("records: %+v", entries)
	}
	if err := os.Rename(sockA, sockA+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sockB, sockA); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := vlctl(t, time.Minute, "pause", "alpha", "--record-dir", records)
	if code == 0 || !strings.Contains(stderr, "is not a process of its vlctl run") {
		t.Errorf("vlctl pause alpha through a socket swapped for beta's: exit %d: %s", code, stderr)
	}
	if err := os.Remove(sockA); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sockA+".real", sockA); err != nil {
		t.Fatal(err)
	}
	if got := state("beta"); got != "Running" {
		t.Errorf("beta after the refused pause: %s", got)
	}

	// console by name attaches to the console alpha's vlctl run shares
	// (its listener checked to be that run) while the run keeps showing
	// it: two consoles, the first types, both and the run see the answer,
	// the second is told it only watches. With no input it detaches.
	attach := func() *guestConsole {
		c := openConsole(t, "console", records, "default/alpha")
		t.Cleanup(c.close)
		return c
	}
	first := attach()
	time.Sleep(500 * time.Millisecond) // attached in this order
	second := attach()
	waitFor(t, "the second console's notice", time.Minute, vms[0].exited, func() bool {
		return strings.Contains(second.out.String(), "another console has the input")
	})
	io.WriteString(first.in, "\necho VL-HUB-$((6*7))\n")
	io.WriteString(second.in, "echo VL-NOT-TYPED-$((6*7))\n")
	for what, b := range map[string]*testenv.SyncBuffer{"the first console": &first.out, "the second console": &second.out, "vlctl run": vms[0].stdout} {
		waitFor(t, "VL-HUB-42 on "+what, time.Minute, vms[0].exited, func() bool { return strings.Contains(b.String(), "VL-HUB-42") })
	}
	if strings.Contains(vms[0].stdout.String(), "VL-NOT-TYPED-42") {
		t.Error("the watching console's input reached the guest")
	}
	for _, a := range []*guestConsole{first, second} {
		a.in.Close()
		if err := a.c.Wait(); err != nil {
			t.Errorf("vlctl console after its input ended: %v\n%s", err, a.out.String())
		}
	}

	// A stale record: its pid is a living process, but not the one that
	// wrote it (another start time), as after a SIGKILL and a pid reuse.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	st, err := procfs.ReadStat("/proc", sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ghost, err := runrecord.Write(records, &runrecord.Record{Name: "ghost", Namespace: "default",
		Process: runrecord.Process{PID: sleeper.Process.Pid, PIDStart: st.StartTime - 1},
		WorkDir: "/run/vl/dead", Sockets: runrecord.Sockets{Socket: "/run/vl/dead/sock"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"stop", "kill", "pause", "console"} {
		code, _, stderr := vlctl(t, time.Minute, verb, "ghost", "--record-dir", records)
		if code == 0 || !strings.Contains(stderr, "is not acted on") {
			t.Errorf("vlctl %s of a stale record: exit %d: %s", verb, code, stderr)
		}
	}
	if rows := ps(); !strings.Contains(rows["ghost"], "stale") {
		t.Errorf("vlctl ps shows the stale record as %q", rows["ghost"])
	}
	if _, err := os.Stat(ghost); err != nil {
		t.Errorf("vlctl ps removed the stale record, which vlctl gc needs: %v", err)
	}
	// gc cleans up after it (here nothing is left but the record) and
	// touches neither the live runs nor the process that now has its pid.
	if code, _, stderr := vlctl(t, time.Minute, "gc", "--record-dir", records); code != 0 {
		t.Errorf("vlctl gc: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Errorf("vlctl gc did not remove the stale record: %v", err)
	}
	if p, err := procfs.ReadStat("/proc", sleeper.Process.Pid); err != nil || p.State == 'Z' {
		t.Errorf("the process behind the stale record was signalled: %+v %v", p, err)
	}

	// stop by name: the run shuts its guest down and cleans up; the other
	// keeps running.
	a, b := vms[0], vms[1]
	code, _, stderr = vlctl(t, 3*time.Minute, "stop", "alpha", "--record-dir", records)
	if code != 0 {
		t.Fatalf("vlctl stop alpha: exit %d: %s", code, stderr)
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("vlctl stop returned while alpha's run still ran")
	}
	if c := a.cmd.ProcessState.ExitCode(); c != 0 {
		t.Errorf("alpha's run: exit %d", c)
	}
	if !strings.Contains(a.stderr.String(), "shutting the guest down") || strings.Contains(a.stderr.String(), "destroying the guest") {
		t.Errorf("alpha was not shut down gracefully:\n%s", a.stderr.String())
	}
	checkNothingLeft(t, a.root)
	rows = ps()
	if _, ok := rows["alpha"]; ok {
		t.Errorf("vlctl ps still lists alpha: %q", rows["alpha"])
	}
	if f := strings.Fields(rows["beta"]); len(f) < 3 || f[2] != "Running" {
		t.Errorf("beta after alpha's stop: %q", rows["beta"])
	}
	select {
	case err := <-b.exited:
		b.exited <- err
		t.Fatalf("beta's run ended with alpha's: %v", err)
	default:
	}

	// kill by namespace/name: destroyed at once, then cleaned up.
	if code, _, stderr := vlctl(t, 2*time.Minute, "kill", "team/beta", "--record-dir", records); code != 0 {
		t.Fatalf("vlctl kill team/beta: exit %d: %s", code, stderr)
	}
	<-b.exited
	if !strings.Contains(b.stderr.String(), "destroying the guest") {
		t.Errorf("beta was not destroyed:\n%s", b.stderr.String())
	}
	checkNothingLeft(t, b.root)
	if ents, _ := os.ReadDir(records); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
	checkLeasesGone(t, records)
}
