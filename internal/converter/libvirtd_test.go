package converter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
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
	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/corpus"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// startLibvirtd starts a private session-mode daemon (internal/libvirtd) as
// the unprivileged virtlauncher user, in a temporary directory: never the
// system daemon, never /run/libvirt.
func startLibvirtd(t *testing.T) *libvirt.Libvirt {
	t.Helper()
	_, _, err := libvirtd.FindDaemon()
	testenv.Need(t, "the libvirt daemon", err)
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "cvd") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		uid, gid, err := pod.LookupUser(launchertest.TestUser)
		if err != nil {
			t.Fatal(err)
		}
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

// keptByLibvirt: what the converter writes for an annotation, and how it
// must read back from libvirt.
var keptByLibvirt = map[string]string{
	`<pcihole64 unit="KiB">0</pcihole64>`: "<pcihole64 unit='KiB'>0</pcihole64>",
	`<arg value="-fw_cfg"></arg>`:         "<qemu:arg value='-fw_cfg'/>",
}

var (
	tpmRE          = regexp.MustCompile(`(?s)\s*<tpm .*?</tpm>`)
	tscRE          = regexp.MustCompile(`<timer name="tsc" frequency="(\d+)">`)
	hostdevAliasRE = regexp.MustCompile(`<alias name="(ua-(?:hostdevice|gpu|usb-host|dra-gpu|dra-hostdevice|sriov)-[^"]+)">`)
	// A PCI address the converter wrote (a pciAddress of the spec).
	pciAddrRE = regexp.MustCompile(`<address type="pci" domain="(\w+)" bus="(\w+)" slot="(\w+)" function="(\w+)">`)
)

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
		v, err := vmi.LoadFile(corpus.File(t, "vmi-fedora.yaml"), vmi.Options{})
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
		// KubeVirt's example: P = 4 - 1 NIC = 3 kept for NICs, E = 0.
		if got := freeRootPorts(t, back); got != 3 {
			t.Errorf("%d free pcie-root-ports, want 3 (KubeVirt's count for vmi-fedora)", got)
		}
		for _, want := range []string{"<name>default_vmi-fedora</name>", "type='qemu'", "<cpu mode='maximum'", "<uid>" + string(v.UID) + "</uid>",
			"<target dev='tap0' managed='no'/>", "model='pcie-root-port'"} {
			if !strings.Contains(back, want) {
				t.Errorf("defined domain lacks %s:\n%s", want, back)
			}
		}
	})
	goldens, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	for _, g := range goldens {
		base := filepath.Base(g)
		t.Run("golden/"+base, func(t *testing.T) {
			v, err := vmi.LoadFile(g, vmi.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if v.Spec.Architecture == "arm64" || v.Spec.Architecture == "s390x" {
				if _, err := exec.LookPath(qemuBinary[v.Spec.Architecture]); err != nil {
					t.Skipf("%s is not installed: libvirt cannot define a %s domain here", qemuBinary[v.Spec.Architecture], v.Spec.Architecture)
				}
			}
			c := facts.Default(layout.Default())
			if fix := goldenFacts[base]; fix != nil {
				fix(c)
			}
			dom, err := converter.Convert(v, c)
			if err != nil {
				t.Fatal(err)
			}
			// No usable KVM here: the daemon reports no kvm domain type, so
			// the kvm goldens are defined as qemu (TCG) domains; everything
			// else in them is checked as written.
			xml := strings.Replace(convtest.Validate(t, dom), `<domain type="kvm">`, `<domain type="qemu">`, 1)
			if _, err := exec.LookPath("swtpm"); err != nil && strings.Contains(xml, "<tpm ") {
				// libvirt refuses an emulated TPM when swtpm is not installed
				// ("TPM version '2.0' is not supported"): check the rest.
				t.Log("swtpm is not installed: defining without the <tpm> device")
				xml = tpmRE.ReplaceAllString(xml, "")
			}
			back := defineAndCheck(t, l, xml)
			for _, m := range pciAddrRE.FindAllStringSubmatch(xml, -1) {
				if want := fmt.Sprintf("<address type='pci' domain='%s' bus='%s' slot='%s' function='%s'", m[1], m[2], m[3], m[4]); !strings.Contains(back, want) {
					t.Errorf("libvirt moved a device placed at %s:\n%s", m[0], back)
				}
			}
			// Every host device kept, with its alias (the hotplug of SR-IOV
			// interfaces finds them by it) and a mediated device's display.
			if a, b := strings.Count(xml, "<hostdev "), strings.Count(back, "<hostdev "); a != b {
				t.Errorf("%d host devices written, %d defined:\n%s", a, b, back)
			}
			for _, m := range hostdevAliasRE.FindAllStringSubmatch(xml, -1) {
				if !strings.Contains(back, "<alias name='"+m[1]+"'/>") {
					t.Errorf("libvirt dropped the alias %s:\n%s", m[1], back)
				}
			}
			if a, b := strings.Count(xml, `display="on"`), strings.Count(back, "display='on'"); a != b {
				t.Errorf("%d displays on host devices written, %d defined:\n%s", a, b, back)
			}
			for written, kept := range keptByLibvirt {
				if strings.Contains(xml, written) && !strings.Contains(back, kept) {
					t.Errorf("libvirt dropped %s (no %s):\n%s", written, kept, back)
				}
			}
			if m := tscRE.FindStringSubmatch(xml); m != nil && !strings.Contains(back, "<timer name='tsc' frequency='"+m[1]+"'/>") {
				t.Errorf("libvirt dropped the tsc timer at %s Hz:\n%s", m[1], back)
			}
			// The spare root ports must still be free once libvirt has
			// placed every device (KubeVirt's hotplug reserve, B.8). When it
			// adds a pcie-to-pci-bridge for conventional PCI devices,
			// libvirt also adds one root port of its own, so one more may
			// be free; with 31 ports the count is capped.
			want := compute.SpareRootPorts(v, c, dom)
			got := freeRootPorts(t, back)
			if rootPorts(back) < 31 && (got < want || got > want+1) {
				t.Errorf("%d free pcie-root-ports after define, want %d:\n%s", got, want, back)
			}
		})
	}
}

var (
	rootPortRE = regexp.MustCompile(`<controller type='pci' index='(\d+)' model='pcie-root-port'`)
	pciBusRE   = regexp.MustCompile(`<address type='pci' domain='0x[0-9a-f]+' bus='(0x[0-9a-f]+)'`)
)

func rootPorts(doc string) int { return len(rootPortRE.FindAllString(doc, -1)) }

// freeRootPorts counts the pcie-root-ports of a domain as libvirt wrote it
// back that no device (or bridge) sits behind.
func freeRootPorts(t *testing.T, doc string) int {
	t.Helper()
	used := map[uint64]bool{}
	for _, m := range pciBusRE.FindAllStringSubmatch(doc, -1) {
		bus, err := strconv.ParseUint(m[1], 0, 32)
		if err != nil {
			t.Fatal(err)
		}
		used[bus] = true
	}
	free := 0
	for _, m := range rootPortRE.FindAllStringSubmatch(doc, -1) {
		idx, _ := strconv.ParseUint(m[1], 10, 32)
		if !used[idx] {
			free++
		}
	}
	return free
}

var qemuBinary = map[string]string{"arm64": "qemu-system-aarch64", "s390x": "qemu-system-s390x"}
