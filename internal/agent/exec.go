package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// ExitError is a command that ran in the guest and exited with a non-zero
// status: KubeVirt's Exec answers success with the exit code then (an exec
// probe fails on the code, not on an error).
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exited with error code: %d", e.Code) }

// Exec runs command with args in the guest through the agent (guest-exec
// with its output captured, then guest-exec-status until it exits), as
// KubeVirt's launcher does for exec probes: the status is asked ten times
// per timeout period, and a command still running after timeout is an
// error. It returns the command's standard output; a non-zero exit is an
// ExitError along with that output. A timeout of zero or less is 1 s.
func Exec(ctx context.Context, run Runner, command string, args []string, timeout time.Duration) (string, error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	if args == nil {
		args = []string{}
	}
	req, err := json.Marshal(map[string]any{
		"execute":   "guest-exec",
		"arguments": map[string]any{"path": command, "arg": args, "capture-output": true},
	})
	if err != nil {
		return "", fmt.Errorf("guest-exec %s: %w", command, err)
	}
	deadline := time.Now().Add(timeout)
	reply, err := run(ctx, string(req))
	if err != nil {
		return "", fmt.Errorf("guest-exec %s: %w", command, err)
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := decodeReturn("guest-exec", reply, &started); err != nil {
		return "", err
	}
	if started.PID <= 0 {
		return "", fmt.Errorf("guest-exec %s: invalid pid %d in reply %.200q", command, started.PID, reply)
	}
	statusReq := fmt.Sprintf(`{"execute":"guest-exec-status","arguments":{"pid":%d}}`, started.PID)
	every := timeout / 10
	for {
		reply, err := run(ctx, statusReq)
		if err != nil {
			return "", fmt.Errorf("guest-exec-status of %s (pid %d): %w", command, started.PID, err)
		}
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			OutData  string `json:"out-data"`
		}
		if err := decodeReturn("guest-exec-status", reply, &st); err != nil {
			return "", err
		}
		if st.Exited {
			out, err := base64.StdEncoding.DecodeString(st.OutData)
			if err != nil {
				return "", fmt.Errorf("guest-exec-status of %s (pid %d): output: %w", command, started.PID, err)
			}
			if st.ExitCode != 0 {
				return string(out), ExitError{Code: st.ExitCode}
			}
			return string(out), nil
		}
		if time.Now().Add(every).After(deadline) {
			return "", fmt.Errorf("timed out after %v waiting for guest pid %d of command %s to exit", timeout, started.PID, command)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("guest-exec %s (pid %d): %w", command, started.PID, ctx.Err())
		case <-time.After(every):
		}
	}
}
