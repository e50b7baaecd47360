//go:build e2e

// The e2e scenarios (e2e/README.md): a real single-node Kubernetes with an
// unchanged KubeVirt control plane, running VMs on our launcher image,
// driven with kubectl and virtctl. `make e2e` runs them; the build tag
// keeps them out of `make test`.
package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/suite"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// env is the cluster every scenario uses: bringing one up costs minutes.
var (
	env   *suite.Env
	guest suite.GuestImages
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: needs root (it runs a kubelet, containerd and KubeVirt on this machine)")
		os.Exit(1)
	}
	ctx := context.Background()
	logf := log.New(os.Stderr, "e2e: ", log.Ltime).Printf
	var err error
	if env, err = suite.Up(ctx, logf); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := 1
	if guest, err = env.PushTestGuest(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	} else {
		code = m.Run()
	}
	if err := env.Down(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: take the cluster down:", err)
		code = 1
	}
	os.Exit(code)
}

// vmiYAML is the test guest as a VMI: kernelBoot container and
// containerDisk from the registry, cloud-init NoCloud user-data that serves
// HTTP on port 80, a masquerade interface declaring that port.
func vmiYAML(name string) string {
	return fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: %[1]s
  labels: {app: %[1]s}
spec:
  terminationGracePeriodSeconds: 30
  domain:
    firmware:
      kernelBoot:
        kernelArgs: %[2]q
        container:
          image: %[3]s
          kernelPath: /boot/vmlinuz
          initrdPath: /boot/initrd.img
    resources:
      requests:
        memory: 256Mi
    devices:
      disks:
      - name: rootdisk
        disk: {bus: virtio}
      - name: cloudinit
        disk: {bus: virtio}
      interfaces:
      - name: default
        masquerade: {}
        ports:
        - port: 80
  networks:
  - name: default
    pod: {}
  volumes:
  - name: rootdisk
    containerDisk:
      image: %[4]s
  - name: cloudinit
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        mkdir -p /tmp/www && echo "hello from %[1]s" > /tmp/www/index.html
        busybox httpd -p 80 -h /tmp/www && echo VL-HTTPD-STARTED
`, name, testguest.DefaultCmdline, guest.Kernel, guest.Disk)
}

// must makes a func that fails t on a command's error and returns its output.
func must(t *testing.T) func(string, error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestContainerDiskVMI is the first scenario, with KubeVirt's
// containerDisk layouts both ways: the init-container copy (ImageVolume
// off, KubeVirt v1.8's default) and Kubernetes image volumes (on, v1.9's
// default).
func TestContainerDiskVMI(t *testing.T) {
	for _, imageVolume := range []bool{false, true} {
		name := "vmi-cd"
		if imageVolume {
			name = "vmi-cd-iv"
		}
		t.Run(fmt.Sprintf("ImageVolume=%v", imageVolume), func(t *testing.T) {
			ctx := context.Background()
			if err := env.SetFeatureGate(ctx, "ImageVolume", imageVolume); err != nil {
				t.Fatal(err)
			}
			runContainerDiskVMI(t, ctx, name, imageVolume)
		})
	}
}

func runContainerDiskVMI(t *testing.T, ctx context.Context, name string, imageVolume bool) {
	ok := must(t)
	start := time.Now()
	ok(env.KubectlStdin(ctx, vmiYAML(name), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	if _, err := env.KubectlTimeout(ctx, 11*time.Minute, "wait", "vmi/"+name, "--for", "condition=Ready", "--timeout=10m"); err != nil {
		t.Fatal(env.Explain(ctx, "default", err))
	}
	t.Logf("kubectl create -> Ready: %v", time.Since(start).Round(100*time.Millisecond))

	pod := env.LauncherPod(t, ctx, name)
	usesImageVolume := strings.Contains(ok(env.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.spec.volumes[*].image.reference}")), guest.Disk)
	if usesImageVolume != imageVolume {
		t.Errorf("ImageVolume %v, but the launcher pod has the containerdisk as an image volume: %v", imageVolume, usesImageVolume)
	}

	// The guest's serial console, through virt-api and virt-handler.
	out := env.Console(t, ctx, name, "echo VL-CONSOLE-$((6*7))")
	if !strings.Contains(out, "VL-CONSOLE-42") {
		t.Errorf("virtctl console: the guest did not answer; got:\n%s", out)
	}
	log := ok(env.Kubectl(ctx, "logs", pod, "-c", "guest-console-log"))
	for _, m := range []string{testguest.MarkerReady, "VL-HTTPD-STARTED"} {
		if _, ok := testguest.FindMarker(log, m); !ok {
			t.Errorf("guest-console-log has no %s:\n%s", m, log)
		}
	}

	// A Service in front of the guest's port 80.
	ok(env.Virtctl(ctx, time.Minute, "expose", "vmi", name, "--name", name+"-http", "--port", "8080", "--target-port", "80"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "service", name+"-http", "--ignore-not-found") })
	ip := ok(env.Kubectl(ctx, "get", "service", name+"-http", "-o", "jsonpath={.spec.clusterIP}"))
	body, err := httpGet(ctx, "http://"+ip+":8080/", time.Minute)
	if err != nil || !strings.Contains(body, "hello from "+name) {
		t.Errorf("GET through the Service %s:8080: %q, %v", ip, body, err)
	}

	// Pause and unpause: the Paused condition as KubeVirt reports it.
	ok(env.Virtctl(ctx, time.Minute, "pause", "vmi", name))
	env.WaitCondition(t, ctx, "vmi/"+name, "Paused", true)
	ok(env.Virtctl(ctx, time.Minute, "unpause", "vmi", name))
	env.WaitCondition(t, ctx, "vmi/"+name, "Paused", false)

	// kubectl delete ends it within the grace period (30 s) and leaves no pod.
	start = time.Now()
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vmi", name, "--wait=true", "--timeout=90s"))
	if _, err := env.KubectlTimeout(ctx, 2*time.Minute, "wait", "pod/"+pod, "--for=delete", "--timeout=60s"); err != nil {
		t.Fatalf("the launcher pod outlived its VMI: %v", err)
	}
	took := time.Since(start)
	t.Logf("kubectl delete -> no pod: %v", took.Round(100*time.Millisecond))
	if took > 30*time.Second+10*time.Second {
		t.Errorf("delete took %v, more than the grace period (30 s) and 10 s of slack", took)
	}
}

func httpGet(ctx context.Context, url string, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err == nil {
			data, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(data), nil
			}
			err = fmt.Errorf("%s: %v", resp.Status, rerr)
		}
		last = err
		time.Sleep(time.Second)
	}
	return "", last
}
