package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// efiBootTimeout: OVMF, then the kernel decompressing itself (the EFI stub
// bzImage, not the PVH vmlinux), all under TCG: about 40 s on an idle
// two-core machine.
const efiBootTimeout = 4 * time.Minute

// tpmEK returns the size and hash of the guest's endorsement key (the
// VL-TPM marker), failing the test when the guest saw no TPM or no key.
func tpmEK(t *testing.T, p *pod) (string, string) {
	t.Helper()
	rest, ok := testguest.FindMarker(p.Console(), testguest.MarkerTPM)
	if !ok {
		t.Fatalf("guest saw no /dev/tpm0; console:\n%s", launchertest.Tail(p.Console(), 4000))
	}
	f := strings.Fields(rest) // /dev/tpm0 ek <bytes> <hash>
	if len(f) != 4 || f[0] != "/dev/tpm0" || f[1] != "ek" {
		t.Fatalf("%s line %q", testguest.MarkerTPM, rest)
	}
	if n, err := strconv.Atoi(f[2]); err != nil || n <= 10 {
		t.Fatalf("TPM2_ReadPublic of the EK answered %s bytes (an error code): no EK", f[2])
	}
	return f[2], f[3]
}

// killAndDelete ends the VMI as virt-handler does after a stop (Kill, then
// Delete) and waits for the launcher to exit 0.
func killAndDelete(t *testing.T, p *pod, c *cmdclient.Client, ctx context.Context, v *v1.VirtualMachineInstance) {
	t.Helper()
	if err := c.Kill(ctx, v); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	// With no handler to wait for, the launcher ends once its domain is
	// gone, as KubeVirt's does: Delete may find it ending or ended (its
	// socket closed or refusing), which is not a failure when it then
	// exits 0.
	err := c.Delete(ctx, v)
	code := p.ExitCode(60 * time.Second)
	if err != nil && !cmdclient.IsDisconnected(err) && !strings.Contains(err.Error(), "failed with Unavailable") {
		t.Fatalf("Delete: %v", err)
	}
	if code != 0 {
		t.Fatalf("exit status %d after Kill and Delete (%v), want 0", code, err)
	}
	p.AssertNothingLeft()
}

// TestTPM: a VMI with devices.tpm: {} starts (libvirt runs swtpm_setup and
// swtpm as the launcher's user, with the session daemon's state dir) and
// the guest sees /dev/tpm0 with an endorsement key. The state is not
// persistent: Delete removes it, as libvirt does for KubeVirt.
//
// The guest boots by EFI: under SeaBIOS, QEMU 7.2 loads a kernelBoot
// initrd over the ACPI tables once a TPM's event log makes them larger
// than the room it keeps for them (the guest then has no ACPI: no TPM, no
// PCI power management, no power button). A VM booting from its disk is
// not affected.
func TestTPM(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	p := env.New(t, "tpmvm", podOpts{SharedCaps: true})
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), efiBootTimeout+time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMIWith(launchertest.VMISpec{Token: "tpm-1", EFI: true, TPM: true})
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	p.WaitConsole(testguest.MarkerReady, efiBootTimeout)
	t.Logf("Sync -> guest ready (OVMF): %v", time.Since(t0))
	size, hash := tpmEK(t, p)
	t.Logf("guest TPM EK: %s bytes, %s", size, hash)
	p.MustChild("swtpm")
	state := filepath.Join(p.Layout.SwtpmDir(false), string(v.Spec.Domain.Firmware.UUID), "tpm2")
	if _, err := os.Stat(state); err != nil {
		t.Errorf("TPM state not in the session daemon's swtpm dir: %v", err)
	}
	killAndDelete(t, p, c, ctx, v)
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("non-persistent TPM state left after Delete (%v)", err)
	}
	t.Logf("TestTPM took %v", time.Since(t0))
}

