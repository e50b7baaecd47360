//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/samples"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestLaunchersSideBySide measures, in this cluster, what a user sees of a
// launcher: `kubectl create` of a VMI → phase Running → condition Ready,
// and `kubectl delete` → the launcher pod gone, for our launcher image and
// for KubeVirt's own launcher (built from source at the control plane's
// version, on our image's root file system: internal/kubevirtimage).
//
// Images alternate in blocks (ours, KubeVirt's, ours, ...; switching costs
// an operator rollout, minutes), each block creating its VMIs one after
// the other. The first VMI of each block is a warm-up, kept apart: right
// after a switch it waits ~10 s more for either image (so not for a
// launcher's reason; virt-handler has just restarted), measured
// 2026-12-04. Each VMI is deleted once its guest has booted: deleted in
// mid-boot, both launchers wait longer for a guest that cannot answer the
// ACPI shutdown yet, which is not what a user's delete meets. Nothing
// fails on a timing; it fails when a VMI does not come up, runs on the
// wrong image or does not go away.
//
// It runs under `make e2e-bench` (which also builds KubeVirt's launcher);
// `make e2e` skips it. E2E_BENCH_PAIRS (2) and E2E_BENCH_VMIS (4, the
// warm-up included) set its size, E2E_BENCH_OUT where its JSON goes.
func TestLaunchersSideBySide(t *testing.T) {
	ctx := context.Background()
	pairs, vmis := envInt(t, "E2E_BENCH_PAIRS", 2), envInt(t, "E2E_BENCH_VMIS", 4)
	if err := env.PushKubeVirtLauncher(ctx); err != nil {
		t.Fatal(err)
	}
	images := map[string]string{"virtlauncher": env.LauncherImage(), "kubevirt": env.KubeVirtLauncherImage()}
	// The cluster starts on ours: set it back however the test ends, so
	// that later scenarios run on it.
	t.Cleanup(func() {
		if _, err := env.UseLauncher(context.Background(), images["virtlauncher"]); err != nil {
			t.Errorf("switch back to our launcher: %v", err)
		}
	})
	res := sideBySide{Pairs: pairs, VMIsPerBlock: vmis, Samples: map[string]map[string][]float64{}, WarmUp: map[string]map[string][]float64{}}
	current := "virtlauncher"
	for i := 0; i < 2*pairs; i++ {
		kind := []string{"virtlauncher", "kubevirt"}[i%2]
		if kind != current {
			took, err := env.UseLauncher(ctx, images[kind])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("KubeVirt switched to %s's launcher in %s", kind, took.Round(time.Second))
			res.Switches = append(res.Switches, took.Seconds())
			current = kind
		}
		for j := 0; j < vmis; j++ {
			name := fmt.Sprintf("vmi-sbs-%d-%d", i, j)
			figs := measureVMI(t, ctx, name, images[kind])
			into, what := res.Samples, ""
			if j == 0 {
				into, what = res.WarmUp, " (warm-up)"
			}
			for fig, v := range figs {
				if into[kind] == nil {
					into[kind] = map[string][]float64{}
				}
				into[kind][fig] = append(into[kind][fig], v)
			}
			t.Logf("%s %s%s: create → Running %.0f ms, → Ready %.0f ms; delete → pod gone %.0f ms",
				kind, name, what, figs[figRunning], figs[figReady], figs[figGone])
		}
	}
	res.print(t)
	out := os.Getenv("E2E_BENCH_OUT")
	if out == "" {
		out = filepath.Join(env.Root, "bench", "out", "e2e-sidebyside.json")
	}
	res.Date = time.Now().UTC().Format(time.RFC3339)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("samples written to %s", out)
}

const (
	figRunning = "create→Running ms"
	figReady   = "create→Ready ms"
	figGone    = "delete→pod gone ms"
)

// measureVMI creates the test guest's VMI, times it to Running and Ready,
// checks that its launcher pod runs image and that the guest booted (a
// launcher that starts a domain that cannot boot must not pass), then
// deletes the VMI and times the pod's end.
func measureVMI(t *testing.T, ctx context.Context, name, image string) map[string]float64 {
	t.Helper()
	ok := must(t)
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	start := time.Now()
	ok(env.KubectlStdin(ctx, vmiYAML(name), "create", "-f", "-"))
	if _, err := env.KubectlTimeout(ctx, 6*time.Minute, "wait", "vmi/"+name, "--for", "jsonpath={.status.phase}=Running", "--timeout=5m"); err != nil {
		t.Fatal(env.Explain(ctx, "default", err))
	}
	running := time.Since(start)
	if _, err := env.KubectlTimeout(ctx, 6*time.Minute, "wait", "vmi/"+name, "--for", "condition=Ready", "--timeout=5m"); err != nil {
		t.Fatal(env.Explain(ctx, "default", err))
	}
	ready := time.Since(start)
	pod := env.LauncherPod(t, ctx, name)
	if got := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", `jsonpath={.spec.containers[?(@.name=="compute")].image}`)); got != image {
		t.Fatalf("pod %s: compute runs %q, want %q", pod, got, image)
	}
	env.WaitConsoleCount(t, ctx, pod, testguest.MarkerReady, 1)
	start = time.Now()
	ok(env.Kubectl(ctx, "delete", "vmi", name, "--wait=false"))
	if _, err := env.KubectlTimeout(ctx, 3*time.Minute, "wait", "pod/"+pod, "--for=delete", "--timeout=2m"); err != nil {
		t.Fatal(env.Explain(ctx, "default", err))
	}
	return map[string]float64{
		figRunning: float64(running.Microseconds()) / 1000,
		figReady:   float64(ready.Microseconds()) / 1000,
		figGone:    float64(time.Since(start).Microseconds()) / 1000,
	}
}

// sideBySide is what TestLaunchersSideBySide writes: every sample, by
// launcher and figure.
type sideBySide struct {
	Date         string                          `json:"date"`
	Pairs        int                             `json:"pairs"`
	VMIsPerBlock int                             `json:"vmisPerBlock"`
	Switches     []float64                       `json:"switchSeconds"`
	Samples      map[string]map[string][]float64 `json:"samples"`
	WarmUp       map[string]map[string][]float64 `json:"warmUpSamples"`
}

func (r sideBySide) print(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %26s %26s %7s\n", "figure (median, p95)", "virtlauncher", "kubevirt", "ratio")
	for _, set := range []struct {
		label string
		m     map[string]map[string][]float64
	}{{"", r.Samples}, {", warm-up", r.WarmUp}} {
		for _, fig := range []string{figRunning, figReady, figGone} {
			o, k := samples.Summarize(set.m["virtlauncher"][fig]), samples.Summarize(set.m["kubevirt"][fig])
			ratio := "-"
			if k.Median > 0 {
				ratio = fmt.Sprintf("%.2f", o.Median/k.Median)
			}
			fmt.Fprintf(&b, "%-32s %12.0f %6.0f (n=%d) %12.0f %6.0f (n=%d) %7s\n", fig+set.label, o.Median, o.P95, o.N, k.Median, k.P95, k.N, ratio)
		}
	}
	t.Logf("side by side, kubectl's view:\n%s", b.String())
}

// envInt reads a positive count from the environment, def when unset.
func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a count of at least 1", key, v)
	}
	return n
}
