package standalone_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlAddRemoveVolume: `vlctl addvolume` plugs a user's file into a
// running `vlctl run` guest, as `virtctl addvolume` does in a cluster: the
// guest sees a disk with the file's size and the serial asked for, and
// writes to it; bad requests are refused with a line naming the flag and
// change nothing; `vlctl removevolume` unplugs it once QEMU has let go: the
// guest's data is in the file, the ACL entry vlctl gave QEMU's user is
// gone, the file stays after the run, and nothing else is left.
func TestVlctlAddRemoveVolume(t *testing.T) {
	needRoot(t)
	t.Parallel()
	records := workRoot(t)
	file := testGuestManifest(t, "hot", "--no-network")
	// The user's disk: root's, 0600, in a directory QEMU's user may enter.
	dir := userDir(t, "vlhot")
	const size = 24 << 20
	disk := filepath.Join(dir, "data.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, size); err != nil {
		t.Fatal(err)
	}

	root := workRoot(t)
	ptm, stdout, errOut, exited := runOnPTY(t, "run", "--emulation", "--workdir", root, "--record-dir", records, file)
	waitFor(t, "the guest's shell", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})
	ask := func(what, command string, re *regexp.Regexp) []string {
		t.Helper()
		return askGuest(t, ptm, stdout, what, command, re)
	}
	add := []string{"addvolume", "hot", "--record-dir", records, "--volume-name", "data", "--file", disk, "--serial", "VLSAHP"}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"addvolume", "hot", "--record-dir", records, "--volume-name", "data", "--file", "data.img"}, `--file "data.img": give an absolute path`},
		{[]string{"addvolume", "hot", "--record-dir", records, "--volume-name", "data", "--file", disk, "--bus", "sata"}, `--bus "sata": a hotplugged disk goes on scsi or virtio`},
		{[]string{"addvolume", "hot", "--record-dir", records, "--volume-name", "Data_1", "--file", disk}, `--volume-name "Data_1"`},
		{[]string{"addvolume", "hot", "--record-dir", records, "--volume-name", "rootdisk", "--file", disk}, `the VM has a volume of that name already`},
		{[]string{"addvolume", "hot", "--record-dir", records, "--volume-name", "data", "--file", filepath.Join(dir, "none.img")}, "none.img"},
		{[]string{"removevolume", "hot", "--record-dir", records, "--volume-name", "rootdisk"}, "not a volume plugged in with vlctl addvolume"},
		{[]string{"addvolume", "nosuch", "--record-dir", records, "--volume-name", "data", "--file", disk}, "nosuch"},
	} {
		if code, _, stderr := vlctl(t, time.Minute, bad.args...); code == 0 || !strings.Contains(stderr, bad.want) {
			t.Errorf("vlctl %s: exit %d, %q; want a failure saying %q", strings.Join(bad.args, " "), code, stderr, bad.want)
		}
	}
	if _, err := unix.Getxattr(disk, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("the refused requests left an ACL on %s (%v)", disk, err)
	}

	if code, _, stderr := vlctl(t, 2*time.Minute, add...); code != 0 || !strings.Contains(stderr, "volume data ("+disk+") plugged into default/hot on the scsi bus") {
		t.Fatalf("vlctl addvolume: exit %d: %s", code, stderr)
	}
	if _, err := unix.Getxattr(disk, "system.posix_acl_access", make([]byte, 256)); err != nil {
		t.Errorf("no ACL entry for QEMU's user on %s while it is plugged in: %v", disk, err)
	}
	if code, _, stderr := vlctl(t, time.Minute, add...); code == 0 || !strings.Contains(stderr, "already") {
		t.Errorf("a second addvolume of data: exit %d, %q; want a refusal", code, stderr)
	}
	// vlctl logs: the launcher's own lines (the attach), and with
	// --console the guest's serial console log.
	if code, out, stderr := vlctl(t, time.Minute, "logs", "hot", "--record-dir", records); code != 0 || !strings.Contains(out, `"msg":"disk attached"`) {
		t.Errorf("vlctl logs hot: exit %d, %d bytes without the launcher's disk attached line; stderr %q", code, len(out), stderr)
	}
	if code, out, stderr := vlctl(t, time.Minute, "logs", "hot", "--console", "--record-dir", records); code != 0 || !strings.Contains(out, testguest.MarkerReady) {
		t.Errorf("vlctl logs hot --console: exit %d, %d bytes without %s; stderr %q", code, len(out), testguest.MarkerReady, stderr)
	}
	find := `d=; for b in /sys/block/sd*; do grep -q VLSAHP $b/device/vpd_pg80 2>/dev/null && d=${b##*/}; done`
	m := ask("the plugged disk", find+`; echo VL-SA-$d-$(cat /sys/block/$d/size)X`, regexp.MustCompile(`VL-SA-(sd[a-z]+)-(\d+)X`))
	if m[2] != "49152" {
		t.Errorf("the guest sees %s with %s sectors, want %d", m[1], m[2], size/512)
	}
	ask("write to it", `echo VLSA-DATA-42 | dd of=/dev/`+m[1]+` conv=fsync 2>/dev/null; echo VL-SA-WROTE-$?X`, regexp.MustCompile(`VL-SA-WROTE-0X`))

	if code, _, stderr := vlctl(t, 2*time.Minute, "removevolume", "hot", "--record-dir", records, "--volume-name", "data"); code != 0 || !strings.Contains(stderr, "unplugged") {
		t.Fatalf("vlctl removevolume: exit %d: %s", code, stderr)
	}
	ask("the disk gone", `echo VL-SA-GONE-$(ls /sys/block | grep -c '^`+m[1]+`$')X`, regexp.MustCompile(`VL-SA-GONE-0X`))
	head := make([]byte, 12)
	if f, err := os.Open(disk); err != nil {
		t.Error(err)
	} else {
		f.ReadAt(head, 0)
		f.Close()
	}
	if !bytes.Equal(head, []byte("VLSA-DATA-42")) {
		t.Errorf("the file starts with %q after the unplug, want the guest's VLSA-DATA-42", head)
	}
	if _, err := unix.Getxattr(disk, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("an ACL is left on %s after the unplug (%v)", disk, err)
	}

	stopOnPTY(t, ptm, errOut, exited)
	if st, err := os.Stat(disk); err != nil || st.Size() != size {
		t.Errorf("the user's file after the run: %v, %v; want it kept, %d bytes", st, err, size)
	}
	checkNothingLeft(t, root)
}

