package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/cluster"
	"github.com/virtlauncher/virtlauncher/internal/kubevirtimage"
	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// KubeVirtVersion is the control plane's version (e2e/build/kubevirt).
const KubeVirtVersion = "v1.8.2"

// Launcher images: ours (`make image`), the one the cluster is installed
// with; and KubeVirt's own launcher on the same root file system
// (internal/kubevirtimage), pushed only by the scenarios that compare the
// two.
const launcherRepo = "virtlauncher/virt-launcher:dev"

// LauncherImage is our launcher image, the one the cluster's KubeVirt is
// installed with.
func (e *Env) LauncherImage() string { return e.Cluster.Registry() + "/" + launcherRepo }

// KubeVirtLauncherImage is KubeVirt's own launcher's image.
func (e *Env) KubeVirtLauncherImage() string { return e.kubevirtImage("virt-launcher") }

// PushKubeVirtLauncher builds KubeVirt's own launcher image from ours and
// the binaries `make kubevirt-launcher` put in bin/kubevirt, and pushes it
// as KubeVirtLauncherImage.
func (e *Env) PushKubeVirtLauncher(ctx context.Context) error {
	bin := filepath.Join(e.Root, "bin", "kubevirt")
	if err := kubevirtimage.CheckBinaries(bin); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "vl-e2e-kubevirt-launcher-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	archive := filepath.Join(e.Root, "bin", "virtlauncher-launcher.oci.tar")
	ours, err := ociimage.ReadArchive(archive, work)
	if err != nil {
		return fmt.Errorf("the launcher image: %w (run `make image`)", err)
	}
	img, err := kubevirtimage.Image(ctx, ours, bin, work, time.Unix(0, 0).UTC())
	if err != nil {
		return err
	}
	return e.Cluster.Images().PushImage(ctx, img, e.KubeVirtLauncherImage())
}

// UseLauncher switches the cluster's KubeVirt to the launcher image ref,
// as a cluster admin would (VIRT_LAUNCHER_IMAGE on the operator), and
// waits (10 min at most) until virt-controller renders launcher pods with
// it, virt-handler has restarted on it (its node-labeller init container
// runs the launcher image, so the image is pulled by then) and the
// KubeVirt CR is Available again. It returns how long the switch took.
func (e *Env) UseLauncher(ctx context.Context, ref string) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := e.Kubectl(ctx, "-n", "kubevirt", "set", "env", "deployment/virt-operator", "VIRT_LAUNCHER_IMAGE="+ref); err != nil {
		return 0, err
	}
	for {
		args, err := e.Kubectl(ctx, "-n", "kubevirt", "get", "deployment/virt-controller", "-o", "jsonpath={.spec.template.spec.containers[0].args}")
		if err != nil {
			return 0, err
		}
		ds, err := e.Kubectl(ctx, "-n", "kubevirt", "get", "daemonset/virt-handler", "-o", "jsonpath={.spec.template.spec.initContainers[*].image}")
		if err != nil {
			return 0, err
		}
		if strings.Contains(args, `"`+ref+`"`) && strings.Contains(" "+ds+" ", " "+ref+" ") {
			break
		}
		select {
		case <-ctx.Done():
			return 0, e.Explain(context.Background(), "kubevirt", fmt.Errorf("launcher image %s: virt-controller's args %s, virt-handler's init images %q: %w", ref, args, ds, ctx.Err()))
		case <-time.After(2 * time.Second):
		}
	}
	for _, obj := range []string{"deployment/virt-operator", "deployment/virt-controller", "daemonset/virt-handler"} {
		if _, err := e.KubectlTimeout(ctx, 6*time.Minute, "-n", "kubevirt", "rollout", "status", obj, "--timeout=5m"); err != nil {
			return 0, e.Explain(context.Background(), "kubevirt", fmt.Errorf("launcher image %s: %w", ref, err))
		}
	}
	if _, err := e.KubectlTimeout(ctx, 6*time.Minute, "-n", "kubevirt", "wait", "kv/kubevirt", "--for", "condition=Available", "--timeout=5m"); err != nil {
		return 0, e.Explain(context.Background(), "kubevirt", err)
	}
	return time.Since(start), nil
}

func (e *Env) kubevirtImage(component string) string {
	return e.Cluster.Registry() + "/kubevirt/" + component + ":" + KubeVirtVersion
}

