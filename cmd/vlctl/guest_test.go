package main

import (
	"bytes"
	"image/png"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

func TestParseCp(t *testing.T) {
	for _, c := range []struct {
		a, b     string
		src, dst cpEnd
		err      string
	}{
		{a: "f.txt", b: "vm:/tmp/f", src: cpEnd{path: "f.txt"}, dst: cpEnd{vm: "vm", path: "/tmp/f"}},
		{a: "ns/vm:/etc/hosts", b: "-", src: cpEnd{vm: "ns/vm", path: "/etc/hosts"}, dst: cpEnd{path: "-"}},
		{a: "./a:b", b: "vm:/x", src: cpEnd{path: "./a:b"}, dst: cpEnd{vm: "vm", path: "/x"}},
		{a: "/abs/a:b", b: "vm:/x", src: cpEnd{path: "/abs/a:b"}, dst: cpEnd{vm: "vm", path: "/x"}},
		{a: "a", b: "b", err: "exactly one of"},
		{a: "vm:/a", b: "vm:/b", err: "exactly one of"},
		{a: "f", b: "vm:rel/path", err: `the guest's path in "vm:rel/path" must be absolute`},
		{a: "vm:x", b: "f", err: `the guest's path in "vm:x" must be absolute`},
	} {
		src, dst, err := parseCp(c.a, c.b)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("cp %s %s: %v, want an error with %q", c.a, c.b, err, c.err)
			}
			continue
		}
		if err != nil || src != c.src || dst != c.dst {
			t.Errorf("cp %s %s: %+v %+v %v; want %+v %+v", c.a, c.b, src, dst, err, c.src, c.dst)
		}
	}
}

func TestSSHArgs(t *testing.T) {
	e := &runrecord.Entry{Record: runrecord.Record{Name: "web", Namespace: "prod", VMI: &v1.VirtualMachineInstance{
		Spec: v1.VirtualMachineInstanceSpec{AccessCredentials: []v1.AccessCredential{
			{UserPassword: &v1.UserPasswordAccessCredential{}},
			{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{
				QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{"fedora", "other"}}}}},
		}}}}}
	got := sshArgs(sshRequest{login: "fedora", options: []string{"StrictHostKeyChecking=yes"}, identity: "/k", command: []string{"uname", "-a"}},
		e, "/usr/bin/vl'ctl%", "/tmp/vlctl-ssh-1/guest", "/home/a/.local/state/vlctl/ssh/prod_web.known_hosts")
	want := []string{
		"-o", "StrictHostKeyChecking=yes", // the user's first: ssh keeps an option's first value
		"-o", `ProxyCommand='/usr/bin/vl'\''ctl%%' ssh-relay '/tmp/vlctl-ssh-1/guest'`,
		"-o", "HostKeyAlias=web.prod.vlctl",
		"-o", "UserKnownHostsFile='/home/a/.local/state/vlctl/ssh/prod_web.known_hosts'",
		"-o", "StrictHostKeyChecking=accept-new",
		"-o", "CheckHostIP=no",
		"-l", "fedora",
		"-i", "/k",
		"web.prod.vlctl", "--", "uname", "-a",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ssh arguments:\n%q\nwant\n%q", got, want)
	}
	if got := sshArgs(sshRequest{login: "root"}, e, "/v", "/s", "/k"); !slices.Contains(got, "root") || slices.Contains(got, "fedora") {
		t.Errorf("-l root: %q", got)
	}
	if got := sshArgs(sshRequest{}, e, "/v", "/s", "/k"); slices.Contains(got, "-l") {
		t.Errorf("no login: %q", got)
	}
}

