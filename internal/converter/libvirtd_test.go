package converter_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// startLibvirtd starts a private session-mode daemon (internal/libvirtd) as
// the unprivileged virtlauncher user, in a temporary directory: never the
// system daemon, never /run/libvirt.
func startLibvirtd(t *testing.T) *libvirt.Libvirt {
	t.Helper()
	if _, _, err := libvirtd.FindDaemon(); err != nil {
		t.Fatalf("no libvirt daemon installed: %v", err)
	}
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "cvd") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("virtlauncher")
		if err != nil {
			t.Fatalf("user virtlauncher missing (run scripts/install-deps): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := libvirtd.Start(ctx, libvirtd.Config{
		Dir:        filepath.Join(dir, "private", "libvirt"),
		RuntimeDir: filepath.Join(dir, "run"),
		CacheHome:  filepath.Join(dir, "private"),
		Credential: cred,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start libvirt daemon: %v", err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.Socket()), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI(d.URI())); err != nil {
		t.Fatalf("connect %s: %v", d.Socket(), err)
	}
	t.Cleanup(func() { l.Disconnect() })
	return l
}

var tpmRE = regexp.MustCompile(`(?s)\s*<tpm .*?</tpm>`)

// defineAndCheck defines doc with libvirt's own validation
// (virsh define --validate), reads it back and undefines it.
func defineAndCheck(t *testing.T, l *libvirt.Libvirt, doc string) string {
	t.Helper()
	dom, err := l.DomainDefineXMLFlags(doc, libvirt.DomainDefineValidate)
	if err != nil {
		t.Fatalf("libvirt refuses the domain: %v\n%s", err, doc)
	}
	defer func() {
		if err := l.DomainUndefineFlags(dom, libvirt.DomainUndefineNvram); err != nil {
			t.Errorf("undefine: %v", err)
		}
	}()
	back, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
	if err != nil {
		t.Fatalf("dump defined domain: %v", err)
	}
	return back
}

// TestDefineInLibvirtd defines the domain of vmi-fedora.yaml (under TCG, as
// this machine has no usable KVM) and every golden domain in a real libvirt
// daemon: the schema is not all libvirt checks.
func TestDefineInLibvirtd(t *testing.T) {
	l := startLibvirtd(t)
	t.Run("vmi-fedora", func(t *testing.T) {
		v, err := vmi.LoadFile(filepath.Join(corpusDir(t), "vmi-fedora.yaml"), vmi.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c := facts.Default(layout.Default())
		c.Emulation = true
		dom, err := converter.Convert(v, c)
		if err != nil {
			t.Fatal(err)
		}
		back := defineAndCheck(t, l, convtest.Validate(t, dom))
		for _, want := range []string{"<name>default_vmi-fedora</name>", "type='qemu'", "<cpu mode='maximum'", "<uid>" + string(v.UID) + "</uid>",
			"<target dev='tap0' managed='no'/>", "model='pcie-root-port'"} {
			if !strings.Contains(back, want) {
				t.Errorf("defined domain lacks %s:\n%s", want, back)
			}
		}
	})
	goldens, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.xml"))
	for _, g := range goldens {
		base := filepath.Base(g)
		t.Run("golden/"+base, func(t *testing.T) {
			if base == "arm64.xml" {
				if _, err := os.Stat("/usr/bin/qemu-system-aarch64"); err != nil {
					t.Skip("qemu-system-aarch64 is not installed: libvirt cannot define an aarch64 domain here")
				}
			}
			doc, err := os.ReadFile(g)
			if err != nil {
				t.Fatal(err)
			}
			// No usable KVM here: the daemon reports no kvm domain type, so
			// the kvm goldens are defined as qemu (TCG) domains; everything
			// else in them is checked as written.
			xml := strings.Replace(string(doc), `<domain type="kvm">`, `<domain type="qemu">`, 1)
			if _, err := exec.LookPath("swtpm"); err != nil && strings.Contains(xml, "<tpm ") {
				// libvirt refuses an emulated TPM when swtpm is not installed
				// ("TPM version '2.0' is not supported"): check the rest.
				t.Log("swtpm is not installed: defining without the <tpm> device")
				xml = tpmRE.ReplaceAllString(xml, "")
			}
			defineAndCheck(t, l, xml)
		})
	}
}
