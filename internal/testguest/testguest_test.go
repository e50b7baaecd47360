package testguest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/disks"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// qemuVM is one QEMU this test started, with its serial console captured.
type qemuVM struct {
	t       *testing.T
	cmd     *exec.Cmd
	mon     string
	started time.Time
	in      io.WriteCloser // the serial console's input

	mu      sync.Mutex
	out     strings.Builder
	changed chan struct{} // closed and replaced on every new line
	exited  chan struct{}
	waitErr error
}

func startQEMU(t *testing.T, dir string, args ...string) *qemuVM {
	t.Helper()
	v := &qemuVM{t: t, mon: filepath.Join(dir, "mon.sock"), changed: make(chan struct{}), exited: make(chan struct{})}
	base := []string{"-accel", "tcg", "-M", "q35", "-m", "256", "-smp", "1", "-display", "none",
		"-no-reboot", "-serial", "stdio", "-monitor", "unix:" + v.mon + ",server=on,wait=off"}
	v.cmd = exec.Command("qemu-system-x86_64", append(base, args...)...)
	stdout, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if v.in, err = v.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = v.cmd.Stdout
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go v.read(stdout)
	t.Cleanup(func() {
		select {
		case <-v.exited:
		default:
			_ = v.cmd.Process.Kill() // only the QEMU this test started
			<-v.exited
		}
		if t.Failed() {
			t.Logf("console of %s:\n%s", t.Name(), v.output())
		}
	})
	return v
}

func (v *qemuVM) read(r io.Reader) {
	// Read as it comes, not by lines: a login prompt ends no line.
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			v.mu.Lock()
			v.out.WriteString(strings.ReplaceAll(string(buf[:n]), "\r", ""))
			close(v.changed)
			v.changed = make(chan struct{})
			v.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	err := v.cmd.Wait()
	v.mu.Lock()
	v.waitErr = err
	v.mu.Unlock()
	close(v.exited)
}

func (v *qemuVM) output() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.out.String()
}

// wait waits until match finds what it looks for in the console output,
// checking once more after QEMU exited; what names it in a failure.
func (v *qemuVM) wait(what string, timeout time.Duration, match func(out string) bool) {
	v.t.Helper()
	deadline := time.After(timeout)
	for {
		v.mu.Lock()
		out, ch := v.out.String(), v.changed
		v.mu.Unlock()
		if match(out) {
			return
		}
		select {
		case <-ch:
		case <-v.exited:
			if match(v.output()) {
				return
			}
			v.t.Fatalf("QEMU exited (%v) before %s", v.waitErr, what)
		case <-deadline:
			v.t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// waitFor waits for a console line holding marker and returns its arguments
// and when it was seen.
func (v *qemuVM) waitFor(marker string, timeout time.Duration) (string, time.Duration) {
	v.t.Helper()
	var rest string
	v.wait(marker, timeout, func(out string) (found bool) {
		rest, found = FindMarker(out, marker)
		return found
	})
	return rest, time.Since(v.started)
}

// waitText waits for text anywhere in the console output after offset
// from and returns the offset just past it: a prompt is not a whole line.
func (v *qemuVM) waitText(from int, text string, timeout time.Duration) int {
	v.t.Helper()
	end := 0
	v.wait(fmt.Sprintf("%q", text), timeout, func(out string) bool {
		i := strings.Index(out[from:], text)
		end = from + i + len(text)
		return i >= 0
	})
	return end
}

// expect waits, as goexpect's ExpectSwitchCase does for KubeVirt's
// console helpers, until one of res matches the console output after
// from: they are tried in order, the first that matches anywhere wins. It
// returns that one's index, or -1 when none matched within timeout, and
// the offset past all the output read so far, which goexpect drops from
// its buffer either way.
func (v *qemuVM) expect(from int, timeout time.Duration, res ...*regexp.Regexp) (int, int) {
	deadline := time.After(timeout)
	for {
		v.mu.Lock()
		out, ch := v.out.String(), v.changed
		v.mu.Unlock()
		for i, re := range res {
			if re.MatchString(out[from:]) {
				return i, len(out)
			}
		}
		select {
		case <-ch:
		case <-v.exited:
			out = v.output()
			for i, re := range res {
				if re.MatchString(out[from:]) {
					return i, len(out)
				}
			}
			return -1, len(out)
		case <-deadline:
			return -1, len(v.output())
		}
	}
}

// send types s on the serial console.
func (v *qemuVM) send(s string) {
	v.t.Helper()
	if _, err := io.WriteString(v.in, s); err != nil {
		v.t.Fatal(err)
	}
}

// monitor sends one human-monitor command.
func (v *qemuVM) monitor(cmd string) {
	v.t.Helper()
	c, err := net.Dial("unix", v.mon)
	if err != nil {
		v.t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
		v.t.Fatal(err)
	}
	// Give the monitor time to read the command before we hang up.
	time.Sleep(200 * time.Millisecond)
}

func (v *qemuVM) waitExit(timeout time.Duration) {
	v.t.Helper()
	select {
	case <-v.exited:
	case <-time.After(timeout):
		v.t.Fatalf("QEMU still running %v after power-off", timeout)
	}
}

func buildGuest(t *testing.T) *Guest {
	t.Helper()
	testenv.Need(t, "QEMU", testenv.Installed("qemu-system-x86_64"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := Build(ctx, DefaultCacheDir())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// cloudInitISOKeys builds a NoCloud ISO as cloudInitISO does, with keys as
// an access credential's secret propagated by NoCloud (the meta-data's
// public-keys).
func cloudInitISOKeys(t *testing.T, dir, userData string, keys map[string]string) string {
	t.Helper()
	if len(keys) == 0 {
		return cloudInitISO(t, dir, userData, false)
	}
	p := &disks.Preparer{Layout: layout.Under(dir)}
	src := p.Layout.SecretSource("keys-access-cred")
	if err := os.MkdirAll(src, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, key := range keys {
		if err := os.WriteFile(filepath.Join(src, name), []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "guest", Namespace: "test"},
		Spec: v1.VirtualMachineInstanceSpec{
			Volumes: []v1.Volume{{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{
				CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: userData}}}},
			AccessCredentials: []v1.AccessCredential{{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
				Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "keys"}},
				PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}},
			}}},
		},
	}
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	return p.Layout.CloudInitNoCloudISO("test", "guest")
}

// cloudInitISO builds a NoCloud (or, configDrive, ConfigDrive) ISO with the
// disks package, as the launcher does.
func cloudInitISO(t *testing.T, dir, userData string, configDrive bool) string {
	t.Helper()
	p := &disks.Preparer{Layout: layout.Under(dir)}
	vol := v1.Volume{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: userData}}}
	if configDrive {
		vol.VolumeSource = v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: userData}}
	}
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "guest", Namespace: "test"},
		Spec:       v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{vol}},
	}
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	if configDrive {
		return p.Layout.CloudInitConfigDriveISO("test", "guest")
	}
	return p.Layout.CloudInitNoCloudISO("test", "guest")
}