// TestSSHLogin: without -l, vlctl ssh logs in as the user the manifest
// names: the accessCredentials' guest agent users first, then the
// cloud-init user-data's user: or first named users: entry; -o User=
// leaves it to ssh; a manifest naming none is an error asking for -l.
func TestSSHLogin(t *testing.T) {
	agent := v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{
		QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{"fedora"}}}}}
	noCloud := func(userData string) v1.Volume {
		return v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: userData}}}
	}
	for _, c := range []struct {
		name    string
		r       sshRequest
		creds   []v1.AccessCredential
		volumes []v1.Volume
		want    string
		err     string
	}{
		{name: "-l", r: sshRequest{login: "root"}, creds: []v1.AccessCredential{agent}, want: "root"},
		{name: "agent users", creds: []v1.AccessCredential{agent}, volumes: []v1.Volume{noCloud("#cloud-config\nuser: debian\n")}, want: "fedora"},
		{name: "user:", volumes: []v1.Volume{noCloud("#cloud-config\nuser: debian\nssh_authorized_keys:\n- ssh-ed25519 AAAA k\n")}, want: "debian"},
		{name: "user: as a map", volumes: []v1.Volume{noCloud("#cloud-config\nuser:\n  name: alma\n")}, want: "alma"},
		{name: "users:", volumes: []v1.Volume{noCloud("#cloud-config\nusers:\n- default\n- name: ops\n  ssh_authorized_keys: [ssh-ed25519 AAAA k]\n- name: other\n")}, want: "ops"},
		{name: "config drive, base64", volumes: []v1.Volume{{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{
			UserDataBase64: "I2Nsb3VkLWNvbmZpZwp1c2VyOiBjZW50b3MK"}}}}, want: "centos"},
		{name: "-o User=", r: sshRequest{options: []string{"User=admin"}}, want: ""},
		{name: "-o user", r: sshRequest{options: []string{"user admin"}}, want: ""},
		{name: "default user only", volumes: []v1.Volume{noCloud("#cloud-config\nusers: [default]\nssh_authorized_keys: [k]\n")}, err: "give -l USER"},
		{name: "a script", volumes: []v1.Volume{noCloud("#!/bin/sh\nuseradd x\n")}, err: "give -l USER"},
		{name: "nothing", err: "default/web names none"},
		{name: "bad yaml", volumes: []v1.Volume{noCloud("#cloud-config\nuser: [\n")}, err: "the user-data of volume ci"},
	} {
		e := &runrecord.Entry{Record: runrecord.Record{Name: "web", Namespace: "default", VMI: &v1.VirtualMachineInstance{
			Spec: v1.VirtualMachineInstanceSpec{AccessCredentials: c.creds, Volumes: c.volumes}}}}
		got, err := sshLogin(c.r, e)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %q, %v; want an error with %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestASPNG(t *testing.T) {
	ppm := append([]byte("P6\n2 1\n255\n"), 255, 0, 0, 0, 0, 255)
	out, err := asPNG("image/x-portable-pixmap", ppm)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 2 || b.Dy() != 1 {
		t.Fatalf("size %v", b)
	}
	if r, g, b, _ := img.At(1, 0).RGBA(); r != 0 || g != 0 || b != 0xffff {
		t.Errorf("pixel (1,0) = %d %d %d, want blue", r, g, b)
	}
	if same, err := asPNG("image/png", out); err != nil || !bytes.Equal(same, out) {
		t.Errorf("a PNG is not passed on unchanged: %v", err)
	}
	for _, c := range []struct{ mime, data, err string }{
		{"image/x-portable-pixmap", "P6\n2 1\n255\n\x00\x00", "pixels"},
		{"image/x-portable-pixmap", "P6\n2 1\n65535\n", "maxval"},
		{"image/x-portable-pixmap", "P5\n2 1\n255\n", "header"},
		{"image/png", "not a png", "PNG"},
		{"image/gif", "GIF89a", "neither PNG nor PPM"},
	} {
		if _, err := asPNG(c.mime, []byte(c.data)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s %q: %v, want an error with %q", c.mime, c.data, err, c.err)
		}
	}
}

// TestGuestAccessArgs: the commands refuse a bad form before anything is
// looked up or connected.
func TestGuestAccessArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"exec", "vm", "ls"}, "vlctl exec NAME -- COMMAND"},
		{[]string{"exec", "vm", "--timeout", "0", "--", "ls"}, "--timeout 0s: must be more than 0"},
		{[]string{"ssh", "vm", "ls"}, "vlctl ssh NAME -- COMMAND"},
		{[]string{"ssh", "vm", "--port", "0"}, "--port 0"},
		{[]string{"vnc", "vm", "--listen", "0.0.0.0:5900"}, "not a loopback address; VNC has no password or encryption here, so give --allow-remote"},
		{[]string{"vnc", "vm", "--listen", "5900"}, `--listen "5900"`},
		{[]string{"screenshot", "vm"}, "-o FILE.png"},
		{[]string{"screenshot", "vm", "a.png", "-o", "b.png"}, "give the file once"},
		{[]string{"cp", "a", "b"}, "exactly one of"},
	} {
		var cmd = newGuestAccessCmds()[0]
		for _, k := range newGuestAccessCmds() {
			if k.Name() == c.args[0] {
				cmd = k
			}
		}
		cmd.SetArgs(c.args[1:])
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("vlctl %s: %v, want an error with %q", strings.Join(c.args, " "), err, c.err)
		}
	}
}

// TestRelayStdioEnds: ssh's ProxyCommand ends when vlctl closes the
// connection (the guest's port did not answer) though ssh's input stays
// open, and carries the guest's answer after ssh's input ended.
func TestRelayStdioEnds(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "guest")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept() // closed at once: the guest did not answer
		if err == nil {
			c.Close()
		}
		c, err = l.Accept() // an echo of what came, after its end
		if err == nil {
			b, _ := io.ReadAll(c)
			c.Write(append([]byte("got "), b...))
			c.Close()
		}
	}()
	in, w := io.Pipe() // ssh's input, never ended
	defer w.Close()
	done := make(chan error, 1)
	go func() { done <- relayStdio(sock, in, io.Discard) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("relayStdio: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("relayStdio still runs 10 s after the connection was closed")
	}
	var out bytes.Buffer
	if err := relayStdio(sock, strings.NewReader("hello"), &out); err != nil || out.String() != "got hello" {
		t.Errorf("relayStdio: %q, %v; want got hello", out.String(), err)
	}
}
