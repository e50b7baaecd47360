package standalone_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// binDir holds vlctl, virt-launcher-monitor, virt-launcher and virtiofsd
// built for this run: vlctl finds the others next to itself, as after
// `make build`.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(launchertest.MainBinaries(m, &binDir, "vlsabin", "./cmd/vlctl", "./cmd/virt-launcher", "./cmd/virt-launcher-monitor", "./cmd/virtiofsd"))
}

func needRoot(t *testing.T) {
	t.Helper()
	// vlctl run starts the launcher as another user
	testenv.Programs(t, "qemu-system-x86_64")
	if binDir == "" {
		t.Fatal("binaries not built")
	}
}

// workRoot makes a --workdir with a short absolute name: the launcher's
// libvirt puts unix sockets several levels below the work dir, and their
// paths are limited to 107 bytes.
func workRoot(t *testing.T) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		d := fmt.Sprintf("/run/%s%04x", "vs", time.Now().UnixNano()&0xffff)
		if err := os.Mkdir(d, 0o755); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no free short directory under /run")
	return ""
}

// vlctl runs the built vlctl and returns its exit code, stdout and stderr.
// oneLineError checks that vlctl failed with one line of its own that names
// every want, and returns that line. Lines of the clean-up every vlctl run
// does first ("vlctl: gc: ...") are about other runs on the machine (the
// uid lease table is the machine's, shared by tests running in parallel)
// and are left out.
func oneLineError(t *testing.T, stderr string, want ...string) string {
	t.Helper()
	var own []string
	for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, "vlctl: gc: ") {
			own = append(own, l)
		}
	}
	msg := strings.Join(own, "\n")
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "vlctl: ") {
		t.Errorf("error is not one line from vlctl:\n%s", stderr)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not name %q", msg, w)
		}
	}
	return msg
}

