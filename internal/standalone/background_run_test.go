package standalone_test

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/dvimport/dvtest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// testGuestManifest writes the manifest of `vlctl testguest` with args
// (its guest stays up, without a network unless asked) and returns its
// path.
func testGuestManifest(t *testing.T, name string, args ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(testGuestText(t, name, args...)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// testGuestText is the manifest `vlctl testguest --name name args...`
// prints, for a test that edits it before writing it.
func testGuestText(t *testing.T, name string, args ...string) string {
	t.Helper()
	code, manifest, stderr := vlctl(t, time.Minute, append([]string{"testguest", "--name", name}, args...)...)
	if code != 0 {
		t.Fatalf("vlctl testguest: exit %d: %s", code, stderr)
	}
	return manifest
}

// checkNoRunLeft: of the runs with this work root and record dir nothing
// is left: work dir, background run, record, or process naming either.
func checkNoRunLeft(t *testing.T, root, records string) {
	t.Helper()
	checkNothingLeft(t, root)
	if ents, _ := os.ReadDir(filepath.Join(records, "background")); len(ents) != 0 {
		t.Errorf("background runs left: %v", ents)
	}
	if left, _ := runrecord.List(records); len(left) != 0 {
		t.Errorf("records left: %+v", left)
	}
	if procs, _ := procfs.Under("/proc", records); len(procs) != 0 {
		t.Errorf("processes left naming %s: %+v", records, procs)
	}
}

// guestConsole is a vlctl console (or attach) session on a VM's serial
// console, for a test to type into the guest's shell.
type guestConsole struct {
	c   *exec.Cmd
	in  io.WriteCloser
	out testenv.SyncBuffer
}

// openConsole starts `vlctl VERB NAME` (console, or its alias attach) on
// the VM named; close ends it.
func openConsole(t *testing.T, verb, records, name string) *guestConsole {
	t.Helper()
	g := &guestConsole{c: exec.Command(filepath.Join(binDir, "vlctl"), verb, name, "--record-dir", records)}
	in, err := g.c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.in = in
	g.c.Stdout, g.c.Stderr = &g.out, &g.out
	if err := g.c.Start(); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *guestConsole) close() { g.c.Process.Kill(); g.c.Wait() }

// typeUntil types command (on a line of its own) every period until done
// holds, for a minute at the most, and says whether it does: the guest's
// shell may not read yet.
func (g *guestConsole) typeUntil(command string, period time.Duration, done func() bool) bool {
	for deadline := time.Now().Add(time.Minute); !done() && time.Now().Before(deadline); {
		io.WriteString(g.in, "\n"+command+"\n")
		for until := time.Now().Add(period); !done() && time.Now().Before(until); {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return done()
}

// consoleAnswers types command into the serial console of the VM named
// (vlctl attach NAME, which is vlctl console NAME) until want shows,
// failing the test after a minute.
func consoleAnswers(t *testing.T, records, name, command, want string) {
	t.Helper()
	c := openConsole(t, "attach", records, name)
	defer c.close()
	if !c.typeUntil(command, 3*time.Second, func() bool { return strings.Contains(c.out.String(), want) }) {
		t.Fatalf("%s did not answer %q on its console:\n%s", name, command, c.out.String())
	}
}

// TestVlctlRunDetached: vlctl run -d -f - (the manifest on its standard
// input), started from a shell on a terminal, prints the VM's name once
// the guest runs and returns; the terminal's
// session then hung up (SIGHUP to its process group, the terminal
// closed) and the shell gone, the VM runs on (its guest answers on the
// serial console through vlctl attach; vlctl ps -o json, get -o json and
// guestinfo -o json say so, and its name completes for vlctl stop), held
// by a supervisor in a session of its own; vlctl stop ends it as it ends a foreground run, leaving nothing but the
// background run's log, which says how it ended, and which vlctl ps -a
// lists as exited until vlctl rm removes it.
func TestVlctlRunDetached(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := testGuestManifest(t, "bgd", "--no-network")
	root, records := workRoot(t), workRoot(t)
	ptm, pts := openPTY(t)
	// The manifest on vlctl's standard input (-f -), the terminal being
	// the shell's.
	sh := exec.Command("/bin/sh", "-c", `"$0" "$@" <`+file+`; echo VL-SHELL-ON; exec sleep 600`,
		filepath.Join(binDir, "vlctl"), "run", "-d", "--emulation", "--workdir", root, "--record-dir", records, "-f", "-")
	sh.Stdin = pts
	// The terminal is the shell's controlling one, as in a login.
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	_, stdout, stderr, exited := startCmd(t, sh)
	waitFor(t, "vlctl run -d to return", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), "VL-SHELL-ON")
	})
	if got := strings.TrimSpace(strings.TrimSuffix(stdout.String(), "VL-SHELL-ON\n")); got != "default/bgd" {
		t.Errorf("vlctl run -d printed %q, want the VM's name default/bgd", got)
	}
	if !strings.Contains(stderr.String(), "vlctl: VM default/bgd is running") {
		t.Errorf("vlctl run -d did not show the run's progress until the guest ran:\n%s", stderr.String())
	}
	// The session hangs up, as when the terminal closes.
	if err := syscall.Kill(-sh.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ptm.Close()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the shell did not end on SIGHUP")
	}
	entries, err := runrecord.List(records)
	if err != nil || len(entries) != 1 || entries[0].Stale {
		t.Fatalf("after the hang-up, want one live run; records %+v, %v", entries, err)
	}
	sup := entries[0].PID
	sid, err := unix.Getsid(sup)
	if err != nil {
		t.Fatal(err)
	}
	if sid == sh.Process.Pid {
		t.Errorf("the supervisor (pid %d) is in the terminal's session", sup)
	}
	consoleAnswers(t, records, "default/bgd", "echo VL-BG-$((6*7))", "VL-BG-42")
	code, out, errOut := vlctl(t, time.Minute, "ps", "-o", "json", "--record-dir", records)
	var ps []struct {
		Name, Namespace, State string
		PID                    int
		Started                time.Time
		Addresses              []runrecord.Address
	}
	if err := json.Unmarshal([]byte(out), &ps); code != 0 || err != nil || len(ps) != 1 {
		t.Errorf("vlctl ps -o json: exit %d, %v: %s%s", code, err, out, errOut)
	} else if p := ps[0]; p.Name != "bgd" || p.Namespace != "default" || p.State != "Running" || p.PID != sup || p.Started.IsZero() {
		t.Errorf("vlctl ps -o json: %+v; want default/bgd Running, pid %d, a start time", p, sup)
	}
	code, out, errOut = vlctl(t, time.Minute, "get", "bgd", "-o", "json", "--record-dir", records)
	var dom struct {
		ObjectMeta struct{ Name, Namespace string }
		Status     struct{ Status string }
	}
	if err := json.Unmarshal([]byte(out), &dom); code != 0 || err != nil || dom.ObjectMeta.Name != "bgd" || dom.Status.Status != "Running" {
		t.Errorf("vlctl get bgd -o json: exit %d, %v, %+v: %s%s", code, err, dom, out, errOut)
	}
	// What a shell's completion script asks (vlctl completion bash).
	code, out, errOut = vlctl(t, time.Minute, "__complete", "stop", "--record-dir", records, "")
	if code != 0 || !strings.HasPrefix(out, "bgd\t") {
		t.Errorf("vlctl __complete stop '': exit %d: %q%s; want bgd offered", code, out, errOut)
	}
	code, out, errOut = vlctl(t, time.Minute, "guestinfo", "-o", "json", "default/bgd", "--record-dir", records)
	if code != 0 || !json.Valid([]byte(out)) {
		t.Errorf("vlctl guestinfo -o json: exit %d: %s%s", code, out, errOut)
	}
	code, _, errOut = vlctl(t, 3*time.Minute, "stop", "default/bgd", "--record-dir", records)
	if code != 0 {
		t.Fatalf("vlctl stop: exit %d: %s", code, errOut)
	}
	checkNothingLeft(t, root)
	if left, err := runrecord.List(records); err != nil || len(left) != 0 {
		t.Errorf("records left after vlctl stop: %+v, %v", left, err)
	}
	checkLeasesGone(t, records)
	// Ended; its new parent may not have reaped it yet.
	if st, err := procfs.ReadStat("/proc", sup); err == nil && st.State != 'Z' {
		t.Errorf("the supervisor (pid %d) runs on after vlctl stop", sup)
	}
	code, log, errOut := vlctl(t, time.Minute, "logs", "--run", "bgd", "--record-dir", records)
	if code != 0 {
		t.Fatalf("vlctl logs --run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"vlctl: VM default/bgd is running", "shutting the guest down", "vlctl: the run ended"} {
		if !strings.Contains(log, want) {
			t.Errorf("the background run's log lacks %q:\n%s", want, log)
		}
	}
	// Ended, it is listed by ps -a until vlctl rm.
	if code, out, _ := vlctl(t, time.Minute, "ps", "-o", "json", "--record-dir", records); code != 0 || out != "[]\n" {
		t.Errorf("vlctl ps -o json after the end: exit %d: %q", code, out)
	}
	code, out, errOut = vlctl(t, time.Minute, "ps", "-a", "-o", "json", "--record-dir", records)
	if err := json.Unmarshal([]byte(out), &ps); code != 0 || err != nil || len(ps) != 1 || ps[0].Name != "bgd" || ps[0].State != "exited" {
		t.Errorf("vlctl ps -a -o json after the end: exit %d, %v: %s%s", code, err, out, errOut)
	}
	if code, _, errOut := vlctl(t, time.Minute, "rm", "bgd", "--record-dir", records); code != 0 {
		t.Errorf("vlctl rm: exit %d: %s", code, errOut)
	}
	if code, out, _ := vlctl(t, time.Minute, "ps", "-a", "-o", "json", "--record-dir", records); code != 0 || out != "[]\n" {
		t.Errorf("vlctl ps -a -o json after vlctl rm: exit %d: %q", code, out)
	}
	if ents, _ := os.ReadDir(filepath.Join(records, "background")); len(ents) != 0 {
		t.Errorf("background runs left after vlctl rm: %v", ents)
	}
}

// TestVlctlRunDetachedFails: vlctl run -d of a manifest that does not
// load gives exactly the error a foreground run gives; one that fails
// once the supervisor runs (its kernel directory missing) says why, and
// both leave nothing: no background run, record, work dir or process.
func TestVlctlRunDetachedFails(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := testGuestManifest(t, "bgf", "--no-network")
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(good), "memory: 256Mi", "memory: lots", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	root, records := workRoot(t), workRoot(t)
	run := func(args ...string) []string {
		return append([]string{"run", "--emulation", "--workdir", root, "--record-dir", records}, args...)
	}
	fgCode, _, fgErr := vlctl(t, time.Minute, run(bad)...)
	code, stdout, stderr := vlctl(t, time.Minute, run("-d", bad)...)
	if code != 1 || fgCode != 1 || stderr != fgErr || stdout != "" {
		t.Errorf("vlctl run -d of a broken manifest: exit %d, stdout %q, stderr %q; want exit 1 and the foreground run's error %q", code, stdout, stderr, fgErr)
	}
	oneLineError(t, stderr, bad, "memory", "lots")

	missing := filepath.Join(t.TempDir(), "gone.yaml")
	kernel := strings.Split(strings.Split(string(good), "image: ")[1], "\n")[0]
	if err := os.WriteFile(missing, []byte(strings.ReplaceAll(string(good), kernel, "/nonexistent/vl-kernel")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = vlctl(t, 2*time.Minute, run("-d", missing)...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "/nonexistent/vl-kernel") {
		t.Errorf("vlctl run -d of a missing kernel: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	t.Logf("vlctl run -d of a missing kernel:\n%s", stderr)
	checkNoRunLeft(t, root, records)
}

// TestVlctlRmVolumes: a VM whose root disk is a DataVolume imported over
// HTTP into the volume store, and with a second, blank DataVolume in a
// --volume file of the user's, runs in the background; vlctl rm refuses
// it while it runs; vlctl rm --force --volumes stops it and removes its
// store volume, its background run and its records, leaving the user's
// file as it was and nothing else behind (work dir, processes, uid lease).
func TestVlctlRmVolumes(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	g := e.guest
	rootImg, err := os.ReadFile(g.RootDisk)
	if err != nil {
		t.Fatal(err)
	}
	srv := dvtest.New(t)
	url := srv.Put("root.img", rootImg)
	doc := strings.NewReplacer("NAME", "dvrm", "URL", url, "CMDLINE", testguest.DefaultCmdline+" "+testguest.OptNoDHCP, "KERNELDIR", g.KernelDir,
		"  template:\n    spec:\n", "  - metadata:\n      name: userdv\n    spec:\n      source:\n        blank: {}\n      storage:\n        resources:\n          requests:\n            storage: 8Mi\n  template:\n    spec:\n",
		"            disk: {bus: virtio}\n", "            disk: {bus: virtio}\n          - name: userdisk\n            disk: {bus: virtio}\n").Replace(dvVM) +
		"      - name: userdisk\n        dataVolume:\n          name: userdv\n"
	store := filepath.Join(e.dir, "store")
	user := filepath.Join(e.dir, "user.img")
	code, stdout, stderr := vlctl(t, 4*time.Minute, e.run("-d", "--volume-store", store, "--import-cache", filepath.Join(e.dir, "imports"),
		"--volume", "userdv="+user, e.write(t, "dvrm", doc))...)
	if code != 0 || stdout != "default/dvrm\n" {
		t.Fatalf("vlctl run -d: exit %d, stdout %q; stderr:\n%s", code, stdout, stderr)
	}
	vol := filepath.Join(store, "default", "dvrm", "rootdv.img")
	userBefore, err := os.Stat(user)
	if err != nil {
		t.Fatalf("the user's volume: %v", err)
	}
	if _, err := os.Stat(vol); err != nil {
		t.Fatalf("the store volume: %v", err)
	}
	rm := func(args ...string) (int, string) {
		code, _, stderr := vlctl(t, 3*time.Minute, append([]string{"rm", "--record-dir", e.records, "--volume-store", store}, args...)...)
		return code, stderr
	}
	if code, stderr := rm("--volumes", "dvrm"); code != 1 || !strings.Contains(stderr, "default/dvrm is running") {
		t.Errorf("vlctl rm of a running VM: exit %d, stderr %q; want a refusal", code, stderr)
	}
	if _, err := os.Stat(vol); err != nil {
		t.Errorf("the refused vlctl rm removed the store volume: %v", err)
	}
	if code, stderr := rm("--force", "--volumes", "dvrm"); code != 0 {
		t.Fatalf("vlctl rm --force --volumes: exit %d; stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(store, "default")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the VM's volumes are still in the store: %v (%s)", err, listDir(t, store))
	}
	if st, err := os.Stat(user); err != nil || st.Size() != userBefore.Size() || st.ModTime() != userBefore.ModTime() {
		t.Errorf("the user's --volume file changed: %v, %v; before %v", st, err, userBefore)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.records, "background")); len(ents) != 0 {
		t.Errorf("background runs left: %v", ents)
	}
	e.checkNothingLeft(t)
	if code, stderr := rm("dvrm"); code != 1 || !strings.Contains(stderr, "nothing to remove") {
		t.Errorf("vlctl rm of a removed VM: exit %d, stderr %q", code, stderr)
	}
}

// TestVlctlRunDetachedInterrupted: Ctrl-C on vlctl run -d while its guest
// is starting stops the start, as on a foreground run: vlctl ends with
// status 1, saying so, and nothing is left (background run, record, work
// dir, process).
func TestVlctlRunDetachedInterrupted(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := testGuestManifest(t, "bgi", "--no-network")
	root, records := workRoot(t), workRoot(t)
	cmd, stdout, stderr, exited := startVlctl(t, "run", "-d", "--emulation", "--workdir", root, "--record-dir", records, file)
	waitFor(t, "the run's start", 2*time.Minute, exited, func() bool {
		return strings.Contains(stderr.String(), "vlctl: prepared ")
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, "vlctl run -d after SIGINT", cmd, exited, 2*time.Minute); code != 1 || stdout.String() != "" || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("vlctl run -d interrupted: exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("vlctl run -d interrupted:\n%s", stderr.String())
	checkNoRunLeft(t, root, records)
}
