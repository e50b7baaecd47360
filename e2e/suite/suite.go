// Package suite is the e2e suite's environment: the cluster (e2e/cluster)
// with KubeVirt installed on it and the images the scenarios use in its
// registry, and the kubectl and virtctl the scenarios drive it with.
package suite

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/cluster"
	"github.com/virtlauncher/virtlauncher/internal/repo"
)

// Env is a running cluster and what the scenarios need of it.
type Env struct {
	Cluster *cluster.Cluster
	Root    string // the module root
	Bin     string // bin/e2e
	logf    func(string, ...any)
}

func config(logf func(string, ...any)) (cluster.Config, string, error) {
	root, err := repo.Root()
	if err != nil {
		return cluster.Config{}, "", err
	}
	return cluster.Config{
		Bin:          filepath.Join(root, "bin", "e2e"),
		CNIBin:       "/usr/lib/cni",
		Runc:         "/usr/sbin/runc",
		FeatureGates: []string{"ImageVolume=true"},
		HostPaths:    kubevirtHostPaths,
		SharedDirs:   []string{"/run/kubevirt"},
		// Two nodes: a live migration's target pod must be on another
		// node than its source (cluster/node.go).
		Nodes: 2,
		// Node 2 gives dedicated CPUs (TestDedicatedCPU).
		StaticCPUManager: true,
		Logf:             logf,
	}, root, nil
}

// kubevirtHostPaths are the host directories KubeVirt's DaemonSet and
// launcher pods create (its hostPath volumes; /var/run is /run).
// /run/kubevirt is mounted Bidirectional: a SharedDir.
var kubevirtHostPaths = []string{
	"/run/kubevirt-libvirt-runtimes", "/run/kubevirt-private", "/run/kubevirt-ephemeral-disks",
	"/var/lib/kubevirt", "/var/lib/kubevirt-node-labeller",
}

// Up brings the cluster up.
func Up(ctx context.Context, logf func(string, ...any)) (*Env, error) {
	cfg, root, err := config(logf)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	logf("cluster up in %s", time.Since(start).Round(time.Second))
	e := &Env{Cluster: c, Root: root, Bin: cfg.Bin, logf: logf}
	if err := e.installKubeVirt(ctx); err != nil {
		if derr := c.Down(context.WithoutCancel(ctx)); derr != nil {
			logf("taking the cluster down: %v", derr)
		}
		return nil, fmt.Errorf("install KubeVirt: %w", err)
	}
	return e, nil
}

// Kubectl runs kubectl as the cluster admin, with a 2-minute deadline.
func (e *Env) Kubectl(ctx context.Context, args ...string) (string, error) {
	return e.KubectlTimeout(ctx, 2*time.Minute, args...)
}

// KubectlTimeout runs kubectl with the given deadline.
func (e *Env) KubectlTimeout(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	return e.command(ctx, timeout, "", e.tool("kubectl"), e.kubeconfig(args)...)
}

// KubectlStdin runs kubectl with stdin.
func (e *Env) KubectlStdin(ctx context.Context, stdin string, args ...string) (string, error) {
	return e.command(ctx, 2*time.Minute, stdin, e.tool("kubectl"), e.kubeconfig(args)...)
}

// Virtctl runs virtctl as the cluster admin.
func (e *Env) Virtctl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	return e.command(ctx, timeout, "", e.tool("virtctl"), e.kubeconfig(args)...)
}

func (e *Env) tool(name string) string { return filepath.Join(e.Bin, name) }

func (e *Env) kubeconfig(args []string) []string {
	return append([]string{"--kubeconfig", e.Cluster.Kubeconfig}, args...)
}

// command runs exe with a deadline and a clean environment (cluster.Run).
func (e *Env) command(ctx context.Context, timeout time.Duration, stdin, exe string, args ...string) (string, error) {
	return cluster.Run(ctx, timeout, e.env(), stdin, exe, args...)
}

// env is the whole environment of the tools the scenarios run.
func (e *Env) env() []string {
	return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + e.Cluster.Home()}
}

// Down takes it all down.
func (e *Env) Down(ctx context.Context) error { return e.Cluster.Down(ctx) }

// CleanUp removes what a killed run left.
func CleanUp(ctx context.Context, logf func(string, ...any)) error {
	cfg, _, err := config(logf)
	if err != nil {
		return err
	}
	return cluster.CleanUp(ctx, cfg)
}