// backendStorage plays virt-controller's backend-storage PVC: one
// directory outliving the pods, whose subdirectories nvram, swtpm and
// swtpm-localca are bind-mounted (as the pod template's subPath mounts)
// at the non-root pod's NVRAM and TPM paths. Call before Start.
func backendStorage(t *testing.T, p *pod, backend string) {
	t.Helper()
	cred := env.Cred
	mounts := []struct{ sub, at string }{
		{"nvram", p.Layout.NVRAMDir(false)},
		{"swtpm", p.Layout.SwtpmDir(false)},
		{"swtpm-localca", p.Layout.SwtpmLocalCADir(false)},
	}
	for _, m := range mounts {
		src := filepath.Join(backend, m.sub)
		launchertest.Must(t, os.MkdirAll(src, 0o750))
		launchertest.Must(t, os.Chown(src, int(cred.Uid), int(cred.Gid)))
		launchertest.Must(t, os.MkdirAll(m.at, 0o700))
		// The launcher's user owns the private dir and what is below it
		// (KubeVirt: emptyDirs with fsGroup 107).
		for d := m.at; strings.HasPrefix(d, p.Dir+"/"); d = filepath.Dir(d) {
			launchertest.Must(t, os.Chown(d, int(cred.Uid), int(cred.Gid)))
		}
		if out, err := exec.Command("mount", "--bind", src, m.at).CombinedOutput(); err != nil {
			t.Fatalf("bind-mount %s: %v %s", m.at, err, out)
		}
		at := m.at
		// Detached before the pod's directory is removed (cleanups run
		// last-in first-out), so the backend survives.
		t.Cleanup(func() { syscall.Unmount(at, syscall.MNT_DETACH) })
	}
}

// TestPersistentEFIAndTPM: a VMI with persistent EFI and a persistent TPM
// on a backend-storage volume. The first pod's guest writes an EFI
// variable; Kill and Delete keep the variable store (KEEP_NVRAM) and the
// TPM state (persistent_state). A second pod on the same volume, with a
// new VMI of the same VM (same name, hence the same firmware UUID, new
// uid), boots a guest that finds the variable and the same endorsement key.
func TestPersistentEFIAndTPM(t *testing.T) {
	t.Parallel()
	backend := t.TempDir()
	launchertest.Must(t, os.Chmod(backend, 0o755))
	token := "kept" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	spec := launchertest.VMISpec{Token: "pefi", PersistentEFI: true, PersistentTPM: true}

	// Pod 1: write the variable.
	t0 := time.Now()
	p1 := env.NewDeferred(t, "pefi", podOpts{SharedCaps: true})
	backendStorage(t, p1, backend)
	p1.Start()
	p1.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*efiBootTimeout)
	defer cancel()
	c1 := p1.Client(ctx)
	s1 := spec
	s1.KernelArgs = []string{testguest.OptEFIVar("VlKeep", token)}
	vm1 := p1.VMIWith(s1)
	if err := c1.Sync(ctx, vm1, nil); err != nil {
		t.Fatalf("pod 1 Sync: %v", err)
	}
	p1.WaitConsole(testguest.MarkerReady, efiBootTimeout)
	t.Logf("pod 1: Sync -> guest ready (OVMF): %v", time.Since(t0))
	out := p1.Console()
	if _, ok := testguest.FindMarker(out, testguest.MarkerEFI); !ok {
		t.Fatalf("guest not booted by EFI; console:\n%s", launchertest.Tail(out, 4000))
	}
	if !strings.Contains(out, testguest.MarkerEFIVar+" VlKeep="+token) {
		t.Fatalf("guest did not write VlKeep=%s; console:\n%s", token, launchertest.Tail(out, 4000))
	}
	_, ek1 := tpmEK(t, p1)
	killAndDelete(t, p1, c1, ctx, vm1)
	nvram := filepath.Join(backend, "nvram", "pefi_VARS.fd")
	if _, err := os.Stat(nvram); err != nil {
		t.Fatalf("variable store gone after Delete: %v", err)
	}
	uuid := string(vm1.Spec.Domain.Firmware.UUID)
	if _, err := os.Stat(filepath.Join(backend, "swtpm", uuid, "tpm2")); err != nil {
		t.Fatalf("persistent TPM state not on the backend volume after Delete: %v", err)
	}
	// swtpm_setup's local CA (it signed the EK certificate) is where
	// virt-controller mounts the volume's swtpm-localca.
	if _, err := os.Stat(filepath.Join(backend, "swtpm-localca", "issuercert.pem")); err != nil {
		t.Errorf("swtpm local CA not on the backend volume: %v", err)
	}
	t.Logf("pod 1 took %v", time.Since(t0))

	// Pod 2: a new pod on the same volume reads it back.
	t1 := time.Now()
	p2 := env.NewDeferred(t, "pefi", podOpts{SharedCaps: true})
	backendStorage(t, p2, backend)
	p2.Start()
	p2.WaitReady(30 * time.Second)
	c2 := p2.Client(ctx)
	vm2 := p2.VMIWith(spec)
	if vm2.UID == vm1.UID || string(vm2.Spec.Domain.Firmware.UUID) != uuid {
		t.Fatalf("pod 2's VMI: uid %s (pod 1 %s), firmware uuid %s (pod 1 %s)", vm2.UID, vm1.UID, vm2.Spec.Domain.Firmware.UUID, uuid)
	}
	if err := c2.Sync(ctx, vm2, nil); err != nil {
		t.Fatalf("pod 2 Sync: %v", err)
	}
	p2.WaitConsole(testguest.MarkerReady, efiBootTimeout)
	t.Logf("pod 2: Sync -> guest ready (OVMF): %v", time.Since(t1))
	if out := p2.Console(); !strings.Contains(out, testguest.MarkerEFIVar+" VlKeep="+token) {
		t.Errorf("EFI variable VlKeep=%s lost across Delete and a new pod; console:\n%s", token, launchertest.Tail(out, 4000))
	}
	if _, ek2 := tpmEK(t, p2); ek2 != ek1 {
		t.Errorf("TPM endorsement key changed (%s -> %s): TPM state not kept", ek1, ek2)
	}
	killAndDelete(t, p2, c2, ctx, vm2)
	t.Logf("TestPersistentEFIAndTPM took %v", time.Since(t0))
}

