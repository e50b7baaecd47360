package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
)

// largeSyncBound is how much the launcher's peak RSS may grow while
// concurrent Syncs of messages at the size limit arrive: the launcher's
// share of a KubeVirt pod's memory is the small overhead virt-controller
// adds for the compute container. Before calls carrying a VMI were
// admitted before their message was read, and decoded one at a time, ten
// such Syncs added about 150 MiB here; now about 40.
const largeSyncBound = 64 << 20

// TestLargeSyncsMemoryBound: rounds of ten concurrent Syncs, each on its
// own connection, each a VMI whose 4 MiB annotation (the message just
// under cmdserver.MaxMessageSize) decodes and is then refused by
// validation. Every call is answered within its deadline, refused either
// with the validation error naming metadata.annotations or with
// ResourceExhausted, and the launcher's peak RSS (VmHWM, reset to its
// current RSS first) grows by at most largeSyncBound. Afterwards a small
// Sync still gets its own answer: nothing stayed held.
func TestLargeSyncsMemoryBound(t *testing.T) {
	t.Parallel()
	const clients, rounds = 10, 3
	p := newPod(t, "mem", podOpts{})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conns := make([]cmdv1.CmdClient, clients)
	for i := range conns {
		conns[i] = cmdv1.NewCmdClient(p.Client(ctx).Conn())
	}
	launcher := p.MustChild("virt-launcher")

	v := p.vmi()
	v.Annotations = map[string]string{"big": ""}
	small, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	// Just under the message limit with the protobuf framing around it.
	v.Annotations["big"] = strings.Repeat("a", cmdserver.MaxMessageSize-len(small)-1024)
	big, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	send := func(cl cmdv1.CmdClient, js []byte) (*cmdv1.Response, error) {
		cctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
		defer cancel()
		return cl.SyncVirtualMachine(cctx, &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: js}})
	}
	// One call of each kind first, so that the launcher's one-time
	// allocations for them (decoder and validation tables, connection
	// buffers) are part of the baseline.
	v.Annotations["big"] = strings.Repeat("a", 257<<10)
	over, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range conns {
		if resp, err := send(cl, over); err != nil || resp.Success || !strings.Contains(resp.Message, "metadata.annotations") {
			t.Fatalf("warm-up Sync: resp %v err %v, want a refusal naming metadata.annotations", resp, err)
		}
	}

	resetPeakRSS(t, launcher)
	idle := statusKiB(launcher, "VmHWM:")
	var refused, exhausted int
	for r := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, cl := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				resp, err := send(cl, big)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case status.Code(err) == codes.ResourceExhausted:
					exhausted++
				case err != nil:
					t.Errorf("round %d: Sync of %d bytes: %v after %v", r, len(big), err, time.Since(t0))
				case resp.Success || !strings.Contains(resp.Message, "metadata.annotations"):
					t.Errorf("round %d: Sync of %d bytes: success=%v message %.200q, want a refusal naming metadata.annotations", r, len(big), resp.Success, resp.Message)
				default:
					refused++
				}
			}()
		}
		wg.Wait()
	}
	peak := statusKiB(launcher, "VmHWM:")
	t.Logf("%d rounds of %d concurrent %d-byte Syncs: %d refused by validation, %d ResourceExhausted; launcher peak RSS %d KiB idle, %d KiB after (+%d KiB, bound %d KiB)",
		rounds, clients, len(big), refused, exhausted, idle, peak, peak-idle, largeSyncBound>>10)
	if peak-idle > largeSyncBound>>10 {
		t.Errorf("launcher peak RSS grew by %d KiB (from %d to %d KiB) under %d concurrent %d-byte Syncs, more than the %d KiB bound",
			peak-idle, idle, peak, clients, len(big), largeSyncBound>>10)
	}
	if refused == 0 {
		t.Errorf("no large Sync was decoded and refused by validation: the test did not exercise decoding")
	}
	// Nothing is still held: a small Sync gets its own answer at once.
	if resp, err := send(conns[0], over); err != nil || resp.Success || !strings.Contains(resp.Message, "metadata.annotations") {
		t.Errorf("Sync after the large ones: resp %v err %v, want a refusal naming metadata.annotations", resp, err)
	}
	if _, exists, err := p.Client(ctx).GetDomain(ctx); err != nil || exists {
		t.Errorf("after the refused Syncs: domain exists=%v err=%v", exists, err)
	}
}

// resetPeakRSS sets pid's VmHWM to its current RSS (proc(5), clear_refs).
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the launcher's peak RSS: %v", err)
	}
}

// statusKiB reads a "kB" line of /proc/pid/status (0 when missing).
func statusKiB(pid int, key string) int {
	f := idLine(pid, key)
	if len(f) == 0 {
		return 0
	}
	var n int
	fmt.Sscan(f[0], &n)
	return n
}