// pushKubeVirt builds KubeVirt's component images as its release does
// (cmd/*/BUILD.bazel), from the binaries `make e2e-build` made:
// virt-operator, virt-api and virt-controller are one static binary each
// run as uid 1001 (their pods say runAsNonRoot); virt-handler runs as root
// on a Debian root filesystem (it is linked against glibc through cgo and
// runs nft, findmnt and sysctl): the launcher image's own (deploy/mkrootfs),
// which has those. And it pushes our launcher image.
func (e *Env) pushKubeVirt(ctx context.Context) error {
	epoch := time.Unix(0, 0).UTC()
	for _, comp := range []string{"virt-operator", "virt-api", "virt-controller"} {
		spec := ociimage.Spec{
			Files:   append(nonRootBase(), ociimage.File{Dst: "/usr/bin/" + comp, Src: filepath.Join(e.Bin, comp)}),
			Epoch:   epoch,
			Config:  ociimage.Config{Entrypoint: []string{"/usr/bin/" + comp}, User: "1001"},
			FilesBy: "e2e/suite: " + comp + " " + KubeVirtVersion,
		}
		if err := e.Cluster.Images().Push(ctx, spec, e.kubevirtImage(comp)); err != nil {
			return err
		}
	}
	rootfs := filepath.Join(e.Root, "bin", "image", "rootfs.tar")
	if _, err := os.Stat(rootfs); err != nil {
		return fmt.Errorf("virt-handler's base: %w (run `make image`)", err)
	}
	handler := ociimage.Spec{
		Rootfs: rootfs,
		Files: []ociimage.File{
			{Dst: "/usr/bin/virt-handler", Src: filepath.Join(e.Bin, "virt-handler")},
			{Dst: "/usr/bin/virt-chroot", Src: filepath.Join(e.Bin, "virt-chroot")},
		},
		Epoch:    epoch,
		Config:   ociimage.Config{Entrypoint: []string{"/usr/bin/virt-handler"}},
		RootfsBy: "deploy/mkrootfs: Debian 12 (mmdebstrap)",
		FilesBy:  "e2e/suite: virt-handler " + KubeVirtVersion,
	}
	if err := e.Cluster.Images().Push(ctx, handler, e.kubevirtImage("virt-handler")); err != nil {
		return err
	}
	archive := filepath.Join(e.Root, "bin", "virtlauncher-launcher.oci.tar")
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("the launcher image: %w (run `make image`)", err)
	}
	return e.Cluster.Images().PushArchive(ctx, archive, e.LauncherImage())
}

// nonRootBase is what KubeVirt's passwd-image gives its non-root images
// (BUILD.bazel): /etc/passwd with uid 1001, and a /tmp.
func nonRootBase() []ociimage.File {
	passwd := []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot-user:x:1001:1001::/home/nonroot-user:/sbin/nologin\n")
	return []ociimage.File{
		{Dst: "/tmp", Dir: true, Mode: 0o1777},
		{Dst: "/etc/passwd", Data: passwd, Mode: 0o644},
	}
}

// installKubeVirt installs KubeVirt as a cluster admin would: its operator
// manifest, the one setting that makes it use our launcher image
// (VIRT_LAUNCHER_IMAGE on the operator), and a KubeVirt CR, then waits for
// it to be Available.
func (e *Env) installKubeVirt(ctx context.Context) error {
	start := time.Now()
	if err := e.pushKubeVirt(ctx); err != nil {
		return err
	}
	e.logf("KubeVirt images pushed in %s", time.Since(start).Round(time.Second))
	// virt-operator, virt-api, virt-controller want a control-plane node.
	if _, err := e.Kubectl(ctx, "label", "node", cluster.NodeName, "node-role.kubernetes.io/control-plane=", "--overwrite"); err != nil {
		return err
	}
	if _, err := e.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(e.Bin, "kubevirt-operator.yaml")); err != nil {
		return err
	}
	if _, err := e.Kubectl(ctx, "-n", "kubevirt", "set", "env", "deployment/virt-operator", "VIRT_LAUNCHER_IMAGE="+e.LauncherImage()); err != nil {
		return err
	}
	// One operator is enough here (its manifest asks for two).
	if _, err := e.Kubectl(ctx, "-n", "kubevirt", "scale", "deployment/virt-operator", "--replicas=1"); err != nil {
		return err
	}
	if _, err := e.KubectlTimeout(ctx, 6*time.Minute, "-n", "kubevirt", "rollout", "status", "deployment/virt-operator", "--timeout=5m"); err != nil {
		return e.Explain(ctx, "kubevirt", err)
	}
	cr := `apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec:
  imagePullPolicy: IfNotPresent
  infra: {replicas: 1}
  configuration:
    imagePullPolicy: IfNotPresent
    developerConfiguration:
      useEmulation: true
      featureGates: []
` + obsoleteCPUModels()
	if _, err := e.KubectlStdin(ctx, cr, "apply", "-f", "-"); err != nil {
		return err
	}
	if _, err := e.KubectlTimeout(ctx, 16*time.Minute, "-n", "kubevirt", "wait", "kv/kubevirt", "--for", "condition=Available", "--timeout=15m"); err != nil {
		return e.Explain(ctx, "kubevirt", err)
	}
	// Available says KubeVirt's parts are up; a node takes VMIs once its
	// virt-handler has labelled it schedulable.
	for _, n := range e.Cluster.Nodes() {
		if _, err := e.KubectlTimeout(ctx, 6*time.Minute, "wait", "node/"+n, "--for", "jsonpath={.metadata.labels.kubevirt\\.io/schedulable}=true", "--timeout=5m"); err != nil {
			return e.Explain(ctx, "kubevirt", fmt.Errorf("node %s: %w", n, err))
		}
	}
	e.logf("KubeVirt %s Available in %s", KubeVirtVersion, time.Since(start).Round(time.Second))
	return nil
}