// askGuest types command on the guest's console (ptm, vlctl run's
// terminal) until re matches what the console (stdout) printed since.
func askGuest(t *testing.T, ptm *os.File, stdout *testenv.SyncBuffer, what, command string, re *regexp.Regexp) []string {
	t.Helper()
	from := len(stdout.String())
	var m []string
	deadline := time.Now().Add(time.Minute)
	for m == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no answer matching %s; console:\n%s", what, re, stdout.String())
		}
		ptm.WriteString(command + "\r")
		for wait := time.Now().Add(3 * time.Second); m == nil && time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
			m = re.FindStringSubmatch(stdout.String()[from:])
		}
	}
	return m
}

// TestVlctlAddRemoveInterface: `vlctl addinterface` plugs a NIC into a
// running `vlctl run` guest with a pod network, as KubeVirt's NIC hotplug
// does: the guest sees it with the MAC asked for, leases the new pod
// interface's address from the launcher's DHCP server and reaches the
// network's other end; bad requests are refused naming the flag;
// `vlctl removeinterface` unplugs it, and the guest loses the NIC. After
// the run nothing is left (namespaces, links, work dir, processes).
func TestVlctlAddRemoveInterface(t *testing.T) {
	needRoot(t)
	t.Parallel()
	records := workRoot(t)
	file := testGuestManifest(t, "nic")
	root := workRoot(t)
	ptm, stdout, errOut, exited := runOnPTY(t, "run", "--emulation", "--workdir", root, "--record-dir", records, file)
	waitFor(t, "the guest's shell", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})

	// The run's own namespaces, from its record (other tests run theirs
	// meanwhile).
	entries, err := runrecord.List(records)
	if err != nil || len(entries) != 1 || len(entries[0].NetNS) != 2 {
		t.Fatalf("the run's record: %+v, %v; want one naming its two namespaces", entries, err)
	}
	runNS := entries[0].NetNS
	const mac = "02:00:00:5a:0e:01"
	add := []string{"addinterface", "nic", "--record-dir", records, "--iface-name", "blue", "--mac", mac}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"addinterface", "nic", "--record-dir", records, "--iface-name", "blue", "--mac", "01:00:00:00:00:01"}, `--mac "01:00:00:00:00:01": not a unicast MAC address`},
		{[]string{"addinterface", "nic", "--record-dir", records, "--iface-name", "Blue_1"}, `--iface-name "Blue_1"`},
		{[]string{"addinterface", "nic", "--record-dir", records, "--iface-name", "default"}, "the VM has an interface of that name already"},
		{[]string{"removeinterface", "nic", "--record-dir", records, "--iface-name", "default"}, "not an interface plugged in with vlctl addinterface"},
	} {
		if code, _, stderr := vlctl(t, time.Minute, bad.args...); code == 0 || !strings.Contains(stderr, bad.want) {
			t.Errorf("vlctl %s: exit %d, %q; want a failure saying %q", strings.Join(bad.args, " "), code, stderr, bad.want)
		}
	}
	code, _, stderr := vlctl(t, 2*time.Minute, add...)
	if code != 0 || !strings.Contains(stderr, "interface blue plugged into default/nic") || !strings.Contains(stderr, "leases 192.168.67.2") {
		t.Fatalf("vlctl addinterface: exit %d: %s", code, stderr)
	}
	if code, _, stderr := vlctl(t, time.Minute, add...); code == 0 || !strings.Contains(stderr, "already") {
		t.Errorf("a second addinterface of blue: exit %d, %q; want a refusal", code, stderr)
	}
	ask := func(what, command string, re *regexp.Regexp) []string {
		t.Helper()
		return askGuest(t, ptm, stdout, what, command, re)
	}
	m := ask("the plugged NIC", `n=; for i in /sys/class/net/*; do [ "$(cat $i/address)" = `+mac+` ] && n=${i##*/}; done; echo VL-SN-$n-X`,
		regexp.MustCompile(`VL-SN-(eth\d+)-X`))
	nic := m[1]
	m = ask("its lease", `ip link set `+nic+` up; udhcpc -i `+nic+` -s /etc/udhcpc.script -q -n -t 5 -T 2 >/dev/null 2>&1; echo VL-SN-LEASE-$(ip -4 -o addr show dev `+nic+` | grep -o 'inet [0-9./]*' | cut -d' ' -f2)-X`,
		regexp.MustCompile(`VL-SN-LEASE-([0-9./]+)-X`))
	if m[1] != "192.168.67.2/24" {
		t.Errorf("the guest's %s leased %s, want 192.168.67.2/24", nic, m[1])
	}
	ask("the network's other end", `ping -c 1 -W 2 -I `+nic+` 192.168.67.1 >/dev/null 2>&1; echo VL-SN-PING-$?-X`, regexp.MustCompile(`VL-SN-PING-0-X`))

	if code, _, stderr := vlctl(t, 2*time.Minute, "removeinterface", "nic", "--record-dir", records, "--iface-name", "blue"); code != 0 || !strings.Contains(stderr, "interface blue unplugged") {
		t.Fatalf("vlctl removeinterface: exit %d: %s", code, stderr)
	}
	ask("the NIC gone", `echo VL-SN-GONE-$(ls /sys/class/net | grep -c '^`+nic+`$')-X`, regexp.MustCompile(`VL-SN-GONE-0-X`))
	if strings.Contains(errOut.String(), "its pod side") {
		t.Errorf("the unplug left the pod side:\n%s", errOut.String())
	}
	// Plugged again: the same name works, the next network.
	if code, _, stderr := vlctl(t, 2*time.Minute, add...); code != 0 || !strings.Contains(stderr, "leases 192.168.68.2") {
		t.Errorf("vlctl addinterface again: exit %d: %s", code, stderr)
	}

	stopOnPTY(t, ptm, errOut, exited)
	checkNothingLeft(t, root)
	left := namespaces(t)
	for _, ns := range runNS {
		if left[ns] {
			t.Errorf("network namespace %s left after the run", ns)
		}
	}
}