func vlctl(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "vlctl"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("vlctl %s: no end within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("vlctl %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// checkNothingLeft: the work root is empty and no process names it in its
// command line or works below it.
func checkNothingLeft(t *testing.T, root string) {
	t.Helper()
	if ents, _ := os.ReadDir(root); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("work root %s not empty: %v", root, names)
	}
	procs, err := procfs.Under("/proc", root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		args, _ := procfs.Cmdline("/proc", p.PID)
		t.Errorf("process %d left behind below %s: %.150s", p.PID, root, strings.Join(args, " "))
	}
}

// TestVlctlRunPowerOff: `vlctl run` of the test guest that powers itself
// off, with no network: status 0, the console on stdout (markers and the
// user-data's own output), vlctl's messages elsewhere, nothing left.
func TestVlctlRunPowerOff(t *testing.T) {
	needRoot(t)
	t.Parallel()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	file := testGuestManifest(t, "pw", "--poweroff", "--no-network")
	root := workRoot(t)
	start := time.Now()
	// No --bin-dir: vlctl finds the launcher binaries next to itself.
	code, stdout, stderr := vlctl(t, 4*time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	t.Logf("vlctl run took %s", time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit status %d, want 0; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		testguest.MarkerBooted + " " + g.KernelVersion,
		testguest.MarkerCloudInit + " nocloud",
		// The user-data's own output: the line the script prints, not its
		// text, which the init shows between the user-data markers.
		"\nhello from user-data on " + g.KernelVersion,
		testguest.MarkerUserDataRan + " rc=0",
		testguest.MarkerReady,
		testguest.MarkerPowerOff,
	} {
		if !strings.Contains(strings.ReplaceAll(stdout, "\r\n", "\n"), want) {
			t.Errorf("console (stdout) lacks %q", want)
		}
	}
	if strings.Contains(stdout, "vlctl:") {
		t.Errorf("vlctl's own messages on stdout, which is the guest's console:\n%s", stdout)
	}
	// The progress lines, in order.
	at := 0
	for _, want := range []string{"vlctl: prepared " + root + "/", "vlctl: launcher starting as uid ",
		"vlctl: launcher ready; defining and starting the domain", "vlctl: VM default/pw is running", "vlctl: guest powered off"} {
		i := strings.Index(stderr[at:], want)
		if i < 0 {
			t.Errorf("stderr lacks %q after byte %d", want, at)
			continue
		}
		at += i
	}
	checkNothingLeft(t, root)

	// --quiet: the console alone, no progress line.
	code, stdout, stderr = vlctl(t, 4*time.Minute, "run", "--emulation", "--quiet", "--workdir", root, "--record-dir", workRoot(t), file)
	if code != 0 || !strings.Contains(stdout, testguest.MarkerPowerOff) {
		t.Errorf("--quiet: exit %d, console:\n%s", code, stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line != "" && line != "vlctl: guest powered off" {
			t.Errorf("--quiet printed %q", line)
		}
	}
	checkNothingLeft(t, root)
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

// guestManifest writes doc as name.yaml in a directory of the test's,
// with the test guest's kernel directory and root disk for KERNELDIR and
// ROOTDISK and each further old, new pair replaced, and returns its path.
func guestManifest(t *testing.T, name, doc string, oldnew ...string) string {
	t.Helper()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	doc = strings.NewReplacer(append([]string{"KERNELDIR", g.KernelDir, "ROOTDISK", g.RootDisk}, oldnew...)...).Replace(doc)
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// waitQEMU waits up to a minute for a QEMU below root, of the
// standalone.Run that will send its end to done, failing the test if the
// run ends first.
func waitQEMU(t *testing.T, root string, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); processBelow(root, "qemu-system-x86_64") == 0; {
		select {
		case err := <-done:
			t.Fatalf("run ended before QEMU started: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no QEMU within a minute")
		}
	}
}

// goodVMI is a manifest that passes validation, for the bad-input rows to
// break in one place each.
var goodVMI = testguest.Manifest{
	Meta:  testguest.Meta{Name: "bad"},
	Boot:  testguest.Boot{Kernel: "KERNELDIR"},
	Disks: testguest.Disks{Root: "ROOTDISK"},
}.YAML()

// TestVlctlRunBadInput: a manifest vlctl cannot run is refused with status
// 1 and one line naming the field, nothing on stdout and nothing created.
func TestVlctlRunBadInput(t *testing.T) {
	needRoot(t)
	t.Parallel()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	good := strings.NewReplacer("KERNELDIR", g.KernelDir, "ROOTDISK", g.RootDisk).Replace(goodVMI)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		doc  string // "" for no file at all
		want []string
	}{
		{"port out of range", strings.Replace(good, "      autoattachPodInterface: false\n", `      interfaces:
      - name: default
        masquerade: {}
        ports:
        - port: 70000
`, 1) + "  networks:\n  - name: default\n    pod: {}\n",
			[]string{"spec.domain.devices.interfaces[0].ports[0].port", "70000"}},
		{"unknown field", strings.Replace(good, "    resources:", "    resourcez:\n      x: 1\n    resources:", 1),
			[]string{"resourcez"}},
		{"relative containerDisk image", strings.Replace(good, g.RootDisk, "./disks/root.img", 1),
			[]string{"spec.volumes[0].containerDisk.image", "disks/root.img", "absolute"}},
		// (a name without ./ is an image reference, pulled: TestVlctlRunPulledContainerDisk)
		{"relative kernelBoot image", strings.Replace(good, g.KernelDir, "./kernels/guest", 1),
			[]string{"spec.domain.firmware.kernelBoot.container.image", "./kernels/guest", "absolute"}},
		{"kernelPath missing in the image", strings.Replace(good, "/initrd.img", "/no-initrd", 1),
			[]string{"spec.domain.firmware.kernelBoot.container.initrdPath", "no-initrd"}},
		{"missing file", "", []string{"nosuch.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "nosuch.yaml")
			if tc.doc != "" {
				file = filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
				if err := os.WriteFile(file, []byte(tc.doc), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			root := workRoot(t)
			code, stdout, stderr := vlctl(t, time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			oneLineError(t, stderr, tc.want...)
			if stdout != "" {
				t.Errorf("printed %q on stdout", stdout)
			}
			checkNothingLeft(t, root)
		})
	}
}

// namespaces lists the pinned network namespaces of pod networks.
func namespaces(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "vlpod-") || strings.HasPrefix(e.Name(), "vlout-") {
			out[e.Name()] = true
		}
	}
	return out
}

// TestRunRefusesBeforeCreating: standalone.Run refuses a run it cannot do
// with an error that says why, and removes what it had made.
func TestRunRefusesBeforeCreating(t *testing.T) {
	needRoot(t)
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	good := strings.NewReplacer("KERNELDIR", g.KernelDir, "ROOTDISK", g.RootDisk).Replace(goodVMI)
	withNet := strings.Replace(good, "      autoattachPodInterface: false\n", "", 1)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		doc  string
		cfg  standalone.Config
		want []string
	}{
		{"uid range backwards", good, standalone.Config{HostOptions: standalone.HostOptions{UIDs: "1879048300-1879048200"}}, []string{"--uids", "FIRST is above LAST"}},
		{"uid range of system ids", good, standalone.Config{HostOptions: standalone.HostOptions{UIDs: "0-10"}}, []string{"--uids", "below 1000"}},
		{"unknown binding", withNet, standalone.Config{ManifestOptions: standalone.ManifestOptions{Binding: "slirp"}}, []string{"slirp"}},
		// The pod network is set up before the binaries are looked for:
		// its teardown runs on this error path too.
		{"no launcher binaries", withNet, standalone.Config{HostOptions: standalone.HostOptions{BinDir: dir}}, []string{"launcher binaries", "virt-launcher-monitor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			root := workRoot(t)
			cfg := tc.cfg
			cfg.File, cfg.WorkRoot, cfg.Emulation = file, root, true
			if cfg.BinDir == "" {
				cfg.BinDir = binDir
			}
			var status bytes.Buffer
			cfg.Console, cfg.Status = &status, &status
			started := false
			cfg.Started = func(standalone.Started) { started = true }
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			before := namespaces(t)
			begin := time.Now()
			err := standalone.Run(ctx, cfg)
			end := time.Now()
			if err == nil {
				t.Fatal("Run succeeded")
			}
			t.Logf("error: %v", err)
			// A namespace pinned during the call is ours unless another
			// test made it at the same time; that one goes when its run
			// ends, ours would stay.
			var suspects []string
			for name := range namespaces(t) {
				if before[name] {
					continue
				}
				if fi, err := os.Stat(filepath.Join("/run/netns", name)); err == nil && !fi.ModTime().Before(begin.Add(-50*time.Millisecond)) && !fi.ModTime().After(end) {
					suspects = append(suspects, name)
				}
			}
			for deadline := time.Now().Add(2 * time.Minute); len(suspects) > 0; {
				var still []string
				for _, name := range suspects {
					if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
						still = append(still, name)
					}
				}
				suspects = still
				if len(still) > 0 && time.Now().After(deadline) {
					t.Errorf("namespaces %v made during the failed run are still there", still)
					break
				}
				time.Sleep(time.Second)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if started {
				t.Error("Started was called")
			}
			checkNothingLeft(t, root)
		})
	}
}

// TestVlctlRunInterrupt: Ctrl-C (SIGINT to vlctl, no terminal) asks the
// guest to power off; a guest that ignores the power button is destroyed
// when its grace period ends. Either way vlctl ends with status 0 and
// leaves nothing.
func TestVlctlRunInterrupt(t *testing.T) {
	needRoot(t)
	t.Parallel()
	if _, err := testguest.Build(context.Background(), testguest.DefaultCacheDir()); err != nil {
		t.Fatalf("test guest: %v", err)
	}
	const grace = 4 // seconds, the VMI's terminationGracePeriodSeconds
	for _, tc := range []struct {
		name, opts      string
		console, status []string // must appear on stdout, stderr
		notStatus       string
		atLeast         time.Duration // from SIGINT to vlctl's end
	}{
		{name: "acpi", console: []string{testguest.MarkerPowerButton, testguest.MarkerPowerOff},
			status: []string{"shutting the guest down"}, notStatus: "destroying"},
		{name: "noacpi", opts: testguest.OptNoACPI, console: []string{testguest.MarkerACPIIgnored},
			status:  []string{"shutting the guest down", "grace period over, destroying the guest"},
			atLeast: grace * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			manifest := testGuestText(t, tc.name, "--no-network")
			args := testguest.DefaultCmdline + " " + testguest.OptNoDHCP + " " + tc.opts
			manifest = strings.Replace(manifest, `kernelArgs: "`+testguest.DefaultCmdline, `kernelArgs: "`+args, 1)
			manifest = strings.Replace(manifest, "terminationGracePeriodSeconds: 10", fmt.Sprintf("terminationGracePeriodSeconds: %d", grace), 1)
			if !strings.Contains(manifest, tc.opts) || !strings.Contains(manifest, fmt.Sprintf("GracePeriodSeconds: %d", grace)) {
				t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
			}
			file := filepath.Join(t.TempDir(), tc.name+".yaml")
			if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			root := workRoot(t)
			cmd := exec.Command(filepath.Join(binDir, "vlctl"), "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
			var stdout, stderrBuf testenv.SyncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderrBuf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				if t.Failed() {
					t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderrBuf.String())
				}
			}()
			ready := time.After(3 * time.Minute)
			for !strings.Contains(stdout.String(), testguest.MarkerReady) {
				select {
				case err := <-exited:
					t.Fatalf("vlctl ended before the guest was ready: %v", err)
				case <-ready:
					cmd.Process.Signal(os.Interrupt)
					<-exited
					t.Fatal("guest not ready within 3 min")
				case <-time.After(100 * time.Millisecond):
				}
			}
			interrupted := time.Now()
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-exited
				t.Fatal("vlctl did not end within 2 min of SIGINT")
			}
			took := time.Since(interrupted)
			t.Logf("vlctl ended %s after SIGINT", took.Round(time.Millisecond))
			out, errOut := stdout.String(), stderrBuf.String()
			for _, w := range tc.console {
				if !strings.Contains(out, w) {
					t.Errorf("console lacks %s", w)
				}
			}
			for _, w := range tc.status {
				if !strings.Contains(errOut, w) {
					t.Errorf("vlctl did not say %q", w)
				}
			}
			if tc.notStatus != "" && strings.Contains(errOut, tc.notStatus) {
				t.Errorf("vlctl said %q for a guest that powers off", tc.notStatus)
			}
			if took < tc.atLeast {
				t.Errorf("vlctl ended %s after SIGINT, before the %s grace period", took, tc.atLeast)
			}
			checkNothingLeft(t, root)
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
		})
	}
}

