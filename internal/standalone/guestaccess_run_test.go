package standalone_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"image/png"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlGuestAccess: the ways into a running guest, against one test
// guest (its own qemu-guest-agent and dropbear): vlctl exec carries a
// command's standard output, standard error, input and exit status; vlctl cp
// copies a file in and out (the guest's own sha256sum agrees); vlctl vnc
// serves QEMU's VNC display on a loopback port, where a VNC client's
// handshake (RFB 3.8, security None, ClientInit/ServerInit) and a
// FramebufferUpdateRequest get a FramebufferUpdate of the whole screen,
// and another user's process gets nothing;
// vlctl screenshot writes a PNG of the size the VNC server reports; vlctl
// ssh logs in with a key the VM's accessCredentials put in through the
// agent, as the user they name, recording the guest's host key in a
// known_hosts file of the VM's own, and under sudo runs ssh as the user who
// ran it. The VM runs in the background (vlctl run -d); vlctl stop and rm
// leave nothing of it.
func TestVlctlGuestAccess(t *testing.T) {
	needRoot(t)
	testenv.Programs(t, "ssh", "ssh-keygen")
	t.Parallel()
	tmp := t.TempDir()
	key, pub := sshKeyPair(t, tmp, "vlctl-test")
	manifest := testGuestText(t, "ga")
	doc := strings.NewReplacer(
		"        - port: 80\n", "        - port: 80\n        - port: 22\n",
		"spec:\n", "spec:\n  accessCredentials:\n  - sshPublicKey:\n      source: {secret: {secretName: ga-keys}}\n      propagationMethod: {qemuGuestAgent: {users: ["+testguest.GuestUser+"]}}\n",
	).Replace(manifest)
	if strings.Count(doc, "port: 22") != 1 || !strings.Contains(doc, "accessCredentials") {
		t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
	}
	doc += "---\napiVersion: v1\nkind: Secret\nmetadata: {name: ga-keys, namespace: default}\nstringData:\n  key1: " + strings.TrimSpace(string(pub)) + "\n"
	file := filepath.Join(tmp, "ga.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	// In the background, as a VM one gets into usually runs.
	records, root := workRoot(t), workRoot(t)
	rd := "--record-dir=" + records
	if code, out, errOut := vlctl(t, 4*time.Minute, "run", "-d", "--emulation", "--workdir", root, rd, file); code != 0 || out != "default/ga\n" {
		t.Fatalf("vlctl run -d: exit %d, %q: %s", code, out, errOut)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_, log, _ := vlctl(t, time.Minute, "logs", "--run", rd, "ga")
			t.Logf("the background run's log:\n%s", log)
		}
		vlctl(t, 3*time.Minute, "rm", "--force", rd, "ga")
	})
	// The guest agent answers once the guest has booted.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		_, errOut, code := vlctlIO(t, "", "exec", rd, "ga", "--timeout", "10s", "--", "true")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vlctl exec ga -- true still fails 3 min after the run started: %s", errOut)
		}
	}

	// exec: output, error output and status come back; -i gives input.
	out, errOut, code := vlctlIO(t, "", "exec", rd, "ga", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if code != 3 || out != "to-stdout\n" || errOut != "to-stderr\n" {
		t.Errorf("vlctl exec: exit %d, stdout %q, stderr %q; want 3, to-stdout, to-stderr", code, out, errOut)
	}
	if out, errOut, code := vlctlIO(t, "given input\n", "exec", rd, "-i", "ga", "--", "cat"); code != 0 || out != "given input\n" {
		t.Errorf("vlctl exec -i ga -- cat: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := vlctlIO(t, "", "exec", rd, "ga", "/no/such/program"); code == 0 || !strings.Contains(errOut, "vlctl exec NAME -- COMMAND") {
		t.Errorf("vlctl exec without --: exit %d, %q", code, errOut)
	}

	// cp: in, checked by the guest, and back out.
	data := make([]byte, 300<<10+17)
	rand.Read(data)
	sum := sha256.Sum256(data)
	local := filepath.Join(tmp, "data.bin")
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := vlctlIO(t, "", "cp", rd, local, "ga:/tmp/"); code != 0 { // into a directory: by its name
		t.Fatalf("vlctl cp into the guest: exit %d: %s", code, errOut)
	}
	if out, errOut, code := vlctlIO(t, "", "exec", rd, "ga", "--", "sha256sum", "/tmp/data.bin"); code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") {
		t.Errorf("sha256sum in the guest: exit %d, %q %s; want %x", code, out, errOut, sum)
	}
	back := filepath.Join(tmp, "back.bin")
	if _, errOut, code := vlctlIO(t, "", "cp", rd, "ga:/tmp/data.bin", back); code != 0 {
		t.Fatalf("vlctl cp out of the guest: exit %d: %s", code, errOut)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the file back from the guest: %d bytes, %v; want the %d bytes sent", len(got), err, len(data))
	}
	if _, errOut, code := vlctlIO(t, "", "cp", rd, "ga:/no/such/file", back); code == 0 || !strings.Contains(errOut, "/no/such/file") {
		t.Errorf("vlctl cp of a missing guest file: exit %d, %q", code, errOut)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Error("a failed vlctl cp changed the local file")
	}

	// vnc: a VNC client's handshake and one framebuffer update.
	if _, errOut, code := vlctlIO(t, "", "vnc", rd, "ga", "--listen", "0.0.0.0:0"); code == 0 || !strings.Contains(errOut, "--allow-remote") {
		t.Errorf("vlctl vnc --listen 0.0.0.0:0: exit %d, %q; want a refusal naming --allow-remote", code, errOut)
	}
	vnc, vncOut, vncErr, vncExited := startVlctl(t, "vnc", rd, "ga")
	waitFor(t, "vlctl vnc's address", time.Minute, vncExited, func() bool { return strings.Contains(vncOut.String(), "\n") })
	addr := strings.TrimSpace(vncOut.String())
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("vlctl vnc printed %q, want a loopback address", addr)
	}
	w, h := rfbSession(t, addr)
	t.Logf("VNC at %s: a %dx%d display", addr, w, h)
	// Another user's process on this machine gets no display; the same
	// client as root gets the server's version.
	uid, gid, err := pod.LookupUser(launchertest.TestUser)
	if err != nil {
		t.Fatal(err)
	}
	viewer := func(as *syscall.Credential) string {
		c := exec.Command("bash", "-c", `exec 3<>"/dev/tcp/${0%:*}/${0##*:}" && timeout 10 head -c 12 <&3`, addr)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: as}
		out, _ := c.Output()
		return string(out)
	}
	if got := viewer(&syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}); got != "" {
		t.Errorf("a viewer of uid %d got %q from vlctl vnc", uid, got)
	}
	if got := viewer(nil); got != "RFB 003.008\n" {
		t.Errorf("a viewer of root's got %q from vlctl vnc, want the RFB version", got)
	}
	waitFor(t, "vlctl vnc's refusal", 10*time.Second, vncExited, func() bool {
		return strings.Contains(vncErr.String(), fmt.Sprintf("a process of uid %d, neither root nor the user who ran vlctl", uid))
	})
	vnc.Process.Signal(os.Interrupt)
	if c := exitCode(t, "vlctl vnc", vnc, vncExited, 30*time.Second); c != 0 {
		t.Errorf("vlctl vnc after Ctrl-C: exit %d: %s", c, vncErr.String())
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after vlctl vnc ended", addr)
	}

	// screenshot: a PNG of the display's size, the file given as
	// vlctl screenshot NAME FILE.png or with -o.
	for i, form := range [][]string{{"ga"}, {"ga", "-o"}} {
		shot := filepath.Join(tmp, fmt.Sprintf("screen%d.png", i))
		args := append(append([]string{"screenshot", rd}, form...), shot)
		if _, errOut, code := vlctlIO(t, "", args...); code != 0 {
			t.Fatalf("vlctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		if f, err := os.Open(shot); err != nil {
			t.Error(err)
		} else {
			cfg, err := png.DecodeConfig(f)
			f.Close()
			if err != nil || cfg.Width != w || cfg.Height != h {
				t.Errorf("vlctl %s: %dx%d, %v; want a PNG of %dx%d", strings.Join(args, " "), cfg.Width, cfg.Height, err, w, h)
			}
		}
	}

	// ssh: the key the accessCredentials gave vluser logs in, as vluser
	// (no -l), until the agent has put it in; the host key goes to the
	// VM's own known_hosts file; ssh's status comes back.
	state := filepath.Join(tmp, "state")
	sshArgs := []string{"ssh", rd, "ga", "-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "--"}
	var sshOut, sshErr string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(2 * time.Second) {
		sshOut, sshErr, code = vlctlIOEnv(t, []string{"XDG_STATE_HOME=" + state}, "", append(sshArgs, "id", "-un")...)
		if code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || strings.TrimSpace(sshOut) != testguest.GuestUser {
		t.Errorf("vlctl ssh ga -- id -un: exit %d, %q, stderr %s; want %s", code, sshOut, sshErr, testguest.GuestUser)
	}
	// ssh may hash the names it records (Debian's HashKnownHosts).
	knownHosts := filepath.Join(state, "vlctl", "ssh", "default_ga.known_hosts")
	if out, err := exec.Command("ssh-keygen", "-F", "ga.default.vlctl", "-f", knownHosts).CombinedOutput(); err != nil || !strings.Contains(string(out), "ssh-") {
		t.Errorf("ssh-keygen -F ga.default.vlctl -f %s: %v: %s; want the guest's key", knownHosts, err, out)
	}
	if _, errOut, code := vlctlIOEnv(t, []string{"XDG_STATE_HOME=" + state}, "", append(sshArgs, "exit", "7")...); code != 7 {
		t.Errorf("vlctl ssh ga -- exit 7: exit %d: %s", code, errOut)
	}

	// Under sudo, ssh runs as the user who ran it: their key, their
	// known_hosts.
	// Theirs to reach: t.TempDir's parent is root's alone.
	theirs, err := os.MkdirTemp("", "vlctl-ssh-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(theirs) })
	keyData, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	theirKey := filepath.Join(theirs, "id")
	if err := os.WriteFile(theirKey, keyData, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{theirs, theirKey} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	sudoEnv := []string{"SUDO_UID=" + strconv.Itoa(uid), "SUDO_GID=" + strconv.Itoa(gid), "SUDO_USER=" + launchertest.TestUser, "XDG_STATE_HOME=" + theirs}
	sudoArgs := []string{"ssh", rd, "ga", "-i", theirKey, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "--", "echo", "VL-AS-SUDO-USER"}
	if out, errOut, code := vlctlIOEnv(t, sudoEnv, "", sudoArgs...); code != 0 || strings.TrimSpace(out) != "VL-AS-SUDO-USER" {
		t.Errorf("vlctl ssh under sudo as %s: exit %d, %q: %s", launchertest.TestUser, code, out, errOut)
	}
	var st syscall.Stat_t
	theirHosts := filepath.Join(theirs, "vlctl", "ssh", "default_ga.known_hosts")
	if err := syscall.Stat(theirHosts, &st); err != nil || st.Uid != uint32(uid) {
		t.Errorf("%s: %v, owner %d; want one of %s's (%d)", theirHosts, err, st.Uid, launchertest.TestUser, uid)
	}

	if code, _, errOut := vlctl(t, 3*time.Minute, "stop", rd, "ga"); code != 0 {
		t.Errorf("vlctl stop ga: exit %d: %s", code, errOut)
	}
	if code, _, errOut := vlctl(t, time.Minute, "rm", rd, "ga"); code != 0 {
		t.Errorf("vlctl rm ga: exit %d: %s", code, errOut)
	}
	checkNothingLeft(t, root)
}

// sshKeyPair makes an ed25519 key pair without a passphrase in dir,
// commented comment, and returns the private key's path and the public
// key.
func sshKeyPair(t *testing.T, dir, comment string) (key string, pub []byte) {
	t.Helper()
	key = filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return key, pub
}

// vlctlIO runs the built vlctl with input on its standard input and
// returns its standard output, standard error and exit status.
func vlctlIO(t *testing.T, input string, args ...string) (string, string, int) {
	t.Helper()
	return vlctlIOEnv(t, nil, input, args...)
}

// vlctlIOEnv is vlctlIO with env added to vlctl's environment (sudo's
// variables left out: ssh runs as root here).
func vlctlIOEnv(t *testing.T, env []string, input string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "vlctl"), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SUDO_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("vlctl %s: no end within 3 min\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// rfbSession is a VNC client's start at addr (RFB 3.8, RFC 6143): the
// version, security None, ClientInit and ServerInit; then a
// FramebufferUpdateRequest of the whole screen, whose FramebufferUpdate
// (raw rectangles: no SetEncodings was sent) must cover it. It returns
// the display's width and height.
func rfbSession(t *testing.T, addr string) (int, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(c)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("VNC %s: %v", what, err)
		}
	}
	version := make([]byte, 12)
	_, err = io.ReadFull(r, version)
	must("version", err)
	if !strings.HasPrefix(string(version), "RFB 003.") {
		t.Fatalf("VNC version %q", version)
	}
	_, err = c.Write([]byte("RFB 003.008\n"))
	must("version", err)
	n, err := r.ReadByte()
	must("security types", err)
	types := make([]byte, n)
	_, err = io.ReadFull(r, types)
	must("security types", err)
	if n == 0 || !bytes.Contains(types, []byte{1}) {
		t.Fatalf("VNC security types %v: no None (1)", types)
	}
	_, err = c.Write([]byte{1})
	must("security", err)
	var result uint32
	must("security result", binary.Read(r, binary.BigEndian, &result))
	if result != 0 {
		t.Fatalf("VNC security result %d", result)
	}
	_, err = c.Write([]byte{1}) // ClientInit: shared
	must("ClientInit", err)
	var init struct {
		W, H       uint16
		BPP, Depth uint8
		Rest       [14]byte
		NameLen    uint32
	}
	must("ServerInit", binary.Read(r, binary.BigEndian, &init))
	name := make([]byte, min(init.NameLen, 4096))
	_, err = io.ReadFull(r, name)
	must("ServerInit name", err)
	if init.W == 0 || init.H == 0 || init.BPP%8 != 0 || init.BPP == 0 {
		t.Fatalf("VNC ServerInit: %dx%d, %d bits a pixel", init.W, init.H, init.BPP)
	}
	req := []byte{3, 0, 0, 0, 0, 0}
	req = binary.BigEndian.AppendUint16(req, init.W)
	req = binary.BigEndian.AppendUint16(req, init.H)
	_, err = c.Write(req)
	must("FramebufferUpdateRequest", err)
	var hdr struct {
		Type, Pad uint8
		Rects     uint16
	}
	must("FramebufferUpdate", binary.Read(r, binary.BigEndian, &hdr))
	if hdr.Type != 0 || hdr.Rects == 0 {
		t.Fatalf("VNC answer to FramebufferUpdateRequest: message type %d with %d rectangles, want a FramebufferUpdate (0)", hdr.Type, hdr.Rects)
	}
	area := 0
	for i := 0; i < int(hdr.Rects); i++ {
		var rect struct {
			X, Y, W, H uint16
			Encoding   int32
		}
		must("rectangle", binary.Read(r, binary.BigEndian, &rect))
		if rect.Encoding != 0 {
			t.Fatalf("VNC rectangle %d: encoding %d, want raw (0)", i, rect.Encoding)
		}
		_, err := io.CopyN(io.Discard, r, int64(rect.W)*int64(rect.H)*int64(init.BPP/8))
		must(fmt.Sprintf("rectangle %d's pixels", i), err)
		area += int(rect.W) * int(rect.H)
	}
	if area != int(init.W)*int(init.H) {
		t.Errorf("VNC FramebufferUpdate covers %d pixels, want the whole %dx%d screen", area, init.W, init.H)
	}
	return int(init.W), int(init.H)
}