const userData = "#!/bin/sh\necho USERDATA-OUTPUT $((6 * 7))\n"

// TestBoot boots the guest under plain QEMU (no libvirt) and checks what
// its init reports. The virtio run and the SATA run go in parallel; the
// virtio root disk is booted a second time to see its boot counter persist.
func TestBoot(t *testing.T) {
	g := buildGuest(t)
	t.Run("virtio", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		root := filepath.Join(dir, "root.img")
		if err := g.CopyRootDisk(root); err != nil {
			t.Fatal(err)
		}
		iso := cloudInitISO(t, dir, userData, false)
		v := startQEMU(t, dir,
			"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", DefaultCmdline,
			"-drive", "file="+root+",if=virtio,format=raw",
			"-drive", "file="+iso+",if=virtio,format=raw,readonly=on",
			"-netdev", "user,id=n0,domainname=vl.test,dnssearch=search.vl.test",
			"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56")
		_, booted := v.waitFor(MarkerBooted, 90*time.Second)
		t.Logf("virtio: %s after %v", MarkerBooted, booted.Round(10*time.Millisecond))
		if dev, _ := v.waitFor(MarkerRootMounted, 20*time.Second); dev != "/dev/vda" {
			t.Errorf("root on %q", dev)
		}
		v.waitFor(MarkerDiskWritten, 20*time.Second)
		if n, _ := v.waitFor(MarkerBootCount, 20*time.Second); n != "1" {
			t.Errorf("boot count %q", n)
		}
		if ci, _ := v.waitFor(MarkerCloudInit, 20*time.Second); ci != "nocloud /dev/vdb" {
			t.Errorf("cloud-init %q", ci)
		}
		if rc, _ := v.waitFor(MarkerUserDataRan, 20*time.Second); rc != "rc=0" {
			t.Errorf("user-data %q", rc)
		}
		out := v.output()
		if ud, ok := Between(out, MarkerUserDataBegin, MarkerUserDataEnd); !ok || ud+"\n" != userData {
			t.Errorf("user-data printed as %q", ud)
		}
		if md, ok := Between(out, MarkerMetaDataBegin, MarkerMetaDataEnd); !ok || !strings.Contains(md, `"local-hostname":"guest"`) {
			t.Errorf("meta-data printed as %q", md)
		}
		if !strings.Contains(out, "USERDATA-OUTPUT 42\n") {
			t.Error("user-data script did not run")
		}
		if nic, _ := v.waitFor(MarkerNetIf, 20*time.Second); !strings.HasPrefix(nic, "eth0 mac 52:54:00:12:34:56 mtu ") {
			t.Errorf("netif %q", nic)
		}
		dhcp, _ := v.waitFor(MarkerDHCP, 30*time.Second)
		lease, err := ParseDHCP(dhcp)
		if err != nil {
			t.Fatal(err)
		}
		if lease.Address != "10.0.2.15/24" || strings.Join(lease.Routers, ",") != "10.0.2.2" || strings.Join(lease.DNS, ",") != "10.0.2.3" ||
			strings.Join(lease.Search, ",") != "search.vl.test" || lease.Domain != "vl.test" {
			t.Errorf("lease %+v from %q", lease, dhcp)
		}
		_, ready := v.waitFor(MarkerReady, 20*time.Second)
		t.Logf("virtio: %s after %v", MarkerReady, ready.Round(10*time.Millisecond))
		v.monitor("system_powerdown")
		v.waitFor(MarkerPowerButton, 20*time.Second)
		v.waitFor(MarkerPowerOff, 20*time.Second)
		v.waitExit(10 * time.Second)

		// Same disk again, powering off by itself: the counter persisted.
		v2 := startQEMU(t, t.TempDir(),
			"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", DefaultCmdline+" "+OptPowerOff+" "+OptNoShell,
			"-drive", "file="+root+",if=virtio,format=raw", "-nic", "none")
		if n, _ := v2.waitFor(MarkerBootCount, 90*time.Second); n != "2" {
			t.Errorf("second boot count %q", n)
		}
		v2.waitFor(MarkerNoCloudInit, 20*time.Second)
		v2.waitFor(MarkerPowerOff, 20*time.Second)
		v2.waitExit(10 * time.Second)
		if _, ok := FindMarker(v2.output(), MarkerDHCP); ok {
			t.Error("DHCP without a NIC")
		}
	})
	t.Run("sata-scsi-configdrive-noacpi", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		root := filepath.Join(dir, "root.img")
		if err := g.CopyRootDisk(root); err != nil {
			t.Fatal(err)
		}
		iso := cloudInitISO(t, dir, userData, true)
		// A third disk, 1 MiB, on virtio-scsi.
		scsi := filepath.Join(dir, "scsi.img")
		if err := os.WriteFile(scsi, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		v := startQEMU(t, dir,
			"-device", "virtio-scsi-pci,id=scsi0",
			"-drive", "file="+scsi+",if=none,id=s0,format=raw", "-device", "scsi-hd,drive=s0,bus=scsi0.0",
			"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", DefaultCmdline+" "+OptNoACPI,
			"-drive", "file="+root+",if=none,id=root,format=raw", "-device", "ide-hd,drive=root,bus=ide.0",
			"-drive", "file="+iso+",if=none,id=ci,format=raw,readonly=on", "-device", "ide-cd,drive=ci,bus=ide.1",
			"-nic", "none")
		_, booted := v.waitFor(MarkerBooted, 90*time.Second)
		t.Logf("sata: %s after %v", MarkerBooted, booted.Round(10*time.Millisecond))
		// SATA and SCSI disks share the sd names; which gets sda depends on
		// probe order, so the root is found by label.
		if dev, _ := v.waitFor(MarkerRootMounted, 20*time.Second); !strings.HasPrefix(dev, "/dev/sd") {
			t.Errorf("root on %q", dev)
		}
		if ci, _ := v.waitFor(MarkerCloudInit, 20*time.Second); ci != "configdrive /dev/sr0" {
			t.Errorf("cloud-init %q", ci)
		}
		if rc, _ := v.waitFor(MarkerUserDataRan, 20*time.Second); rc != "rc=0" {
			t.Errorf("user-data %q", rc)
		}
		scsiSeen := false
		for _, l := range strings.Split(v.output(), "\n") {
			if strings.Contains(l, MarkerDisk+" sd") && strings.Contains(l, " size 2048 ") {
				scsiSeen = true
			}
		}
		if !scsiSeen {
			t.Error("no 1 MiB sd disk: the virtio-scsi disk is missing")
		}
		if md, ok := Between(v.output(), MarkerMetaDataBegin, MarkerMetaDataEnd); !ok || !strings.Contains(md, `"instance_id":"guest.test"`) {
			t.Errorf("meta_data.json printed as %q", md)
		}
		if !strings.Contains(v.output(), "USERDATA-OUTPUT 42\n") {
			t.Error("user-data script did not run")
		}
		v.waitFor(MarkerReady, 20*time.Second)
		v.monitor("system_powerdown")
		v.waitFor(MarkerACPIIgnored, 20*time.Second)
		select {
		case <-v.exited:
			t.Fatal("guest powered off despite " + OptNoACPI)
		case <-time.After(time.Second):
		}
		if _, ok := FindMarker(v.output(), MarkerPowerOff); ok {
			t.Error("power-off marker despite " + OptNoACPI)
		}
		v.monitor("quit")
		v.waitExit(10 * time.Second)
	})
}