// obsoleteCPUModels is, for the KubeVirt CR, KubeVirt's default list of
// obsolete CPU models (v1.8.2, pkg/virt-handler/node-labeller/util)
// without kvm64. Under TCG, libvirt 9.0 gives kvm64 as the host model and
// no named model as usable. With kvm64 obsolete, virt-handler's node
// labeller labels no node as a migration target for that host model
// (cpu-model-migration.node.kubevirt.io/kvm64), so a host-model VMI's
// migration target pod fits no node ("didn't match Pod's node
// affinity/selector"). An emulation cluster's admin makes this setting to
// migrate; the labels come from virt-handler and the launcher image's
// `virsh domcapabilities`, which KubeVirt's own node-labeller.sh runs the
// same way.
func obsoleteCPUModels() string {
	var b strings.Builder
	b.WriteString("    obsoleteCPUModels:\n")
	for _, m := range []string{"486", "pentium", "pentium2", "pentium3", "pentiumpro", "coreduo", "n270", "core2duo",
		"Conroe", "athlon", "phenom", "qemu64", "qemu32", "kvm32", "Opteron_G1", "Opteron_G2"} {
		fmt.Fprintf(&b, "      %q: true\n      %q: true\n", m, m+"-v1")
	}
	return b.String()
}

// Explain adds what the namespace's pods and events say to err.
func (e *Env) Explain(ctx context.Context, ns string, err error) error {
	pods, _ := e.Kubectl(ctx, "-n", ns, "get", "pods", "-o", "wide")
	events, _ := e.Kubectl(ctx, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	lines := strings.Split(strings.TrimSpace(events), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return fmt.Errorf("%w\npods in %s:\n%s\nlast events:\n%s", err, ns, pods, strings.Join(lines, "\n"))
}

// SetFeatureGate turns a KubeVirt feature gate on or off in the KubeVirt
// CR and waits until the operator has taken the change in.
func (e *Env) SetFeatureGate(ctx context.Context, gate string, on bool) error {
	out, err := e.Kubectl(ctx, "-n", "kubevirt", "get", "kv/kubevirt", "-o", "jsonpath={.spec.configuration.developerConfiguration.featureGates}")
	if err != nil {
		return err
	}
	var gates []string
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &gates); err != nil {
			return fmt.Errorf("KubeVirt feature gates %q: %w", out, err)
		}
	}
	var next []string
	for _, g := range gates {
		if g != gate {
			next = append(next, g)
		}
	}
	if on {
		next = append(next, gate)
	}
	return e.PatchConfiguration(ctx, fmt.Sprintf("feature gate %s=%v", gate, on),
		map[string]any{"developerConfiguration": map[string]any{"featureGates": append([]string{}, next...)}})
}

// PatchConfiguration merges conf into the KubeVirt CR's spec.configuration
// and waits until the operator has taken the change (what) in.
func (e *Env) PatchConfiguration(ctx context.Context, what string, conf map[string]any) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"configuration": conf}})
	if err != nil {
		return err
	}
	if _, err := e.Kubectl(ctx, "-n", "kubevirt", "patch", "kv/kubevirt", "--type", "merge", "-p", string(patch)); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := e.Kubectl(ctx, "-n", "kubevirt", "get", "kv/kubevirt", "-o", "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.phase}")
		if err != nil {
			return err
		}
		if f := strings.Fields(out); len(f) == 3 && f[0] == f[1] && f[2] == "Deployed" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: KubeVirt did not take it in 2 min (generation, observed, phase: %s)", what, out)
		}
		time.Sleep(time.Second)
	}
}