// TestRunInterruptedWhileStarting: a run cancelled while the launcher is
// syncing (QEMU starting) ends soon and leaves nothing: no work dir, no
// process, no pod or outside namespace.
func TestRunInterruptedWhileStarting(t *testing.T) {
	needRoot(t)
	t.Parallel()
	// With the pod network (auto-attached masquerade): its teardown must
	// run on this path too.
	file := guestManifest(t, "early", goodVMI,
		"      autoattachPodInterface: false\n", "",
		"spec:\n", "spec:\n  terminationGracePeriodSeconds: 10\n",
		"        container:\n", "        kernelArgs: \""+testguest.DefaultCmdline+"\"\n        container:\n")
	root := workRoot(t)
	var status testenv.SyncBuffer
	started := make(chan struct{}, 1)
	var cfg standalone.Config
	cfg.File, cfg.Emulation, cfg.WorkRoot, cfg.BinDir = file, true, root, binDir
	cfg.Console, cfg.Status = &status, &status
	cfg.Started = func(standalone.Started) { started <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- standalone.Run(ctx, cfg) }()

	// QEMU starts (Sync is under way): note the namespaces, interrupt.
	nsInodes := map[string]string{} // "net:[inode]" -> pin name
	waitQEMU(t, root, done)
	pod := launcherNetNS(t, root)
	podName := pinOf(pod)
	if podName == "" || !strings.HasPrefix(podName, "vlpod-") {
		t.Fatalf("the launcher's network namespace %s is not a pinned pod namespace (%q)", pod, podName)
	}
	outName := "vlout-" + strings.TrimPrefix(podName, "vlpod-")
	nsInodes[pod] = podName
	if fi, err := os.Stat(filepath.Join("/run/netns", outName)); err == nil {
		nsInodes[fmt.Sprintf("net:[%d]", fi.Sys().(*syscall.Stat_t).Ino)] = outName
	} else {
		t.Errorf("no outside namespace %s", outName)
	}
	interrupted := time.Now()
	cancel()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not end within 2 min of its cancellation")
	}
	first, _, _ := strings.Cut(fmt.Sprint(runErr), "\n")
	t.Logf("run ended %s after its cancellation: %s", time.Since(interrupted).Round(time.Millisecond), first)
	select {
	case <-started:
		t.Log("the domain was already running when the run was cancelled")
	default:
	}
	checkNothingLeft(t, root)
	for l, name := range nsInodes {
		if _, err := os.Stat(filepath.Join("/run/netns", name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still pinned", name)
		}
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			if nsLink(filepath.Join("/proc", p.Name(), "ns", "net")) == l {
				t.Errorf("process %s still in namespace %s", p.Name(), name)
			}
		}
	}
	if t.Failed() {
		t.Logf("status:\n%s", status.String())
	}
}

