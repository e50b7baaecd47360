//go:build e2e

package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVirtiofsConfigMap: a VMI that shares a ConfigMap by virtiofs.
// KubeVirt's virt-controller adds the pod's virtiofs container for it,
// running our image's /usr/libexec/virtiofsd with its own command line as
// 107 without capabilities; our launcher's domain connects to its socket,
// and the guest mounts the share by the filesystem's name and reads the
// key's value.
func TestVirtiofsConfigMap(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	const name, key, value = "vmi-vfs", "mode", "shared-by-virtiofs"
	ok(env.KubectlStdin(ctx, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: vfs-config\ndata:\n  "+key+": "+value+"\n", "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "configmap", "vfs-config", "--ignore-not-found") })
	vmi := guestVMI(name)
	vmi.Shares = []testguest.Share{{Name: "app", ConfigMap: "vfs-config"}}
	ok(env.KubectlStdin(ctx, vmi.YAML(), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	env.WaitReady(t, ctx, name)

	pod := env.LauncherPod(t, ctx, name)
	cmd := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", `jsonpath={.spec.containers[?(@.name=="virtiofs-app")].command}`))
	args := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", `jsonpath={.spec.containers[?(@.name=="virtiofs-app")].args}`))
	t.Logf("virt-controller's virtiofs container: %s %s", cmd, args)
	if !strings.Contains(cmd, "/usr/libexec/virtiofsd") || !strings.Contains(args, "--socket-path=/var/run/kubevirt/virtiofs-containers/app.sock") {
		t.Errorf("the pod's virtiofs-app container runs %s %s, want /usr/libexec/virtiofsd on app.sock", cmd, args)
	}

	out := env.Console(t, ctx, name, "mkdir -p /tmp/app && mount -t virtiofs app /tmp/app; echo VL-VFS-$(cat /tmp/app/"+key+")", "VL-VFS-"+value)
	if !strings.Contains(out, "VL-VFS-"+value) {
		t.Errorf("the guest did not read %q from the virtiofs share; console:\n%s", value, out)
		t.Logf("virtiofs-app logs:\n%s", ok(env.Kubectl(ctx, "logs", pod, "-c", "virtiofs-app")))
	}
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vmi", name, "--wait=true", "--timeout=90s"))
}
