package standalone_test

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// publishVMI is vlctl testguest's guest with SSH's port declared: the
// masquerade interface forwards the ports it declares.
func publishVMI(name string) testguest.Manifest {
	return testguest.Manifest{
		Meta:    testguest.Meta{Name: name, Namespace: "default"},
		Boot:    testguest.Boot{Kernel: "KERNELDIR", Cmdline: testguest.DefaultCmdline},
		Disks:   testguest.Disks{Root: "ROOTDISK", Scratch: true, UserData: "#!/bin/sh\necho \"hello from user-data on $(uname -r)\"\n"},
		Network: testguest.Network{Pod: &testguest.Interface{Ports: []int{22}}},
		Grace:   10,
	}
}

// TestVlctlRunPublish: --publish PORT:22 makes the guest's SSH server
// answer on the host's loopback (its banner read through vlctl's relay
// and the masquerade binding); Ctrl-C closes the port with the rest. A
// host port already taken, or a guest port the interface does not
// forward, fails the run before anything is left.
func TestVlctlRunPublish(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := guestManifest(t, "pub", publishVMI("pub").YAML())

	// A taken port: refused, nothing left.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	root := workRoot(t)
	code, _, stderr := vlctl(t, time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), "--publish", busyPort+":22", file)
	if code == 0 || !strings.Contains(stderr, "--publish 127.0.0.1:"+busyPort) || !strings.Contains(stderr, "address already in use") {
		t.Errorf("a taken host port: exit %d, stderr:\n%s\nwant a failure naming the --publish", code, stderr)
	}
	checkNothingLeft(t, root)

	// A port the interface does not forward: refused, nothing left.
	code, _, stderr = vlctl(t, time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), "--publish", "2323:23", file)
	if code == 0 || !strings.Contains(stderr, "TCP 22") || !strings.Contains(stderr, "23 is not one of them") {
		t.Errorf("an undeclared guest port: exit %d, stderr:\n%s\nwant a refusal naming the declared ports", code, stderr)
	}
	checkNothingLeft(t, root)

	port := strconv.Itoa(int(testenv.FreeAddr(t).Port()))
	root = workRoot(t)
	records := workRoot(t)
	cmd, stdout, errOut, exited := startVlctl(t, "run", "--emulation", "--workdir", root, "--record-dir", records, "--publish", port+":22", file)
	waitFor(t, "the guest's SSH server", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerSSHD)
	})
	if code, out, stderr := vlctl(t, time.Minute, "ps", "--record-dir", records); code != 0 || !strings.Contains(out, "127.0.0.1:"+port+"->22/tcp (published)") {
		t.Errorf("vlctl ps: exit %d, want the published port in:\n%s%s", code, out, stderr)
	}
	if want := "vlctl: published 127.0.0.1:" + port + " -> guest port 22/tcp"; !strings.Contains(errOut.String(), want) {
		t.Errorf("vlctl run did not say %q:\n%s", want, errOut.String())
	}
	sshBanner(t, port)
	interruptReleases(t, cmd, exited, port, root)
}

// TestVlctlRunPublishKeptAcrossRestart: a VM with runStrategy Always
// keeps its published port while its guest starts again: a local user
// trying to bind the port all along never gets it, and the new boot
// answers on it.
func TestVlctlRunPublishKeptAcrossRestart(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := guestManifest(t, "pubr", publishVMI("pubr").VMYAML("Always"))
	port := strconv.Itoa(int(testenv.FreeAddr(t).Port()))
	root, records := workRoot(t), workRoot(t)
	cmd, stdout, errOut, exited := startVlctl(t, "run", "--emulation", "--workdir", root, "--record-dir", records, "--publish", port+":22", file)
	waitFor(t, "the guest's SSH server", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerSSHD)
	})
	sshBanner(t, port)

	// Another local user's try at the port, from now until the guest
	// answers again.
	stopTaking := takePort(port)
	c := openConsole(t, "console", records, "default/pubr")
	defer c.close()
	restarted := func() bool { return strings.Contains(errOut.String(), "run strategy: starting the guest again") }
	if !c.typeUntil("poweroff -f", 5*time.Second, restarted) {
		t.Fatalf("the guest did not power off, or vlctl did not start it again:\n%s", errOut.String())
	}
	waitFor(t, "the second boot's SSH server", 4*time.Minute, exited, func() bool {
		return strings.Count(stdout.String(), testguest.MarkerSSHD) >= 2
	})
	sshBanner(t, port)
	if n := stopTaking(); n > 0 {
		t.Errorf("another user bound the published port %d times while the guest started again", n)
	}
	interruptReleases(t, cmd, exited, port, root)
}

// takePort tries, every few milliseconds until stop is called, to bind
// 127.0.0.1:port, as any local user could while vlctl lets go of it;
// stop reports how many times that succeeded.
func takePort(port string) (stop func() int) {
	done, taken := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		defer func() { taken <- n }()
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if l, err := net.Listen("tcp", "127.0.0.1:"+port); err == nil {
				l.Close()
				n++
			}
		}
	}()
	return func() int {
		close(done)
		return <-taken
	}
}

// interruptEnds ends a `vlctl run` that startVlctl started with Ctrl-C
// and checks that it ends cleanly, leaving nothing under root.
func interruptEnds(t *testing.T, cmd *exec.Cmd, exited chan error, root string) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("vlctl run after Ctrl-C: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("vlctl run did not end after Ctrl-C")
	}
	checkNothingLeft(t, root)
}

// interruptReleases is interruptEnds for a publishing `vlctl run`, whose
// published port on 127.0.0.1 must no longer accept once it ended.
func interruptReleases(t *testing.T, cmd *exec.Cmd, exited chan error, port, root string) {
	t.Helper()
	interruptEnds(t, cmd, exited, root)
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
		c.Close()
		t.Errorf("127.0.0.1:%s still accepts after the run ended", port)
	}
}
