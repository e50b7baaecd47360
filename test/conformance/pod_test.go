package conformance

// The pod harness is internal/launchertest: the real virt-launcher-monitor
// (and through it virt-launcher) as user virtlauncher in a directory laid
// out like KubeVirt's pod volumes, booting the test guest. The tests here
// deliberately use no launcher-side client code (launchertest's Client is
// never called).

import (
	"fmt"
	"os"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

const bootTimeout = 90 * time.Second

// env is the binaries, test guest and launcher user, prepared once (the
// --help test needs the binaries even without root).
var env launchertest.Env

type pod = launchertest.Pod

func TestMain(m *testing.M) { os.Exit(launchertest.Main(m, &env, "vl-conf-bin-")) }

// startPod starts the monitor as user virtlauncher with the flags
// virt-controller's pod template passes. With withNet the VMI has a
// masquerade interface on the pod network, and the pod runs in a network
// namespace of its own whose eth0 and tap virt-handler's privileged phase
// prepared beforehand.
func startPod(t *testing.T, name string, withNet bool) *pod {
	t.Helper()
	return startPodAfter(t, name, withNet, nil)
}

// startPodAfter is startPod with prepare run on the laid-out pod before it
// starts (to place what virt-handler and the kubelet would have mounted).
func startPodAfter(t *testing.T, name string, withNet bool, prepare func(*pod)) *pod {
	t.Helper()
	p := env.NewDeferred(t, name, podOptions(withNet))
	if prepare != nil {
		prepare(p)
	}
	p.Start()
	return p
}

// podOptions are the conformance pods' options: the flags
// virt-controller's pod template passes.
func podOptions(withNet bool) launchertest.Options {
	return launchertest.Options{
		Namespace:      "conformance",
		DirPrefix:      "vc",
		QemuTimeout:    250 * time.Second,
		Grace:          45,
		SharedCaps:     true,
		ExtraArgs:      []string{"--hook-sidecars", "0"},
		SeparateStdout: true,
		Network:        withNet,
	}
}

// loadVMI parses and defaults the manifest as virt-api would have (the
// handler sends the stored, defaulted object), in phase Scheduled as at the
// first Sync.
func loadVMI(yaml string) (*v1.VirtualMachineInstance, error) {
	v, err := vmi.Load([]byte(yaml), vmi.Options{})
	if err != nil {
		return nil, fmt.Errorf("load test VMI: %w", err)
	}
	v.Status.Phase = v1.Scheduled
	return v, nil
}
