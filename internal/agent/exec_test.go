package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// execAgent is an in-memory agent for guest-exec: the command "exits"
// after running polls with code and output; pid is what guest-exec answers.
type execAgent struct {
	pid, code, running int
	out                string
	startErr           error
	got                map[string]any // the guest-exec arguments
	polls              int
}

func (a *execAgent) run(_ context.Context, command string) (string, error) {
	var req struct {
		Execute   string         `json:"execute"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(command), &req); err != nil {
		return "", fmt.Errorf("agent got bad JSON %q: %w", command, err)
	}
	switch req.Execute {
	case "guest-exec":
		a.got = req.Arguments
		if a.startErr != nil {
			return "", a.startErr
		}
		return fmt.Sprintf(`{"return":{"pid":%d}}`, a.pid), nil
	case "guest-exec-status":
		if int(req.Arguments["pid"].(float64)) != a.pid {
			return `{"error":{"class":"GenericError","desc":"Invalid parameter 'pid'"}}`, nil
		}
		a.polls++
		if a.polls <= a.running {
			return `{"return":{"exited":false}}`, nil
		}
		return fmt.Sprintf(`{"return":{"exitcode":%d,"out-data":%q,"exited":true}}`, a.code, base64.StdEncoding.EncodeToString([]byte(a.out))), nil
	}
	return "", fmt.Errorf("unexpected command %s", req.Execute)
}

func TestExec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		agent   execAgent
		timeout time.Duration
		wantOut string
		wantErr string // "" none; "exit N" an ExitError with code N
	}{
		{name: "exits 0", agent: execAgent{pid: 7, out: "hello\n"}, timeout: time.Second, wantOut: "hello\n"},
		{name: "runs a while", agent: execAgent{pid: 7, running: 3, out: "ok"}, timeout: time.Second, wantOut: "ok"},
		{name: "exits 3", agent: execAgent{pid: 7, code: 3, out: "partial"}, timeout: time.Second, wantOut: "partial", wantErr: "exit 3"},
		{name: "never exits", agent: execAgent{pid: 7, running: 1 << 30}, timeout: 200 * time.Millisecond, wantErr: "timed out after 200ms waiting for guest pid 7"},
		{name: "bad pid", agent: execAgent{pid: 0}, timeout: time.Second, wantErr: "invalid pid 0"},
		{name: "agent gone", agent: execAgent{startErr: errors.New("Guest agent is not responding")}, timeout: time.Second, wantErr: "not responding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.agent
			out, err := Exec(context.Background(), a.run, "/bin/echo", []string{"a \"quoted\" arg", "b"}, tc.timeout)
			var exit ExitError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Exec: %v", err)
			case strings.HasPrefix(tc.wantErr, "exit "):
				if !errors.As(err, &exit) || fmt.Sprintf("exit %d", exit.Code) != tc.wantErr {
					t.Fatalf("Exec error %v, want an ExitError (%s)", err, tc.wantErr)
				}
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Exec error %v, want one with %q", err, tc.wantErr)
			}
			if out != tc.wantOut {
				t.Errorf("output %q, want %q", out, tc.wantOut)
			}
			// Arguments travel as JSON, quotes and all (KubeVirt pastes
			// them into the command text).
			if a.got["path"] != "/bin/echo" || fmt.Sprint(a.got["arg"]) != `[a "quoted" arg b]` || a.got["capture-output"] != true {
				t.Errorf("guest-exec arguments %v", a.got)
			}
		})
	}
}

// TestExecPollsTenTimesPerTimeout: the status is asked every tenth of the
// timeout, as KubeVirt does.
func TestExecPollsTenTimesPerTimeout(t *testing.T) {
	a := execAgent{pid: 9, running: 1 << 30}
	t0 := time.Now()
	_, err := Exec(context.Background(), a.run, "/bin/true", nil, 500*time.Millisecond)
	if err == nil {
		t.Fatal("a command that never exits did not time out")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("timed out after %v, want about 500ms", d)
	}
	if a.polls < 5 || a.polls > 11 {
		t.Errorf("%d status polls in the timeout, want about 10", a.polls)
	}
}

// TestWait: Wait asks until the command has exited, and gives up, saying
// so, when its context ends first.
func TestWait(t *testing.T) {
	a := &execAgent{pid: 9, running: 3, code: 4, out: "done"}
	st, err := Wait(context.Background(), a.run, 9)
	if err != nil || !st.Exited || st.ExitCode != 4 || string(st.Stdout) != "done" || a.polls != 4 {
		t.Errorf("Wait: %+v, %v after %d polls; want exit 4, %q after 4", st, err, a.polls, "done")
	}
	forever := &execAgent{pid: 9, running: 1 << 30}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Wait(ctx, forever.run, 9); err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "guest pid 9 has not exited") {
		t.Errorf("Wait past its deadline: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Wait took %s past a 300 ms deadline", d)
	}
}
