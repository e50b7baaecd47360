package standalone

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// libvirt probes QEMU (~2.5 s under TCG) the first time a daemon defines a
// domain, and trusts its cache file after that: the flags in it decide the
// QEMU command line, -sandbox included. Every VM runs as an id of its own,
// so a cache shared between VMs must come from none of them. vlctl has the
// cache made by a daemon of its own that runs no guest, as a throwaway id,
// and keeps the result in a root-owned directory the launchers only read
// (copied into each VM's private cache, libvirtd.Config.CapsSeedDir). It
// makes it again when libvirt, QEMU, the kernel or KVM's presence changed
// (capsStamp); libvirt still checks each file itself. docs/standalone.md,
// "The shared QEMU capability cache".

// DefaultCapsCache is where vlctl keeps the shared capability cache.
const DefaultCapsCache = "/var/cache/virtlauncher/qemu-caps"

// capsProbeTimeout bounds making the cache (daemon start, probe, stop).
const capsProbeTimeout = 3 * time.Minute

// capsCache returns the shared cache directory, made or made again first
// when its stamp does not match this machine's libvirt and QEMU; "" when
// turned off (--qemu-caps-cache none).
func (r *runner) capsCache(ctx context.Context) (string, error) {
	dir := r.cfg.CapsCache
	if dir == "none" || dir == "" {
		return "", nil
	}
	// Root's alone, with nothing above it another user can change, and
	// 0755: the launchers read it as their own ids.
	d, err := safefs.OpenTrusted(dir, 0o755)
	if err != nil {
		return "", err
	}
	defer d.Close()
	real := d.Path()
	stamp := capsStamp()
	if old, err := d.ReadFile("stamp"); err == nil && bytes.Equal(old, stamp) {
		if files, _ := filepath.Glob(filepath.Join(real, "*.xml")); len(files) > 0 {
			return real, nil
		}
	}
	t0 := time.Now()
	files, err := r.probeCaps(ctx)
	if err != nil {
		return "", err
	}
	// Files of an older libvirt or QEMU go: libvirt would only probe again.
	if old, err := filepath.Glob(filepath.Join(real, "*.xml")); err == nil {
		for _, f := range old {
			if _, ok := files[filepath.Base(f)]; !ok {
				d.Remove(filepath.Base(f))
			}
		}
	}
	for name, data := range files {
		if err := d.WriteFile(name, data, 0o644); err != nil {
			return "", err
		}
	}
	if err := d.WriteFile("stamp", stamp, 0o644); err != nil {
		return "", err
	}
	r.progress("probed QEMU's capabilities for %s in %s", real, time.Since(t0).Round(10*time.Millisecond))
	return real, nil
}

// probeCaps has a libvirt daemon probe QEMU as a throwaway id, in
// capsprobe/ below the run's work dir (root's until the hand-over, so the
// run's record covers it for vlctl gc), and returns the cache files it
// wrote, read once nothing runs as that id any more.
func (r *runner) probeCaps(ctx context.Context) (map[string][]byte, error) {
	lease, err := r.pool.Allocate()
	if err != nil {
		return nil, fmt.Errorf("an id for the capability probe: %w", err)
	}
	prober := vmuser.Leased(lease)
	const sub, idSub = "capsprobe", "capsprobe-identity"
	var files map[string][]byte
	err = func() error {
		if err := r.dir.Mkdir(sub, 0o700); err != nil {
			return err
		}
		pd, err := r.dir.OpenDir(sub)
		if err != nil {
			return err
		}
		defer pd.Close()
		// The prober reaches its own tree only: the work dir opens to its
		// group for the probe and closes again after it.
		if err := errors.Join(r.dir.Chown(0, prober.GID), r.dir.Chmod(0o750), pd.Chown(prober.UID, prober.GID)); err != nil {
			return err
		}
		defer func() { r.dir.Chown(0, 0); r.dir.Chmod(0o700) }()
		id, err := pod.WriteIdentity(r.dir, idSub, prober.UID, prober.GID, prober.Groups)
		if err != nil {
			return err
		}
		defer id.Close()
		cfg := libvirtd.Config{
			Dir:        pd.Join("config/libvirt"),
			RuntimeDir: pd.Join("run"),
			CacheHome:  pd.Join("cache"),
			Credential: prober.Credential(),
			SpawnSetup: func() (func(), error) { return pod.Enter(id.Enter) },
		}
		pctx, cancel := context.WithTimeout(ctx, capsProbeTimeout)
		defer cancel()
		paths, err := libvirtd.Probe(pctx, cfg, r.log)
		if err != nil {
			return err
		}
		if pids, err := procfs.Holding("/proc", lease.ID); err != nil || len(pids) > 0 {
			return fmt.Errorf("processes %v of the probe still run (%v): its files are not used", pids, err)
		}
		files = map[string][]byte{}
		for _, p := range paths {
			rel, err := r.rel(p)
			if err != nil {
				return err
			}
			data, err := r.dir.ReadFile(rel)
			if err != nil {
				return err
			}
			if !bytes.Contains(data, []byte("<qemuCaps>")) {
				return fmt.Errorf("%s: not a QEMU capability cache file", p)
			}
			files[filepath.Base(p)] = data
		}
		return nil
	}()
	for _, dir := range []string{sub, idSub} {
		if rerr := r.removeBelow(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if rerr := lease.Release("/proc"); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return nil, fmt.Errorf("probe QEMU's capabilities: %w", err)
	}
	return files, nil
}

// removeBelow removes the tree name below the work dir (os.RemoveAll does
// not follow links below its root, and the work dir is root's).
func (r *runner) removeBelow(name string) error {
	if err := os.RemoveAll(r.dir.Join(name)); err != nil {
		return fmt.Errorf("remove %s: %w", r.dir.Join(name), err)
	}
	return nil
}

// capsStamp describes what libvirt's cache depends on: the daemon and its
// QEMU driver module, the QEMU binaries (size, modification and change
// times), the kernel release and whether /dev/kvm exists.
func capsStamp() []byte {
	var b strings.Builder
	paths := []string{"/dev/kvm", "/usr/libexec/qemu-kvm"}
	if p, _, err := libvirtd.FindDaemon(); err == nil {
		paths = append(paths, p)
	}
	for _, pattern := range []string{"/usr/bin/qemu-system-*", "/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so", "/usr/lib64/libvirt/connection-driver/libvirt_driver_qemu.so"} {
		m, _ := filepath.Glob(pattern)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s %d %d.%d %d.%d\n", p, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		fmt.Fprintf(&b, "kernel %s\n", unix.ByteSliceToString(u.Release[:]))
	}
	return []byte(b.String())
}