// TestRootModeTPM: a root launcher (system-mode daemon, as in a root pod)
// boots a VMI with a TPM by EFI: libvirt runs swtpm as tss (its default
// when the user exists, as Debian's swtpm-tools creates it) with state in
// /var/lib/libvirt/swtpm and swtpm_setup's CA in /var/lib/swtpm-localca,
// and the variable store is in /var/lib/libvirt/qemu/nvram. The guest
// sees /dev/tpm0 and writes an EFI variable, then powers off.
func TestRootModeTPM(t *testing.T) {
	t.Parallel()
	testenv.Programs(t, "unshare")
	t0 := time.Now()
	p := env.NewDeferred(t, "roottpm", podOpts{})
	y := launchertest.VMIYAML(launchertest.VMISpec{Name: p.Name, Namespace: p.NS, UID: p.UID, Token: "roottpm",
		EFI: true, TPM: true, KernelArgs: []string{testguest.OptPowerOff, testguest.OptEFIVar("VlRoot", "r1")}})
	p.AsRootContainer(filepath.Join(env.BinDir, "virt-launcher"), append(p.PodArgs(), "--force-emulation"),
		[]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "STANDALONE_VMI=" + y})
	p.Start()
	p.WaitReady(60 * time.Second)
	p.WaitConsole(testguest.MarkerPowerOff, efiBootTimeout)
	t.Logf("start -> guest powered off (OVMF): %v", time.Since(t0))
	tpmEK(t, p)
	if out := p.Console(); !strings.Contains(out, testguest.MarkerEFIVar+" VlRoot=r1") {
		t.Errorf("guest did not write its EFI variable; console:\n%s", launchertest.Tail(out, 4000))
	}
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}
