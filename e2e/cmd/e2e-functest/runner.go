package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/functest"
	"github.com/virtlauncher/virtlauncher/e2e/suite"
	"github.com/virtlauncher/virtlauncher/internal/kubevirtimage"
)

// runner runs the suite on the cluster, once per launcher image.
type runner struct {
	o         options
	root, bin string
	sel       functest.Selection
	adHoc     bool
	launchers []string
	logf      func(string, ...any)
	env       *suite.Env
	times     []string
}

func newRunner(root string, o options, logf func(string, ...any)) (*runner, error) {
	r := &runner{o: o, root: root, bin: filepath.Join(root, "bin", "e2e"), logf: logf}
	sels, err := functest.ReadSelections(o.selections)
	if err != nil {
		return nil, err
	}
	sel, ok := sels[o.selection]
	if !ok {
		return nil, fmt.Errorf("-selection %q: not in %s", o.selection, o.selections)
	}
	if o.label != "" || o.focus != "" {
		// An ad hoc selection keeps the named one's skips and gates; its
		// label and focus replace the named one's choice, files included.
		sel.Label, sel.Focus, sel.FocusFiles, r.adHoc = o.label, o.focus, nil, true
		if _, err := regexp.Compile(o.focus); err != nil {
			return nil, fmt.Errorf("-focus: %w", err)
		}
	}
	r.sel = sel
	if r.launchers, err = launcherNames(o.launchers); err != nil {
		return nil, err
	}
	for _, p := range []string{o.suiteBin, filepath.Join(r.bin, "kubectl"), filepath.Join(r.bin, "virtctl")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w (make e2e-build e2e-functest-build)", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, suite.VMKillerRootfs)); err != nil {
		return nil, fmt.Errorf("the vm-killer stand-in's root filesystem: %w (make %s)", err, suite.VMKillerRootfs)
	}
	for _, l := range r.launchers {
		if l == "kubevirt" {
			if err := kubevirtimage.CheckBinaries(filepath.Join(root, "bin", "kubevirt")); err != nil {
				return nil, err
			}
		}
	}
	if _, err := functest.ReadDeviations(o.deviations); err != nil {
		return nil, err
	}
	return r, os.MkdirAll(o.out, 0o755)
}

func (r *runner) took(what string, start time.Time) {
	line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
	r.times = append(r.times, line)
	r.logf("%s", line)
}

func (r *runner) run(ctx context.Context) (int, error) {
	start := time.Now()
	if r.o.shard != "" {
		if err := r.applyShard(ctx); err != nil {
			return 2, err
		}
	}
	var err error
	t := time.Now()
	if r.env, err = suite.Up(ctx, r.logf); err != nil {
		return 1, err
	}
	r.took("cluster up and KubeVirt Available", t)
	runErr := r.runAll(ctx)
	if err := r.env.Down(context.WithoutCancel(ctx)); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("take the cluster down: %w", err))
	}
	r.took("all", start)
	if werr := os.WriteFile(filepath.Join(r.o.out, "times.txt"), []byte(strings.Join(r.times, "\n")+"\n"), 0o644); werr != nil {
		runErr = errors.Join(runErr, werr)
	}
	if runErr != nil {
		return 1, runErr
	}
	if len(r.launchers) < 2 {
		return 0, nil
	}
	c, err := compare(r.report("kubevirt"), r.report("ours"), r.o.deviations)
	if err != nil {
		return 1, err
	}
	var b bytes.Buffer
	c.Write(&b)
	os.Stdout.Write(b.Bytes())
	if err := os.WriteFile(filepath.Join(r.o.out, "comparison.md"), b.Bytes(), 0o644); err != nil {
		return 1, err
	}
	if !c.OK() {
		return 1, fmt.Errorf("ours differs from the control (%s)", filepath.Join(r.o.out, "comparison.md"))
	}
	return 0, nil
}

func (r *runner) runAll(ctx context.Context) error {
	t := time.Now()
	if err := r.env.PushStandInGuests(ctx); err != nil {
		return err
	}
	// The suite's helper pods and Jobs (network clients, pkill in
	// privileged pods) run on its vm-killer utility image.
	if err := r.env.PushStandInVMKiller(ctx); err != nil {
		return err
	}
	// The hook specs name KubeVirt's example hook sidecar
	// (libregistry.GetUtilityImageFromRegistry("example-hook-sidecar"):
	// <prefix>/example-hook-sidecar:<tag>), the reference PushSidecarImage
	// gives it: KubeVirt's sidecar-shim and smbios hook, built from the
	// control plane's version as TestSidecarHook uses them.
	if _, err := r.env.PushSidecarImage(ctx); err != nil {
		return fmt.Errorf("the example hook sidecar image: %w", err)
	}
	// A pod network interface without a binding is KubeVirt's bridge by
	// default, which needs the dummy link driver this machine lacks
	// (e2e/README.md: virt-handler's "LinkAdd: operation not supported",
	// whatever the launcher): the suite's VMIs get masquerade instead, as
	// an admin of such nodes would set.
	if err := r.env.PatchConfiguration(ctx, "default network interface masquerade",
		map[string]any{"network": map[string]any{"defaultNetworkInterface": "masquerade"}}); err != nil {
		return err
	}
	// KubeVirt's network helpers (libnet/cloudinit, libnet/dns) write the
	// cluster DNS service's address into the guests' cloud-init network
	// data, and the spec panics when there is none. This cluster runs no
	// DNS server: a kube-dns Service without endpoints gives them an
	// address to write; a lookup in a guest fails, as with the DNS down.
	if _, err := r.env.KubectlStdin(ctx, dnsService, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("the kube-dns service: %w", err)
	}
	for _, g := range r.sel.FeatureGates {
		if err := r.env.SetFeatureGate(ctx, g, true); err != nil {
			return err
		}
	}
	r.took("stand-in images and feature gates", t)
	for _, l := range r.launchers {
		if l == "kubevirt" {
			t := time.Now()
			if err := r.env.PushKubeVirtLauncher(ctx); err != nil {
				return err
			}
			if _, err := r.env.UseLauncher(ctx, r.env.KubeVirtLauncherImage()); err != nil {
				return err
			}
			r.took("switch to KubeVirt's launcher image", t)
		}
		t := time.Now()
		if err := r.runSuite(ctx, l); err != nil {
			return err
		}
		r.took("suite on "+l+"'s launcher", t)
	}
	return nil
}