// needBusybox makes t need the busybox Sources builds the guest from.
func needBusybox(t *testing.T) {
	t.Helper()
	_, err := os.Stat(DefaultBusybox)
	testenv.Need(t, "busybox-static", err)
}

func TestBuildCache(t *testing.T) {
	needBusybox(t)
	dir := t.TempDir()
	ctx := context.Background()
	// Concurrent builds into an empty cache all succeed with one result.
	var wg sync.WaitGroup
	res := make([]*Guest, 3)
	errs := make([]error, 3)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = Build(ctx, dir)
		}()
	}
	wg.Wait()
	for i := range res {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i].KernelDir != res[0].KernelDir {
			t.Errorf("builds disagree: %s vs %s", res[i].KernelDir, res[0].KernelDir)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want one guest and no temporaries", names)
	}
	g := res[0]
	for _, f := range []string{filepath.Join(g.KernelDir, "vmlinuz"), filepath.Join(g.KernelDir, "initrd.img"), g.RootDisk} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	if out, err := exec.Command("blkid", "-o", "value", "-s", "LABEL", g.RootDisk).Output(); err != nil || strings.TrimSpace(string(out)) != RootLabel {
		t.Errorf("root disk label %q %v", out, err)
	}
	// The initramfs lists the modules in dependency order: every module
	// after the ones it needs.
	list := run(t, "sh", "-c", "zcat "+g.Initrd+" | cpio -i --to-stdout etc/vl-modules 2>/dev/null")
	pos := map[string]int{}
	for i, l := range strings.Fields(list) {
		pos[modName(l)] = i
	}
	for _, pair := range [][2]string{{"virtio", "virtio_pci"}, {"virtio_ring", "virtio_blk"}, {"libata", "ahci"}, {"scsi_mod", "sd_mod"}, {"cdrom", "isofs"}, {"jbd2", "ext4"}, {"crc16", "ext4"}} {
		a, aok := pos[pair[0]]
		b, bok := pos[pair[1]]
		if !aok || !bok || a > b {
			t.Errorf("%s (at %d, %v) must load before %s (at %d, %v)", pair[0], a, aok, pair[1], b, bok)
		}
	}
	// With xz installed, the kernel is the uncompressed PVH vmlinux.
	if _, err := exec.LookPath("xz"); err == nil {
		if ok, err := hasPVHNote(g.Kernel); err != nil || !ok {
			t.Errorf("kernel %s: PVH note %v, %v", g.Kernel, ok, err)
		}
	}
	// A second Build reuses the cache.
	again, err := Build(ctx, dir)
	if err != nil || again.KernelDir != g.KernelDir {
		t.Errorf("rebuild: %v %v", again, err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out)
}

