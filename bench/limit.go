package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// limitResult is the raw libvirt cost of the launcher's domain.
type limitResult struct {
	define, start time.Duration
}

// virsh runs virsh as the unprivileged user against socket, with a home of
// its own under home.
func (e *env) virsh(ctx context.Context, home, socket string, args ...string) (string, time.Duration, error) {
	uri := "qemu+unix:///session?socket=" + socket
	cmd := exec.CommandContext(ctx, "virsh", append([]string{"-q", "-c", uri}, args...)...)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_RUNTIME_DIR=" + home,
	}
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(e.owner.uid), Gid: uint32(e.owner.gid)},
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	t := time.Now()
	err := cmd.Run()
	d := time.Since(t)
	if err != nil {
		return "", d, fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), d, nil
}

// domainName is the libvirt name KubeVirt gives the VMI's domain.
func (in *instance) domainName() string { return in.vmi.Namespace + "_" + in.vmi.Name }

// mkHome makes a directory owned by the unprivileged user.
func (in *instance) mkOwned(p string) error {
	if err := os.MkdirAll(p, 0o700); err != nil {
		return err
	}
	return os.Chown(p, in.env.owner.uid, in.env.owner.gid)
}

// dumpXML reads the domain as the launcher defined it (inactive XML), from
// the launcher's own daemon.
func (in *instance) dumpXML(ctx context.Context) (string, error) {
	home := filepath.Join(in.dir, "vh")
	if err := in.mkOwned(home); err != nil {
		return "", err
	}
	xml, _, err := in.env.virsh(ctx, home, in.libvirtSocket(), "dumpxml", "--inactive", in.domainName())
	if err != nil {
		return "", err
	}
	p := filepath.Join(home, "domain.xml")
	if err := os.WriteFile(p, []byte(xml), 0o644); err != nil {
		return "", err
	}
	return p, nil
}

// limit defines and starts the launcher's domain XML with plain virsh in a
// fresh private libvirtd of the same kind (session mode, the unprivileged
// user, internal/libvirtd's configuration), while the launcher's own guest
// is shut off: same XML, same disk files, same serial socket path. seed, if
// set, pre-seeds the capability cache as for the launcher run.
func (in *instance) limit(ctx context.Context, xmlPath, seed string) (limitResult, error) {
	var r limitResult
	root := filepath.Join(in.dir, "L")
	for _, d := range []string{root, filepath.Join(root, "cfg"), filepath.Join(root, "home")} {
		if err := in.mkOwned(d); err != nil {
			return r, err
		}
	}
	cfg := libvirtd.Config{
		Dir:        filepath.Join(root, "cfg", "libvirt"),
		RuntimeDir: filepath.Join(root, "run"),
		CacheHome:  filepath.Join(root, "cache"),
		Credential: &syscall.Credential{Uid: uint32(in.env.owner.uid), Gid: uint32(in.env.owner.gid)},
	}
	if seed != "" {
		if err := copyDir(seed, capsCacheDir(cfg.CacheHome)); err != nil {
			return r, err
		}
		if err := safefs.ChownTree(filepath.Join(root, "cache"), in.env.owner.uid, in.env.owner.gid); err != nil {
			return r, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	d, err := libvirtd.Start(sctx, cfg, nil)
	cancel()
	if err != nil {
		return r, fmt.Errorf("limit daemon: %w", err)
	}
	defer func() {
		stctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		d.Stop(stctx)
		cancel()
		killUnder(root, 10*time.Second)
	}()
	home := filepath.Join(root, "home")
	if _, r.define, err = in.env.virsh(ctx, home, d.Socket(), "define", xmlPath); err != nil {
		return r, err
	}
	if _, r.start, err = in.env.virsh(ctx, home, d.Socket(), "start", in.domainName()); err != nil {
		return r, err
	}
	// Let the guest get going, as the launcher's did, then stop it hard:
	// only the define and start are measured.
	if _, _, err := in.env.virsh(ctx, home, d.Socket(), "destroy", in.domainName()); err != nil {
		return r, err
	}
	return r, nil
}