func (r *runner) report(launcher string) string {
	return filepath.Join(r.o.out, launcher+".junit.xml")
}

// dnsService is the cluster DNS Service KubeVirt's tests look up
// (flags.DNSServiceNamespace/DNSServiceName), with no server behind it.
const dnsService = `apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: 10.96.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`

// testConfig is the suite's -config: no storage class at all (the
// cluster has no provisioner; the specs that need one skip themselves).
const testConfig = `{"storageClassRhel": "", "storageClassWindows": "", "storageRWOFileSystem": ""}` + "\n"

// suiteArgs are the suite's flags for a run; reports and artifacts are
// named after launcher.
func (r *runner) suiteArgs(launcher string) []string {
	reg := r.env.Cluster.Registry()
	args := []string{
		"-kubeconfig=" + r.env.Cluster.Kubeconfig,
		"-installed-namespace=kubevirt",
		"-container-prefix=" + reg + "/kubevirt",
		"-container-tag=" + suite.KubeVirtVersion,
		"-config=" + filepath.Join(r.o.out, "config.json"),
		"-kubectl-path=" + filepath.Join(r.bin, "kubectl"),
		"-virtctl-path=" + filepath.Join(r.bin, "virtctl"),
		"-artifacts=" + filepath.Join(r.o.out, launcher+"-artifacts"),
		"-test.timeout=" + (r.o.timeout + 5*time.Minute).String(),
		"--ginkgo.timeout=" + r.o.timeout.String(),
		"--ginkgo.junit-report=" + r.report(launcher),
		"--ginkgo.seed=" + strconv.FormatInt(r.o.seed, 10),
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
	return append(args, r.sel.FilterArgs()...)
}

// runSuite runs the suite on the cluster's current launcher image; its
// output goes to the terminal and to <launcher>.log. Failing specs are
// the report's business: only a run without a report is an error.
func (r *runner) runSuite(ctx context.Context, launcher string) error {
	if err := os.WriteFile(filepath.Join(r.o.out, "config.json"), []byte(testConfig), 0o644); err != nil {
		return err
	}
	os.Remove(r.report(launcher))
	logPath := filepath.Join(r.o.out, launcher+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ctx, cancel := context.WithTimeout(ctx, r.o.timeout+10*time.Minute)
	defer cancel()
	args := r.suiteArgs(launcher)
	r.logf("suite on %s's launcher: %s %s", launcher, r.o.suiteBin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, r.o.suiteBin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + r.env.Cluster.Home(), "KUBECONFIG=" + r.env.Cluster.Kubeconfig}
	cmd.Dir = r.o.out
	w := io.MultiWriter(os.Stdout, logFile)
	cmd.Stdout, cmd.Stderr = w, w
	runErr := cmd.Run()
	if _, err := os.Stat(r.report(launcher)); err != nil {
		return fmt.Errorf("suite on %s's launcher: no JUnit report (%v; see %s): %w", launcher, runErr, logPath, err)
	}
	r.logf("suite on %s's launcher: %v; report %s, log %s", launcher, exitText(runErr), r.report(launcher), logPath)
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "every selected spec passed"
	}
	return "some specs did not pass (" + err.Error() + ")"
}

// applyShard narrows the selection to the I-th of N shares of its specs,
// listed by a dry run of the suite (no cluster needed) and dealt out by
// functest.Shard, as a focus of their whole texts.
func (r *runner) applyShard(ctx context.Context) error {
	i, n, err := parseShard(r.o.shard)
	if err != nil {
		return err
	}
	texts, err := r.dryRun(ctx)
	if err != nil {
		return err
	}
	var mine []string
	for _, t := range functest.Shard(texts, i, n) {
		mine = append(mine, regexp.QuoteMeta(t))
	}
	if len(mine) == 0 {
		return fmt.Errorf("-shard %s: no spec in this share (%d selected)", r.o.shard, len(texts))
	}
	r.logf("shard %d/%d: %d of %d selected specs", i, n, len(mine), len(texts))
	// ginkgo matches --focus against the suite's description, a space and
	// the spec's full text.
	r.sel.Focus = " (?:" + strings.Join(mine, "|") + ")$"
	return nil
}

func parseShard(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, fmt.Errorf("-shard %q: want I/N with 1 <= I <= N", s)
	}
	return i, n, nil
}

// dryRun lists the full texts of the specs the selection selects, in
// ginkgo's order.
func (r *runner) dryRun(ctx context.Context) ([]string, error) {
	return functest.DryRun(ctx, r.o.suiteBin, r.o.out, r.sel)
}
