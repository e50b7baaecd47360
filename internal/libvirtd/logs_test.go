package libvirtd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// bootDomain boots the test guest's kernel and initrd (no disks, no
// network) with its serial console on a unix socket and logged to a file,
// as the converter does.
const bootDomain = `<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type>
    <kernel>%s</kernel><initrd>%s</initrd>
    <cmdline>%s vl.nodhcp=1 vl.noshell=1</cmdline></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='unix'><source mode='bind' path='%s'/><log file='%s'/><target port='0'/></serial>
  </devices>
</domain>`

// TestLogs boots the real test guest in a daemon without virtlogd (the
// default) and in one with it, and checks in both that the guest's console
// output reaches the serial log file and QEMU's own output the domain log
// the monitor relays. Without virtlogd: no virtlogd process or socket, and
// the daemon loaded the QEMU driver module alone. With virtlogd: kill -9
// of virtlogd restarts it and leaves the guest running.
func TestLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel) // not defer: the parallel subtests run after we return
	testenv.Need(t, "the libvirt daemon and QEMU", nil)
	guest, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	for _, withLogd := range []bool{false, true} {
		name := "without virtlogd"
		if withLogd {
			name = "with virtlogd"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.Virtlogd = withLogd
			d, err := Start(ctx, cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Stop(context.Background())
			mainPid, logdPid := d.Pids()
			if d.Virtlogd() != withLogd || (logdPid != 0) != withLogd {
				t.Fatalf("Virtlogd() %v, virtlogd pid %d; want virtlogd %v", d.Virtlogd(), logdPid, withLogd)
			}
			if _, err := os.Stat(d.LogSocket()); (err == nil) != withLogd {
				t.Errorf("virtlogd socket %s: %v (want it only with virtlogd)", d.LogSocket(), err)
			}
			if !withLogd {
				checkOnlyQEMUDriver(t, mainPid)
			}

			// The guest's files: the serial socket and log in a directory
			// of the daemon's user, like the launcher's private VMI dir.
			vmiDir := filepath.Join(filepath.Dir(cfg.Dir), "vmi")
			must(t, os.Mkdir(vmiDir, 0o700))
			if cr := cfg.Credential; cr != nil {
				must(t, os.Chown(vmiDir, int(cr.Uid), int(cr.Gid)))
			}
			serialLog := filepath.Join(vmiDir, "virt-serial0-log")
			dom := "lvd-logs"
			l := connect(t, d)
			defer l.Disconnect()
			def, err := l.DomainDefineXML(fmt.Sprintf(bootDomain, dom, guest.Kernel, guest.Initrd,
				testguest.DefaultCmdline, filepath.Join(vmiDir, "serial"), serialLog))
			if err != nil {
				t.Fatalf("define: %v", err)
			}
			defer l.DomainUndefine(def)
			if err := l.DomainCreate(def); err != nil {
				t.Fatalf("start: %v", err)
			}
			defer l.DomainDestroy(def)
			qpid := qemuPid(t, d, dom)

			out := waitFile(t, ctx, serialLog, testguest.MarkerBooted)
			t.Logf("serial log has the guest's %s line (%d bytes)", testguest.MarkerBooted, len(out))
			domLog := filepath.Join(d.LogDir(), dom+".log")
			if b, err := os.ReadFile(domLog); err != nil || !strings.Contains(string(b), "qemu-system-x86_64") {
				t.Errorf("domain log %s lacks QEMU's command line (%v):\n%s", domLog, err, b)
			}

			if !withLogd {
				return
			}
			must(t, syscall.Kill(logdPid, syscall.SIGKILL))
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, p := d.Pids(); p != 0 && p != logdPid {
					t.Logf("virtlogd %d restarted as %d", logdPid, p)
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("virtlogd was not restarted after kill -9")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !alive(qpid) {
				t.Fatalf("QEMU %d died with virtlogd", qpid)
			}
			state, _, err := l.DomainGetState(def, 0)
			if err != nil || libvirt.DomainState(state) != libvirt.DomainRunning {
				t.Errorf("state after the virtlogd kill %v, %v; want running", state, err)
			}
		})
	}
}

// checkOnlyQEMUDriver checks the daemon mapped the QEMU driver module and
// none of the others Debian installs.
func checkOnlyQEMUDriver(t *testing.T, pid int) {
	t.Helper()
	if _, err := findQEMUDriver(); err != nil {
		t.Logf("not checking the driver modules: %v", err)
		return
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	must(t, err)
	if !strings.Contains(string(maps), qemuDriverModule) {
		t.Errorf("daemon %d has not loaded %s", pid, qemuDriverModule)
	}
	for _, other := range []string{"libvirt_driver_network", "libvirt_driver_storage", "libvirt_driver_nodedev", "libvirt_storage_backend"} {
		if strings.Contains(string(maps), other) {
			t.Errorf("daemon %d loaded %s", pid, other)
		}
	}
}

// waitFile waits until path contains marker and returns its content.
func waitFile(t *testing.T, ctx context.Context, path, marker string) string {
	t.Helper()
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), marker) {
			return string(b)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s has no %s line:\n%s", path, marker, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
