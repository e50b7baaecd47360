package suite

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// Helpers for the scenarios (e2e/e2e_test.go): each fails t with what it
// saw.

// LauncherPod is the name of the VMI's launcher pod.
func (e *Env) LauncherPod(t testing.TB, ctx context.Context, vmi string) string {
	t.Helper()
	uid, err := e.Kubectl(ctx, "get", "vmi", vmi, "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Kubectl(ctx, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		t.Fatal(err)
	}
	pods := strings.Fields(out)
	if len(pods) != 1 {
		t.Fatalf("VMI %s: %d launcher pods (%q), want 1", vmi, len(pods), out)
	}
	return pods[0]
}

// Console types line into the VMI's serial console with `virtctl
// console` once virtctl says it is connected (what is typed before that is
// lost), after a newline for a fresh prompt, and again every few seconds
// until the console shows want (45 s at most: a guest still booting may
// drop what is typed meanwhile). It returns what the console showed.
func (e *Env) Console(t testing.TB, ctx context.Context, vmi, line, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.tool("virtctl"), e.kubeconfig([]string{"console", vmi})...)
	cmd.Env = e.env()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const connected = "Successfully connected"
	for !strings.Contains(out.String(), connected) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	for ctx.Err() == nil {
		io.WriteString(in, "\n"+line+"\n")
		until := time.Now().Add(5 * time.Second)
		for time.Now().Before(until) && ctx.Err() == nil && !strings.Contains(out.String(), want) {
			time.Sleep(100 * time.Millisecond)
		}
		if strings.Contains(out.String(), want) {
			break
		}
	}
	in.Close() // virtctl ends at the end of its input
	if err := cmd.Wait(); err != nil && ctx.Err() == nil {
		t.Errorf("virtctl console %s: %v\n%s", vmi, err, out.String())
	}
	return out.String()
}

// WaitCondition waits (2 min at most) until obj's status condition typ is
// there (want) or gone or False (!want).
func (e *Env) WaitCondition(t testing.TB, ctx context.Context, obj, typ string, want bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		out, err := e.Kubectl(ctx, "get", obj, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			t.Fatal(err)
		}
		has := false
		last = ""
		for _, c := range o.Status.Conditions {
			last += c.Type + "=" + c.Status + " "
			if c.Type == typ && c.Status == "True" {
				has = true
			}
		}
		if has == want {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: condition %s %v not reached in 2 min; conditions: %s", obj, typ, want, last)
}

// WaitPrintable waits (5 min at most) until the VM's printableStatus is want.
func (e *Env) WaitPrintable(t testing.TB, ctx context.Context, vm, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var got string
	for time.Now().Before(deadline) {
		out, err := e.Kubectl(ctx, "get", "vm", vm, "-o", "jsonpath={.status.printableStatus}")
		if err != nil {
			t.Fatal(err)
		}
		if got = out; got == want {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("VM %s: printableStatus %q, want %q after 5 min", vm, got, want)
}

// WaitConsoleCount waits (5 min at most) until the pod's guest console
// log (KubeVirt's guest-console-log container) has marker n times.
func (e *Env) WaitConsoleCount(t testing.TB, ctx context.Context, pod, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var out string
	for time.Now().Before(deadline) {
		var err error
		if out, err = e.Kubectl(ctx, "logs", pod, "-c", "guest-console-log"); err == nil && testguest.CountMarker(out, marker) >= n {
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("pod %s: %q seen %d times on the guest console in 5 min, want %d; console:\n%s", pod, marker, testguest.CountMarker(out, marker), n, launchertest.Tail(out, 3000))
}

// WaitReady waits (10 min at most) for the VMI's Ready condition; on
// timeout the error says what the namespace's pods and events show.
func (e *Env) WaitReady(t testing.TB, ctx context.Context, vmi string) {
	t.Helper()
	if _, err := e.KubectlTimeout(ctx, 11*time.Minute, "wait", "vmi/"+vmi, "--for", "condition=Ready", "--timeout=10m"); err != nil {
		t.Fatal(e.Explain(ctx, "default", err))
	}
}
