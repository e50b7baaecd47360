package main

// The side-by-side part (-only pair): KubeVirt's own launcher and ours, run
// through the same harness in the same session, alternating, each in a pod
// made from the same root file system: the launcher image's (make image),
// which holds Debian's libvirt and QEMU. Only the binaries differ, and what
// KubeVirt's launcher needs from its own image that Debian's packages lack
// (internal/kubevirtimage, which the e2e's image of KubeVirt's launcher is
// made from too).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/kubevirtimage"
	"github.com/virtlauncher/virtlauncher/internal/ociimage"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// The two launchers of a pair.
const (
	kindOurs     = "virtlauncher"
	kindKubeVirt = "kubevirt"
)

// podImage is a launcher image's root file system, unpacked once for the
// whole bench run and shared by its pods (read-only to them: a pod's
// process runs as the bench user, and the tree is root's).
type podImage struct {
	kind string
	root string
}

// unpackImages unpacks the launcher image's root file system twice, with
// our binaries in one and KubeVirt's in the other. The image's qemu user
// (107, KubeVirt's non-root pods) becomes the bench user, so that no pod
// process runs as an id of the host's own accounts.
func (b *bench) unpackImages(ctx context.Context) (map[string]*podImage, error) {
	o := b.o
	tarball := filepath.Join(o.imageDir, "rootfs.tar")
	bins := map[string]string{kindOurs: filepath.Join(o.imageDir, "bin"), kindKubeVirt: o.kubevirtBin}
	for _, p := range []string{tarball, filepath.Join(bins[kindOurs], "virt-launcher"), filepath.Join(bins[kindKubeVirt], "virt-launcher")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w (make image and make kubevirt-launcher build it; -kubevirt=false skips the pair part and KubeVirt's side of density)", err)
		}
	}
	monitorCaps, err := ociimage.FileCaps(kubevirtimage.MonitorCaps)
	if err != nil {
		return nil, err
	}
	imgs := map[string]*podImage{}
	for _, kind := range []string{kindOurs, kindKubeVirt} {
		root := filepath.Join(b.env.workRoot, "img-"+kind)
		if err := os.RemoveAll(root); err != nil {
			return imgs, err
		}
		// Recorded before it is filled, so that a failure half-way still
		// has it removed (podImages).
		imgs[kind] = &podImage{kind: kind, root: root}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return imgs, err
		}
		if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", root).CombinedOutput(); err != nil {
			return imgs, fmt.Errorf("unpack %s: %v: %s", tarball, err, out)
		}
		for _, name := range kubevirtimage.Binaries {
			if err := copyFileMode(filepath.Join(bins[kind], name), filepath.Join(root, "usr/bin", name), 0o755); err != nil {
				return imgs, err
			}
		}
		// Both images give the monitor its file capability
		// (kubevirtimage.MonitorCaps).
		if err := unix.Setxattr(filepath.Join(root, "usr/bin/virt-launcher-monitor"), "security.capability", monitorCaps, 0); err != nil {
			return imgs, fmt.Errorf("file capability of the %s monitor: %w", kind, err)
		}
		if kind == kindKubeVirt {
			if err := kubevirtimage.UnpackDebs(ctx, o.kubevirtBin, root); err != nil {
				return imgs, err
			}
			if err := kubevirtimage.WriteExtras(root); err != nil {
				return imgs, err
			}
		}
		if err := mapQemuUser(root, b.env.owner); err != nil {
			return imgs, err
		}
	}
	return imgs, nil
}

// podImages unpacks the two images once per bench run: the pair part and
// the density part's pods share them (read-only to the pods), and
// bench.cleanup removes them.
func (b *bench) podImages(ctx context.Context) (map[string]*podImage, error) {
	if b.imgs != nil {
		return b.imgs, nil
	}
	imgs, err := b.unpackImages(ctx)
	if err != nil {
		if !b.env.keep {
			for _, img := range imgs {
				os.RemoveAll(img.root)
			}
		}
		return nil, fmt.Errorf("pod images: %w", err)
	}
	b.imgs = imgs
	return imgs, nil
}