// runOnPTY starts vlctl with args, a new pseudo-terminal as its
// controlling terminal and stdin (as a user's shell would run it), and
// returns the terminal's other end, vlctl's output and its end.
func runOnPTY(t *testing.T, args ...string) (ptm *os.File, stdout, stderr *testenv.SyncBuffer, exited chan error) {
	t.Helper()
	ptm, pts := openPTY(t)
	cmd := exec.Command(filepath.Join(binDir, "vlctl"), args...)
	cmd.Stdin = pts
	// The terminal is vlctl's controlling one: its Ctrl-C is a SIGINT.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	_, stdout, stderr, exited = startCmd(t, cmd)
	return ptm, stdout, stderr, exited
}

// stopOnPTY ends a vlctl run started by runOnPTY as its user would: ^]
// gives the terminal back, then Ctrl-C; the run must end with status 0.
func stopOnPTY(t *testing.T, ptm *os.File, stderr *testenv.SyncBuffer, exited chan error) {
	t.Helper()
	ptm.Write([]byte{0x1d})
	waitFor(t, "the detach notice", time.Minute, exited, func() bool {
		return strings.Contains(stderr.String(), "keys detached from the guest")
	})
	ptm.Write([]byte{0x03})
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("vlctl run after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("vlctl run did not end after Ctrl-C")
	}
}