func TestParseDHCP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{"10.0.2.15/24 router 10.0.2.2 dns 10.0.2.3,8.8.8.8 search a.b,c.d mtu 1400 domain a.b hostname h",
			"{10.0.2.15/24 [10.0.2.2] [10.0.2.3 8.8.8.8] [a.b c.d] 1400 a.b h}", false},
		{"10.0.0.2/30 router none dns none search none mtu none domain none hostname none",
			"{10.0.0.2/30 [] [] [] 0  }", false},
		{"10.0.0.2/30 router none", "", true},
		{"10.0.0.2/30 router none dns none search none mtu x domain none hostname none", "", true},
	} {
		l, err := ParseDHCP(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseDHCP(%q): %v", tc.in, err)
			continue
		}
		if got := fmt.Sprint(l); !tc.err && got != tc.want {
			t.Errorf("ParseDHCP(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	out := "x\nVL-DISK-WRITTEN /dev/vda\nvl# VL-DISK vda size 65536 ro 0 serial none\n"
	if got, ok := FindMarker(out, MarkerDisk); !ok || got != "vda size 65536 ro 0 serial none" {
		t.Errorf("FindMarker = %q, %v", got, ok)
	}
}

func TestBuildErrors(t *testing.T) {
	needBusybox(t) // Build looks for busybox before the kernel
	ctx := context.Background()
	empty := t.TempDir()
	if _, err := (Sources{BootDir: empty}).Build(ctx, t.TempDir()); err == nil || !strings.Contains(err.Error(), "install linux-image-amd64") {
		t.Errorf("no kernel: %v", err)
	}
	// A dynamically linked "busybox" is refused: the initramfs has no libc.
	if _, err := os.Stat("/bin/sh"); err == nil {
		if _, err := (Sources{Busybox: "/bin/sh"}).Build(ctx, t.TempDir()); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("dynamic busybox: %v", err)
		}
	}
}

// BenchmarkBoot boots the guest until it powers off by itself and reports
// the time to the first marker and to VL-READY.
func BenchmarkBoot(b *testing.B) {
	g, err := Build(context.Background(), DefaultCacheDir())
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	root := filepath.Join(dir, "root.img")
	var booted, ready time.Duration
	for i := 0; i < b.N; i++ {
		if err := g.CopyRootDisk(root); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		cmd := exec.Command("qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-m", "256", "-display", "none", "-no-reboot",
			"-serial", "stdio", "-monitor", "none", "-nic", "none", "-kernel", g.Kernel, "-initrd", g.Initrd,
			"-append", DefaultCmdline+" "+OptPowerOff+" "+OptNoShell, "-drive", "file="+root+",if=virtio,format=raw")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.Contains(l, MarkerBooted):
				booted += time.Since(start)
			case strings.Contains(l, MarkerReady):
				ready += time.Since(start)
			}
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(booted.Seconds()/float64(b.N), "s-to-booted")
	b.ReportMetric(ready.Seconds()/float64(b.N), "s-to-ready")
}

// TestBIOSDiskLogin boots BIOSDisk by SeaBIOS alone (no -kernel) and logs in
// on the console as KubeVirt's functional tests log in to their alpine,
// cirros and Fedora images (tests/console: LoginToAlpine, LoginToCirros,
// LoginToFedora and the console set-up after them), then powers off or
// reboots from that shell.
func TestBIOSDiskLogin(t *testing.T) {
	g := buildGuest(t)
	for _, tool := range BIOSDiskTools() {
		testenv.Need(t, "dosfstools, mtools, syslinux", testenv.Installed(tool))
	}
	for _, tc := range []struct {
		flavour, host string
		login         func(v *qemuVM, at int) int
		prompt        string                                    // how the shell's prompt ends
		sudo          string                                    // what configureConsole puts before dmesg
		qemu          []string                                  // more QEMU arguments
		leave         string                                    // the command that ends the guest ("": the agent's guest-shutdown)
		marker        string                                    // and what the guest prints then, if anything
		more          func(v *qemuVM, at int, agentSock string) // what else the flavour's specs run
		busyboxNC     bool                                      // the image's nc is busybox's (alpine's, cirros')
		agent         *osInfo                                   // the image runs the guest agent (as its stand-in: OptAgentShutdown), telling this
		tooling       bool                                      // the image has the Fedora test tooling (OptTooling)
		userData      string                                    // a NoCloud disk with this user-data, if any
		dhcp          string                                    // more options of QEMU's user network (its DHCP server's)
		name          string                                    // the subtest's name, if not the flavour
		mdKeys        map[string]string                         // the NoCloud meta-data's public keys (access credentials')
	}{
		{flavour: LoginAlpine, host: "vlalpine", login: func(v *qemuVM, at int) int {
			v.send("\n")
			at = v.waitText(at, "vlalpine login: ", 3*time.Minute)
			v.send("root\n")
			return v.waitText(at, "vlalpine:~# ", 30*time.Second)
		}, prompt: "# ", qemu: []string{"-device", "i6300esb", "-action", "watchdog=poweroff"},
			// What KubeVirt's watchdog spec runs: the watchdog, fed, then
			// killed; its device then powers the machine off.
			leave: "watchdog -t 2000ms -T 4000ms /dev/watchdog && sleep 5 && killall -9 watchdog", busyboxNC: true},
		{flavour: LoginCirros, host: "vlcirros", login: func(v *qemuVM, at int) int {
			v.send("\n")
			at = v.waitText(at, "login as 'cirros' user. default password: 'gocubsgo'. use 'sudo' for root.", 3*time.Minute)
			v.send("\n")
			at = v.waitText(at, "vlcirros login:", 30*time.Second)
			v.send("cirros\n")
			at = v.waitText(at, "Password:", 30*time.Second)
			v.send("gocubsgo\n")
			// LoginToCirros looks for a "$" first to tell it is logged in
			// already, as a second login in one spec is.
			return v.waitText(v.waitText(at, "vlcirros:", 30*time.Second), "$ ", 30*time.Second)
		}, prompt: "$ ", sudo: "sudo ", leave: "sudo reboot", marker: MarkerReboot, more: func(v *qemuVM, at int, _ string) {
			// KubeVirt's masquerade migration spec, after the migration:
			// the lease dropped, then a new one (slirp's 10.0.2.15 here).
			v.send("sudo cirros-dhcpc down eth0; echo rc=$?\n")
			at = v.waitText(at, "\nrc=0\n", 30*time.Second)
			v.send("ip -4 addr show dev eth0 | grep -c inet; echo rc=$?\n")
			at = v.waitText(at, "\n0\nrc=1\n", 30*time.Second)
			v.send("sudo cirros-dhcpc up eth0; echo rc=$?\n")
			at = v.waitText(at, "VL-DHCP 10.0.2.15/24", 30*time.Second)
			at = v.waitText(at, "\nrc=0\n", 30*time.Second)
			v.send("ip -4 addr show dev eth0 | grep -c inet; echo rc=$?\n")
			v.waitText(at, "\n1\nrc=0\n", 30*time.Second)
		}, busyboxNC: true},
		{flavour: LoginFedoraTestTooling, host: "vlfedora", login: loginToFedora, prompt: "# ",
			// KubeVirt's Fedora VMIs have 512Mi; the SMBIOS is what the
			// SMBIOS and chassis specs set and read back.
			qemu: []string{"-m", "512", "-smbios", "type=1,manufacturer=KubeVirt,product=None,family=KubeVirt",
				"-smbios", "type=3,asset=Test-123"},
			// Passwords as cloud-init sets them: password: for the default
			// user (here vluser: fedora keeps its own for the login) and
			// chpasswd's list for a user the user-data adds.
			userData: "#cloud-config\nuser: vluser\npassword: s3cret\nusers:\n  - default\n  - name: tester\n" +
				"chpasswd:\n  expire: False\n  list: |\n    tester:t3st\n",
			// Access credentials' keys, which KubeVirt puts in the
			// meta-data for NoCloud propagation: the default user's.
			mdKeys: map[string]string{"my-key1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMdKey1 vl-md-key1",
				"my-key2": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMdKey2 vl-md-key2"},
			// DHCP options for dhclient to show (QEMU's DHCP server sends
			// the TFTP server's name as an option, the boot file in the
			// header).
			dhcp:   ",tftp-server-name=tftp.kubevirt.io,bootfile=config",
			marker: MarkerAgentShutdown, agent: &osInfo{ID: "fedora", Name: "Fedora Linux"}, tooling: true, more: func(v *qemuVM, at int, agentSock string) {
				// The image's sudo asks fedora for no password.
				v.send("su fedora -c 'id -un; sudo id -u'; echo rc=$?\n")
				at = v.waitText(at, "\nfedora\n0\nrc=0\n", 30*time.Second)
				fedoraTooling(v, at, agentSock)
			}},
		// The agent specs' user-data (5267: GetFedoraToolsGuestAgentBlacklistUserData),
		// which appends a BLACKLIST_RPC to the agent service's settings
		// before the agent starts: it must start with that command
		// blocked. The agent cannot power it off then: poweroff does.
		{flavour: LoginFedoraTestTooling, name: "fedora-agent-blocklist", host: "vlfedora", login: loginToFedora, prompt: "# ",
			qemu:     []string{"-m", "512"},
			userData: "#!/bin/bash\n            echo -e \"\\n\\nBLACKLIST_RPC=guest-shutdown\" | sudo tee -a /etc/sysconfig/qemu-ga\n",
			leave:    "poweroff", marker: MarkerPowerOff, agent: &osInfo{ID: "fedora", Name: "Fedora Linux"}, tooling: true,
			more: func(v *qemuVM, _ int, agentSock string) {
				if got := agentEnabled(v.t, agentSock); got["guest-shutdown"] || !got["guest-get-osinfo"] {
					v.t.Errorf("the agent's guest-shutdown enabled %v, guest-get-osinfo %v; want false, true",
						got["guest-shutdown"], got["guest-get-osinfo"])
				}
			}},
	} {
		name := tc.flavour
		if tc.name != "" {
			name = tc.name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			disk := filepath.Join(dir, "disk.qcow2")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := []string{OptLogin(tc.flavour), OptNoAgent}
			qemu := tc.qemu
			agentSock := filepath.Join(dir, "ga.sock")
			if tc.agent != nil {
				opts = []string{OptLogin(tc.flavour), OptAgentShutdown}
				qemu = append(qemu, "-chardev", "socket,id=ga,path="+agentSock+",server=on,wait=off",
					"-device", "virtio-serial-pci", "-device", "virtserialport,chardev=ga,name=org.qemu.guest_agent.0")
			}
			if tc.tooling {
				opts = append(opts, OptTooling)
				// A TPM, for the TPM specs' tpm2-tools: swtpm, as
				// libvirt runs it for a VMI's devices.tpm.
				qemu = append(qemu, "-chardev", "socket,id=tpm,path="+startSwtpm(t, dir),
					"-tpmdev", "emulator,id=tpm0,chardev=tpm", "-device", "tpm-tis,tpmdev=tpm0")
			}
			if tc.userData != "" {
				qemu = append(qemu, "-drive", "file="+cloudInitISOKeys(t, dir, tc.userData, tc.mdKeys)+",if=virtio,format=raw,readonly=on")
			}
			if err := g.BIOSDisk(ctx, disk, opts...); err != nil {
				t.Fatal(err)
			}
			v := startQEMU(t, dir, append([]string{"-drive", "file=" + disk + ",if=virtio,format=qcow2",
				"-netdev", "user,id=n0,hostname=" + tc.host + tc.dhcp, "-device", "virtio-net-pci,netdev=n0"}, qemu...)...)
			if got, _ := v.waitFor(MarkerLogin, 3*time.Minute); got != tc.flavour+" "+tc.host {
				t.Fatalf("%s %q, want %q", MarkerLogin, got, tc.flavour+" "+tc.host)
			}
			at := tc.login(v, 0)
			// What KubeVirt's configureConsole runs after a login.
			v.send("stty cols 500 rows 500\n")
			at = v.waitText(at, tc.prompt, 30*time.Second)
			v.send("echo rc=$?\n")
			at = v.waitText(at, "\nrc=0\n", 30*time.Second)
			v.send(tc.sudo + "dmesg -n 1; echo rc=$?\n")
			at = v.waitText(at, "\nrc=0\n", 30*time.Second)
			if tc.busyboxNC {
				// The TCP server KubeVirt's network tests start (vmnetserver),
				// and two connections to it: -k keeps it listening.
				v.send(`nc  -klp 8080 -e echo -e "Hello World!"&` + "\n")
				// The spec's clients come from another guest well after the
				// server started; here they would race its bind, so wait for
				// the listener (port 8080 is 1F90, state 0A LISTEN; busybox
				// nc listens on IPv6's any address where the kernel has it).
				v.send("until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ':1F90 [0-9A-F]*:0000 0A'; do sleep 1; done; echo listen-rc=$?\n")
				at = v.waitText(at, "\nlisten-rc=0\n", 30*time.Second)
				for range 2 {
					v.send("echo test | nc 127.0.0.1 8080 -i 1 -w 1; echo rc=$?\n")
					at = v.waitText(at, "\nHello World!\nrc=0\n", 30*time.Second)
				}
			}
			if tc.more != nil {
				tc.more(v, at, agentSock)
			}
			if tc.agent != nil {
				// KubeVirt reports the agent's guest-get-osinfo as the
				// VMI's guestOSInfo; a Fedora spec looks for "Fedora" in
				// its name.
				if info := agentOSInfo(t, agentSock); info != *tc.agent {
					t.Errorf("guest-get-osinfo: %+v, want %+v", info, *tc.agent)
				}
			}
			if tc.leave != "" {
				v.send(tc.leave + "\n")
			} else {
				// As KubeVirt's stop with the agent connected: the image
				// powers off when its agent is told to.
				agentCommand(t, agentSock, `{"execute":"guest-shutdown","arguments":{"mode":"powerdown"}}`)
			}
			if tc.marker != "" {
				v.waitFor(tc.marker, time.Minute)
			}
			v.waitExit(time.Minute)
		})
	}
}

// loginToFedora logs in as KubeVirt's console.LoginToFedora does, with its
// regular expressions (the VMI's name and host name being the guest's,
// vlfedora), and sets the console up as its configureConsole does; then
// calls it once more, which must find the root prompt and do nothing.
// The console output here has no carriage returns: the helper's "\r\n"
// is "\n".
func loginToFedora(v *qemuVM, at int) int {
	v.t.Helper()
	loggedIn := regexp.MustCompile(`(\[fedora@(localhost|fedora|vlfedora|vlfedora) ~\]\$ |\[root@(localhost|fedora|vlfedora|vlfedora) fedora\]\# )`)
	prompt := regexp.MustCompile(`(\$ |\# )`)
	retZero := regexp.MustCompile(`[\n]0\n.*(\$ |\# )`)
	// Not logged in yet: the helper's check for a prompt finds none.
	v.send("\n")
	v.send("\n")
	i, at := v.expect(at, 5*time.Second, loggedIn)
	if i >= 0 {
		v.t.Fatal("a logged-in prompt before any login")
	}
	v.send("\n")
	v.send("\n")
	// The helper's cases, in its order; each but the last may match ten
	// times (Rt: 10).
	cases := []*regexp.Regexp{
		regexp.MustCompile(`(localhost|fedora|vlfedora|vlfedora) login: `),
		regexp.MustCompile(`Password:`),
		regexp.MustCompile(`Login incorrect`),
		loggedIn,
	}
	var matched [2]int
	for done := false; !done; {
		i, at = v.expect(at, 2*time.Minute, cases...)
		switch i {
		case -1:
			v.t.Fatal("LoginToFedora: no login prompt, password prompt or fedora's prompt within 2m")
		case 0, 1:
			if matched[i]++; matched[i] > 10 {
				v.t.Fatalf("LoginToFedora: %q matched more than the 10 times the helper allows", cases[i])
			}
			v.send("fedora\n")
		case 2:
			v.t.Fatal("LoginToFedora: Login incorrect (user fedora, password fedora)")
		case 3:
			done = true
		}
	}
	step := func(send string, want *regexp.Regexp, timeout time.Duration) {
		v.t.Helper()
		v.send(send)
		if i, at = v.expect(at, timeout, want); i < 0 {
			v.t.Fatalf("LoginToFedora: sent %q, no %q within %v", send, want, timeout)
		}
	}
	step("sudo su\n", prompt, 2*time.Minute)
	// configureConsole, without its sudo.
	for _, cmd := range []string{"stty cols 500 rows 500\n", "dmesg -n 1\n"} {
		step(cmd, prompt, 30*time.Second)
		step("echo $?\n", retZero, 30*time.Second)
	}
	// The next LoginToFedora of a spec: root's prompt tells it is logged
	// in already.
	v.send("\n")
	step("\n", loggedIn, 5*time.Second)
	return at
}

// osInfo is what of the guest agent's guest-get-osinfo answer KubeVirt
// shows in a VMI's status (guestOSInfo id and name).
type osInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// agentCommand sends the guest agent on the QEMU chardev socket sock a
// command that has no answer on success.
func agentCommand(t *testing.T, sock, cmd string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
}

// agentOSInfo asks the guest agent on the QEMU chardev socket sock for
// guest-get-osinfo, again until it answers (the agent may still be
// starting: what the host sends before it opens its port is lost).
func agentOSInfo(t *testing.T, sock string) osInfo {
	t.Helper()
	var info osInfo
	agentCall(t, sock, "guest-get-osinfo", &info)
	return info
}

// agentEnabled asks the guest agent for guest-info and returns whether
// each command it knows is enabled (qemu-ga's -b blocks one).
func agentEnabled(t *testing.T, sock string) map[string]bool {
	t.Helper()
	var info struct {
		Commands []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"supported_commands"`
	}
	agentCall(t, sock, "guest-info", &info)
	enabled := map[string]bool{}
	for _, c := range info.Commands {
		enabled[c.Name] = c.Enabled
	}
	return enabled
}

// agentCall sends the guest agent on the QEMU chardev socket sock the
// command cmd (no arguments) and decodes its answer's return into ret,
// sending again until it answers (the agent may still be starting: what
// the host sends before it opens its port is lost).
func agentCall(t *testing.T, sock, cmd string, ret any) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := io.WriteString(c, `{"execute":"`+cmd+`"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadBytes('\n')
		if err != nil {
			continue
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
		}
		if err := json.Unmarshal(line, &resp); err == nil && resp.Return != nil {
			if err := json.Unmarshal(resp.Return, ret); err != nil {
				t.Fatalf("%s: %v: %s", cmd, err, resp.Return)
			}
			return
		}
	}
	t.Fatalf("the guest agent did not answer %s within 1m", cmd)
}

// run types cmd on the console's shell and waits up to timeout for its
// exit code, which it returns with the lines cmd printed (the echoed
// command line left out) and the offset past them.
func (v *qemuVM) run(at int, cmd string, timeout time.Duration) (string, int, int) {
	v.t.Helper()
	v.send(cmd + "; echo vl-rc=$?\n")
	re := regexp.MustCompile(`\nvl-rc=([0-9]+)\n`)
	var m []int
	var out string
	v.wait("the exit code of "+cmd, timeout, func(o string) bool {
		out = o[at:]
		m = re.FindStringSubmatchIndex(out)
		return m != nil
	})
	// A line typed before the prompt shows twice: echoed by the
	// terminal, then by the line editor.
	printed := out[:m[0]+1]
	if i := strings.LastIndex(printed, "; echo vl-rc=$?\n"); i >= 0 {
		printed = printed[i+len("; echo vl-rc=$?\n"):]
	}
	rc, _ := strconv.Atoi(out[m[2]:m[3]])
	return printed, rc, at + m[1]
}

// fedoraTooling runs, as root on the Fedora stand-in's console, what
// KubeVirt's specs run in its Fedora image beyond the login (OptTooling),
// each as the spec has it where it can run here: every failure is
// reported, not only the first.
func fedoraTooling(v *qemuVM, at int, agentSock string) {
	t := v.t
	t.Helper()
	check := func(cmd, want string, wantRC int) {
		t.Helper()
		var out string
		var rc int
		out, rc, at = v.run(at, cmd, 2*time.Minute)
		if rc != wantRC || (want != "" && out != want) {
			t.Errorf("%s: rc %d, printed %q; want rc %d, %q", cmd, rc, out, wantRC, want)
		}
	}
	// The SMBIOS and chassis specs (2751, 2927), the values QEMU was given.
	check(`[ "$(sudo dmidecode -s system-family | tr -s ' ')" = "KubeVirt" ] && echo 'pass'`, "pass\n", 0)
	check(`[ "$(sudo dmidecode -s system-product-name | tr -s ' ')" = "None" ] && echo 'pass'`, "pass\n", 0)
	check(`[ "$(sudo dmidecode -s system-manufacturer | tr -s ' ')" = "KubeVirt" ] && echo 'pass'`, "pass\n", 0)
	check(`[ $(sudo dmidecode -s chassis-asset-tag | tr -s ' ') = Test-123 ] && echo 'pass'`, "pass\n", 0)
	// The hidden-KVM spec (5271) runs virt-what's helper; under TCG the
	// hypervisor's signature is QEMU's TCG one, not KVM's.
	check("/usr/libexec/virt-what-cpuid-helper > /dev/null 2>&1 && echo 'pass'", "pass\n", 0)
	check("$(sudo /usr/libexec/virt-what-cpuid-helper | grep -q KVMKVMKVM) || echo 'pass'", "pass\n", 0)
	check("/usr/libexec/virt-what-cpuid-helper", "TCGTCGTCGTCG\n", 0)
	// The migration specs' load (runStressTest), for a few seconds
	// instead of in the background until the guest stops.
	check("stress-ng --vm 1 --vm-bytes 100M --vm-keep -t 3 >/dev/null 2>&1", "", 0)
	// The storage specs' size check, on this disk.
	check(`lsblk /dev/vda -o SIZE -n | sed -e "s/ //g"`, fmt.Sprintf("%dM\n", BIOSDiskSize>>20), 0)
	// The config-disk spec's labels (786) and the cloud-init specs' mount
	// by label: the boot disk and the NoCloud disk here.
	check("blkid -s LABEL -o value /dev/vda", "VLBOOT\n", 0)
	check("blkid -s LABEL -o value /dev/vdb", "cidata\n", 0)
	check("mount $(blkid  -L cidata) /mnt/ && ls /mnt/ | sort && umount /mnt/", "meta-data\nuser-data\n", 0)
	// The agent's service, stopped and started as the guest agent specs
	// do (4625, 4628, 6741, 9299); the agent check after this finds it
	// answering again.
	check("systemctl stop qemu-guest-agent", "", 0)
	v.waitFor(MarkerService, 30*time.Second)
	check("systemctl is-active qemu-guest-agent", "inactive\n", 3)
	check("pidof qemu-ga", "", 1)
	check("sudo systemctl start qemu-guest-agent", "", 0)
	check("systemctl is-active qemu-guest-agent", "active\n", 0)
	check("systemctl stop sshd", "", 1)
	// The agent's blocked commands as its service reads them at a start:
	// 6958's user-data line (guest-set-password is no command of this
	// qemu-ga's, which ignores it), then a restart.
	check(`echo -e "\n\nBLACKLIST_RPC=guest-exec,guest-set-password" | sudo tee -a /etc/sysconfig/qemu-ga >/dev/null`, "", 0)
	check("systemctl restart qemu-guest-agent", "", 0)
	if got := agentEnabled(t, agentSock); got["guest-exec"] || !got["guest-exec-status"] || !got["guest-get-osinfo"] {
		t.Errorf("after the restart, the agent's guest-exec enabled %v, guest-exec-status %v, guest-get-osinfo %v; want false, true, true",
			got["guest-exec"], got["guest-exec-status"], got["guest-get-osinfo"])
	}
	// The DHCP-options spec (1778): a release, then a lease whose options
	// env prints.
	check("dhclient -1 -r -d eth0 >/dev/null 2>&1", "", 0)
	check("dhclient -1 -sf /usr/bin/env --request-options subnet-mask,broadcast-address,time-offset,routers,domain-search,domain-name,domain-name-servers,host-name,nis-domain,nis-servers,ntp-servers,interface-mtu,tftp-server-name,bootfile-name eth0 | tee /dhcp-env >/dev/null", "", 0)
	check("grep -q 'new_tftp_server_name=tftp.kubevirt.io' /dhcp-env; echo $?", "0\n", 0)
	check("grep -q 'new_filename=config' /dhcp-env; echo $?", "0\n", 0)
	check("grep -q 'new_host_name=vlfedora' /dhcp-env; echo $?", "0\n", 0)
	// The TPM spec (8607): the device, PCR 15 read, extended and read
	// again, as its own commands and the values it expects.
	checkHas := func(cmd, want string) {
		t.Helper()
		var out string
		var rc int
		out, rc, at = v.run(at, cmd, 2*time.Minute)
		if rc != 0 || !strings.Contains(out, want) {
			t.Errorf("%s: rc %d, printed %q; want rc 0 and %q in it", cmd, rc, out, want)
		}
	}
	checkHas("ls /dev/tpm*", "/dev/tpm0")
	checkHas("tpm2_pcrread sha256:15", "0x0000000000000000000000000000000000000000000000000000000000000000")
	checkHas("tpm2_pcrextend 15:sha256=54d626e08c1c802b305dad30b7e54a82f102390cc92c7d4db112048935236e9c && echo 'do''ne'", "done\n")
	checkHas("tpm2_pcrread sha256:15", "0x1EE66777C372B96BC74AC4CB892E0879FA3CCF6A2F53DB1D00FD18B264797F49")
	// The cloud-config's passwords (the user-password and cloud-init
	// specs log in with them): each user's shadow hash is the password's
	// under its salt.
	for _, up := range [][2]string{{"vluser", "s3cret"}, {"tester", "t3st"}} {
		check(fmt.Sprintf(`h=$(awk -F: '$1 == "%s" { print $2 }' /etc/shadow); [ "$(mkpasswd -m sha512 '%s' "$(echo "$h" | cut -d'$' -f3)")" = "$h" ] && echo 'pass'`, up[0], up[1]), "pass\n", 0)
	}
	// cloud-init's instance-id, NoCloud's meta-data's (the instance-id
	// spec reads it before and after a restart).
	md, _ := Between(v.output(), MarkerMetaDataBegin, MarkerMetaDataEnd)
	var meta struct {
		InstanceID string `json:"instance-id"`
	}
	if err := json.Unmarshal([]byte(md), &meta); err != nil || meta.InstanceID == "" {
		t.Errorf("NoCloud meta-data %q: %v, no instance-id", md, err)
	}
	check("cat /var/lib/cloud/data/instance-id", meta.InstanceID+"\n", 0)
	// The meta-data's keys (6224's and the NoCloud credentials spec's
	// propagation), in the default user's authorized_keys.
	check("grep -c ' vl-md-key[12]$' /home/vluser/.ssh/authorized_keys", "2\n", 0)
	// The file systems standing in for the image's disk: the boot disk at
	// /boot, which the agent lists (4627, 4630: a name, a mount point and
	// a disk with a bus type), and the ext4 image at /srv, which it
	// freezes and thaws (the freeze specs: FAT and ISO 9660 do not).
	var fsinfo []struct {
		Name       string `json:"name"`
		Mountpoint string `json:"mountpoint"`
		Type       string `json:"type"`
		Disk       []struct {
			BusType string `json:"bus-type"`
		} `json:"disk"`
	}
	agentCall(t, agentSock, "guest-get-fsinfo", &fsinfo)
	// 4630 takes the first; the NoCloud disk is mounted here too.
	if len(fsinfo) == 0 || fsinfo[0].Name == "" || fsinfo[0].Mountpoint == "" || len(fsinfo[0].Disk) == 0 || fsinfo[0].Disk[0].BusType == "" {
		t.Errorf("guest-get-fsinfo: %+v; want the first with a name, a mount point and a disk with a bus", fsinfo)
	}
	var boot, srv bool
	for _, fs := range fsinfo {
		boot = boot || fs.Mountpoint == "/boot" && fs.Type == "vfat" && fs.Name == "vda" && len(fs.Disk) > 0 && fs.Disk[0].BusType == "virtio"
		srv = srv || fs.Mountpoint == "/srv" && fs.Type == "ext4"
	}
	if !boot || !srv {
		t.Errorf("guest-get-fsinfo: %+v; want /boot (vfat on vda, virtio) and /srv (ext4)", fsinfo)
	}
	for _, c := range []struct {
		cmd  string
		want any
	}{{"guest-fsfreeze-freeze", float64(1)}, {"guest-fsfreeze-status", "frozen"}, {"guest-fsfreeze-thaw", float64(1)},
		{"guest-fsfreeze-status", "thawed"}} {
		var got any
		agentCall(t, agentSock, c.cmd, &got)
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.cmd, got, c.want)
		}
	}
}

// startSwtpm runs a TPM 2.0 emulator (swtpm) for one QEMU, its state in
// dir, and returns its control socket; it ends with that QEMU
// (--terminate) or the test.
func startSwtpm(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Fatalf("swtpm: %v (install swtpm)", err)
	}
	state := filepath.Join(dir, "tpm")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(state, "ctrl.sock")
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+state,
		"--ctrl", "type=unixio,path="+sock, "--terminate")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // only the swtpm this test started
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatal("swtpm made no control socket within 10s")
		}
	}
}
