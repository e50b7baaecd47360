// Package capscache is the machine's shared QEMU capability cache for
// `vlctl run`: made by a libvirt daemon of its own as a throwaway id, kept
// in a root-owned directory, read by every VM's launcher.
package capscache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
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
// (machineStamp); libvirt still checks each file itself. docs/standalone.md,
// "The shared QEMU capability cache".

// DefaultDir is where vlctl keeps the shared capability cache.
const DefaultDir = "/var/cache/virtlauncher/qemu-caps"

// probeTimeout bounds making the cache (daemon start, probe, stop).
const probeTimeout = 3 * time.Minute

// Options say where the cache is and how it is made.
type Options struct {
	// Dir is the cache; "none" or "" turns it off (--qemu-caps-cache).
	Dir string
	// Pool gives the probe its throwaway id.
	Pool *uidpool.Pool
	// Work is a directory of root's alone (a run's work dir, so that the
	// run's record covers the probe for vlctl gc): the probe's daemon runs
	// in capsprobe/ below it.
	Work *safefs.Dir
	Log  *slog.Logger
	// Progress, when set, is told how long a probe took.
	Progress func(format string, a ...any)
}

// Ensure returns the shared cache directory, made or made again first
// when its stamp does not match this machine's libvirt and QEMU; "" when
// turned off.
func Ensure(ctx context.Context, o Options) (string, error) {
	dir := o.Dir
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
	stamp := machineStamp()
	if old, err := d.ReadFile("stamp"); err == nil && bytes.Equal(old, stamp) {
		if files, _ := filepath.Glob(filepath.Join(real, "*.xml")); len(files) > 0 {
			return real, nil
		}
	}
	t0 := time.Now()
	files, err := probe(ctx, o)
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
	if o.Progress != nil {
		o.Progress("probed QEMU's capabilities for %s in %s", real, time.Since(t0).Round(10*time.Millisecond))
	}
	return real, nil
}

// probe has a libvirt daemon probe QEMU as a throwaway id, in capsprobe/
// below o.Work, and returns the cache files it wrote, read once nothing
// runs as that id any more.
func probe(ctx context.Context, o Options) (map[string][]byte, error) {
	work := o.Work
	lease, err := o.Pool.Allocate()
	if err != nil {
		return nil, fmt.Errorf("an id for the capability probe: %w", err)
	}
	prober := vmuser.Leased(lease)
	const sub, idSub = "capsprobe", "capsprobe-identity"
	var files map[string][]byte
	err = func() error {
		if err := work.Mkdir(sub, 0o700); err != nil {
			return err
		}
		pd, err := work.OpenDir(sub)
		if err != nil {
			return err
		}
		defer pd.Close()
		// The prober reaches its own tree only: the work dir opens to its
		// group for the probe and closes again after it.
		if err := errors.Join(work.Chown(0, prober.GID), work.Chmod(0o750), pd.Chown(prober.UID, prober.GID)); err != nil {
			return err
		}
		defer func() { work.Chown(0, 0); work.Chmod(0o700) }()
		id, err := pod.WriteIdentity(work, idSub, prober.UID, prober.GID, prober.Groups)
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
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		paths, err := libvirtd.Probe(pctx, cfg, o.Log)
		if err != nil {
			return err
		}
		if pids, err := procfs.Holding("/proc", lease.ID); err != nil || len(pids) > 0 {
			return fmt.Errorf("processes %v of the probe still run (%v): its files are not used", pids, err)
		}
		files = map[string][]byte{}
		for _, p := range paths {
			rel, err := filepath.Rel(work.Path(), p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return fmt.Errorf("%s is not below %s", p, work.Path())
			}
			data, err := work.ReadFile(rel)
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
		if rerr := removeBelow(work, dir); rerr != nil {
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

// removeBelow removes the tree name below work (os.RemoveAll does not
// follow links below its root, and work is root's).
func removeBelow(work *safefs.Dir, name string) error {
	if err := os.RemoveAll(work.Join(name)); err != nil {
		return fmt.Errorf("remove %s: %w", work.Join(name), err)
	}
	return nil
}

// machineStamp describes what libvirt's cache depends on: the daemon and its
// QEMU driver module, the QEMU binaries (size, modification and change
// times), the kernel release and whether /dev/kvm exists.
func machineStamp() []byte {
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