// mapQemuUser gives the image's qemu user and group the bench user's ids.
func mapQemuUser(root string, o ids) error {
	for _, f := range []struct{ name, line string }{
		{"etc/passwd", fmt.Sprintf("qemu:x:%d:%d::/home/qemu:/bin/bash", o.uid, o.gid)},
		{"etc/group", fmt.Sprintf("qemu:x:%d:", o.gid)},
	} {
		p := filepath.Join(root, f.name)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		found := false
		for i, l := range lines {
			if strings.HasPrefix(l, "qemu:") {
				lines[i], found = f.line, true
			}
		}
		if !found {
			return fmt.Errorf("%s has no qemu entry", p)
		}
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	home := filepath.Join(root, "home/qemu")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	return os.Chown(home, o.uid, o.gid)
}

func copyFileMode(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// podEnv is the compute container's environment as virt-controller renders
// it for a non-root VMI (rendercontainer.go: the XDG directories), with
// the kubelet's service variables.
func podEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=virt-launcher-bench", "HOME=/home/qemu",
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443",
		"XDG_CACHE_HOME=/var/run/kubevirt-private", "XDG_CONFIG_HOME=/var/run/kubevirt-private", "XDG_RUNTIME_DIR=/var/run",
	}
}

// startPod starts the pod of in.img (pod.ImagePod, with the pod's volumes
// at <work dir>/run, layout.Rooted): the monitor with the command line
// virt-controller renders (template.go) for a non-root VMI with emulation
// allowed; both launchers get exactly the same.
func (in *instance) startPod() error {
	logFile, err := os.OpenFile(in.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd, err := pod.ImagePod{
		Root: in.img.root, Run: filepath.Join(in.dir, "run"),
		// The container-disk links point into the test guest's image
		// directory: bound read-only where virt-handler would have
		// bind-mounted the container images.
		ReadOnly: []string{filepath.Dir(in.vmi.Spec.Volumes[0].ContainerDisk.Image)},
		UID:      in.env.owner.uid, GID: in.env.owner.gid,
		Argv: []string{"/usr/bin/virt-launcher-monitor",
			"--qemu-timeout", "300s", "--name", in.vmi.Name, "--uid", string(in.vmi.UID), "--namespace", in.vmi.Namespace,
			"--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
			"--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45",
			"--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
			"--hypervisor", "kvm", "--run-as-nonroot", "--allow-emulation"},
		Env: podEnv(),
	}.Command(context.Background())
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	return in.run(cmd)
}

// podProcs lists the pod's processes: every descendant of unshare.
func (in *instance) podProcs() []proc {
	if in.mon == nil {
		return nil
	}
	all, _ := procfs.List("/proc")
	var out []proc
	for _, st := range procfs.Descendants(all, in.mon.Cmd.Process.Pid) {
		if st.State != 'Z' {
			out = append(out, withCmdline(st))
		}
	}
	return out
}

// killPod ends the pod: SIGKILL to its PID 1 ends every process of its
// PID namespace.
func (in *instance) killPod() {
	for _, p := range in.podProcs() {
		if p.ppid == in.mon.Cmd.Process.Pid {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// pairFigures are the figures of the side-by-side part, each recorded as
// pair.<kind>.<name>; the target is a ratio of medians, ours over
// KubeVirt's (0: none), or for some a bound on ours alone (oursMax). group
// is the table they are printed in (pairGroups).
type pairFigure struct {
	name, label, unit string
	target            float64
	oursMax           float64
	group             string
}

// pairKey splits pair.<kind>.<name> into the launcher and the figure.
func pairKey(key string) (string, pairFigure, bool) {
	rest, ok := strings.CutPrefix(key, "pair.")
	if !ok {
		return "", pairFigure{}, false
	}
	kind, name, _ := strings.Cut(rest, ".")
	for _, p := range pairFigures {
		if p.name == name {
			return kind, p, true
		}
	}
	return "", pairFigure{}, false
}

// The tables of the side-by-side figures, in print order.
const (
	groupPair    = "pair"
	groupDensity = "density"
)

var pairGroups = []struct{ name, header string }{
	{groupPair, "side by side: same image root, same harness, alternating; medians"},
	{groupDensity, "side by side at density: -density pods of each launcher started at once, one launcher's set after the other's, cold caches; medians"},
}

var pairFigures = []pairFigure{
	{"ready", "exec -> launcher-sock", "ms", 0, 0, groupPair},
	{"first_sync", "first Sync (RPC)", "ms", 0.4, 0, groupPair},
	{"sync_running", "Sync -> running", "ms", 0, 0, groupPair},
	{"exec_running", "pod start -> running", "ms", 0.4, 0, groupPair},
	{"stats_first", "first GetDomainStats", "ms", 1, 0, groupPair},
	{"stats_first_empty", "  answers without stats", "share", 0, 0, groupPair},
	{"stats_steady", "GetDomainStats, 1/s steady", "ms", 1, 0, groupPair},
	{"stats_steady_empty", "  answers without stats", "share", 0, 0, groupPair},
	{"repeat_sync", "repeated Sync", "ms", 0.5, 0, groupPair},
	{"hotplug_sync", "hotplug: Sync (RPC)", "ms", 0, 0, groupPair},
	{"hotplug_event", "hotplug: Sync -> disk in event", "ms", 0, 0, groupPair},
	{"unplug_sync", "unplug: Sync (RPC)", "ms", 0, 0, groupPair},
	{"unplug_event", "unplug: Sync -> disk gone", "ms", 0, 0, groupPair},
	{"helpers_rss", "helpers RSS", "MiB", 0.25, 0, groupPair},
	{"helpers_pss", "helpers PSS", "MiB", 0, 0, groupPair},
	{"launcher_rss", "launcher RSS", "MiB", 0, 0, groupPair},
	{"monitor_rss", "monitor RSS", "MiB", 0, 0, groupPair},
	{"shutdown_shutoff", "ACPI shutdown -> Shutoff", "ms", 0, 0, groupPair},
	{"final_exit", "final event -> pod exit", "ms", 0, 0, groupPair},

	{"density_ready", "exec -> launcher-sock", "ms", 0, 0, groupDensity},
	{"density_first_sync", "first Sync (RPC)", "ms", 0, 0, groupDensity},
	{"density_sync_running", "Sync -> running", "ms", 0, 0, groupDensity},
	{"density_exec_running", "pod start -> running", "ms", 0, 0, groupDensity},
	{"density_sync_booted", "Sync -> guest VL-READY", "ms", 0, 0, groupDensity},
	{"density_booted", "guests booted", "count", 0, 0, groupDensity},
	{"density_helpers_rss", "helper RSS, all VMIs", "MiB", 0, 0, groupDensity},
	{"density_helpers_pss", "helper PSS, all VMIs", "MiB", 0, 0, groupDensity},
	// The density target: ours at most 10 MiB PSS per VMI at 10 VMIs, so
	// that a node's VMs pay little for their helpers.
	{"density_pss_per_vmi", "helper PSS per VMI", "MiB", 0, 10, groupDensity},
}

// pairs runs -runs pairs, alternating which launcher goes first, each run
// with a cold capability cache as a new pod has.
func (b *bench) pairs(ctx context.Context) error {
	imgs, err := b.podImages(ctx)
	if err != nil {
		return err
	}
	var errs []string
	for i := 0; i < b.o.runs && ctx.Err() == nil; i++ {
		order := []string{kindOurs, kindKubeVirt}
		if i%2 == 1 {
			order = []string{kindKubeVirt, kindOurs}
		}
		for _, kind := range order {
			if err := b.pairRun(ctx, imgs[kind], i); err != nil {
				b.env.logf("pair %d (%s) failed: %v", i, kind, err)
				errs = append(errs, fmt.Sprintf("pair %d %s: %v", i, kind, err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

func (b *bench) pairRun(ctx context.Context, img *podImage, i int) error {
	e, r := b.env, b.r
	key := func(name string) string { return "pair." + img.kind + "." + name }
	in, err := newInstanceIn(ctx, e, img, fmt.Sprintf("p%d%s", i, img.kind[:2]), "")
	if err != nil {
		return err
	}
	defer in.cleanup()
	if err := in.start(); err != nil {
		return err
	}
	if err := in.waitReady(ctx); err != nil {
		return err
	}
	if err := in.firstSync(ctx); err != nil {
		return err
	}
	// KubeVirt's launcher answers GetDomainStats from a cache that is
	// refreshed at most every few seconds, so right after Sync it may
	// answer "null" (no domain); ours reads the domain each time. Every
	// answer's latency counts, and the answers without the fields
	// virt-handler reads (checkStats) are counted apart.
	stats := func(name string) error {
		d, s, err := in.domainStatsAnswer(ctx)
		if err != nil {
			return err
		}
		r.addDur(key(name), d)
		empty := 0.0
		if checkStats(s) != nil {
			empty = 1
		}
		r.add(key(name+"_empty"), empty)
		return nil
	}
	if err := stats("stats_first"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	running, err := in.waitEvent(wctx, in.syncSentAt, "Running", isStatus("Running"))
	if err != nil {
		return err
	}
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	booted, err := in.console.wait(bctx, testguest.MarkerReady)
	bcancel()
	if err != nil {
		return err
	}
	r.between(key("ready"), in.execAt, in.readyAt)
	r.between(key("first_sync"), in.syncSentAt, in.syncDoneAt)
	r.between(key("sync_running"), in.syncSentAt, running)
	r.between(key("exec_running"), in.execAt, running)
	for k := 0; k < repeatSyncs; k++ {
		d, err := in.repeatSync(ctx)
		if err != nil {
			return err
		}
		r.addDur(key("repeat_sync"), d)
	}
	if wait := time.Until(booted.Add(b.o.settle)); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Steady state, as virt-handler's scrapes see it: one call a second.
	for k := 0; k < steadyStats; k++ {
		if err := stats("stats_steady"); err != nil {
			return err
		}
		time.Sleep(time.Second)
	}
	use, _, err := sampleMem(in.procs())
	if err != nil {
		return err
	}
	var sum memUse
	for _, role := range helperRoles {
		sum.add(use[role])
	}
	r.add(key("helpers_rss"), mib(sum.RSS))
	r.add(key("helpers_pss"), mib(sum.PSS))
	r.add(key("launcher_rss"), mib(use[roleLauncher].RSS))
	r.add(key("monitor_rss"), mib(use[roleMonitor].RSS))
	// Hotplug after the memory sample, so that the memory figures stay
	// those of a VMI that never had one. A new volume name each cycle,
	// as each addvolume would have.
	for k := 0; k < b.o.hotplugs; k++ {
		s, err := in.hotplugCycle(ctx, fmt.Sprintf("hp%d", k))
		if err != nil {
			return err
		}
		r.between(key("hotplug_sync"), s.plugSent, s.plugDone)
		r.between(key("hotplug_event"), s.plugSent, s.plugSeen)
		r.between(key("unplug_sync"), s.unplugSent, s.unplugDone)
		r.between(key("unplug_event"), s.unplugSent, s.unplugGone)
		e.logf("pair %d %s: hotplug %d: Sync %v, disk in event %v; unplug: Sync %v, disk gone %v", i, img.kind, k,
			s.plugDone.Sub(s.plugSent).Round(time.Millisecond), s.plugSeen.Sub(s.plugSent).Round(time.Millisecond),
			s.unplugDone.Sub(s.unplugSent).Round(time.Millisecond), s.unplugGone.Sub(s.unplugSent).Round(time.Millisecond))
	}
	end, err := in.shutdownAndDelete(ctx, nil)
	if err != nil {
		return err
	}
	r.between(key("shutdown_shutoff"), end.shutdownSent, end.shutoff)
	r.between(key("final_exit"), end.finalEvent, end.monitorExit)
	e.logf("pair %d %s: ready %v, first Sync %v, running %v after exec, helpers RSS %.1f MiB, final event -> exit %v", i, img.kind,
		in.readyAt.Sub(in.execAt).Round(time.Millisecond), in.syncDoneAt.Sub(in.syncSentAt).Round(time.Millisecond),
		running.Sub(in.execAt).Round(time.Millisecond), mib(sum.RSS), end.monitorExit.Sub(end.finalEvent).Round(time.Millisecond))
	return nil
}

// printPairs writes the side-by-side tables: both medians and their
// ratio, against the ratio targets (or the bound on ours).
func printPairs(w io.Writer, r *results) {
	med := func(k string) (float64, bool) {
		f, ok := r.figs[k]
		if !ok || len(f.Samples) == 0 {
			return 0, false
		}
		f.summarize()
		return f.Median, true
	}
	for _, g := range pairGroups {
		header := false
		for _, p := range pairFigures {
			if p.group != g.name {
				continue
			}
			ours, ok1 := med("pair." + kindOurs + "." + p.name)
			kv, ok2 := med("pair." + kindKubeVirt + "." + p.name)
			if !ok1 && !ok2 {
				continue
			}
			if !header {
				fmt.Fprintf(w, "[%s]\n", g.header)
				fmt.Fprintf(w, "%-30s  %-5s %12s %12s %8s %10s\n", "figure", "unit", "virtlauncher", "KubeVirt", "ratio", "target")
				header = true
			}
			ratio, verdict, target := "-", "", ""
			if ok1 && ok2 && kv > 0 {
				x := ours / kv
				ratio = strconv.FormatFloat(x, 'f', 2, 64)
				if p.target > 0 {
					verdict = "met"
					if x > p.target {
						verdict = "MISSED"
					}
				}
			}
			switch {
			case p.target > 0:
				target = "<= " + strconv.FormatFloat(p.target, 'f', -1, 64) + "x"
			case p.oursMax > 0:
				target = "ours <= " + strconv.FormatFloat(p.oursMax, 'f', -1, 64)
				if ok1 {
					verdict = "met"
					if ours > p.oursMax {
						verdict = "MISSED"
					}
				}
			}
			o, k := num(ours), num(kv)
			if p.unit == "count" {
				o, k = strconv.FormatFloat(ours, 'f', 0, 64), strconv.FormatFloat(kv, 'f', 0, 64)
			}
			if !ok1 {
				o = "-"
			}
			if !ok2 {
				k = "-"
			}
			fmt.Fprintf(w, "%-30s  %-5s %12s %12s %8s %10s  %s\n", p.label, p.unit, o, k, ratio, target, verdict)
		}
	}
}
