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
		Logf:         logf,
	}, root, nil
}

// kubevirtHostPaths are the host directories KubeVirt's DaemonSet and
// launcher pods create (its hostPath volumes).
var kubevirtHostPaths = []string{
	"/var/run/kubevirt", "/var/run/kubevirt-libvirt-runtimes", "/var/run/kubevirt-private",
	"/var/lib/kubevirt", "/var/lib/kubevirt-node-labeller", "/var/run/kubevirt-ephemeral-disks",
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
	return &Env{Cluster: c, Root: root, Bin: cfg.Bin, logf: logf}, nil
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