// processBelow is the pid of a live process named name (argv[0]'s base)
// that belongs to root (procfs.Under); 0 if there is none.
func processBelow(root, name string) int {
	procs, _ := procfs.Under("/proc", root)
	for _, p := range procs {
		if args, _ := procfs.Cmdline("/proc", p.PID); len(args) > 0 && filepath.Base(args[0]) == name {
			return p.PID
		}
	}
	return 0
}

func nsLink(path string) string {
	l, _ := os.Readlink(path)
	return l
}

// launcherNetNS is the network namespace ("net:[inode]") of the
// virt-launcher working below root.
func launcherNetNS(t *testing.T, root string) string {
	t.Helper()
	if pid := processBelow(root, "virt-launcher"); pid != 0 {
		if l := nsLink(fmt.Sprintf("/proc/%d/ns/net", pid)); l != "" {
			return l
		}
	}
	t.Fatalf("no virt-launcher below %s", root)
	return ""
}

// pinOf names the /run/netns pin of a namespace ("net:[inode]").
func pinOf(link string) string {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join("/run/netns", e.Name()))
		if err != nil {
			continue
		}
		if fmt.Sprintf("net:[%d]", fi.Sys().(*syscall.Stat_t).Ino) == link {
			return e.Name()
		}
	}
	return ""
}
