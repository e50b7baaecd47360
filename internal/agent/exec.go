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

// Result is what guest-exec-status says of a command it started.
type Result struct {
	// Exited: the command has ended; the fields below are its last word.
	Exited bool
	// ExitCode is its exit status; Signal the signal that ended it (0:
	// none).
	ExitCode, Signal int
	// Stdout and Stderr are its output, as far as the agent kept it
	// (qemu-ga keeps 16 MiB of each; the Truncated flags say it dropped
	// the rest).
	Stdout, Stderr             []byte
	OutTruncated, ErrTruncated bool
}

// Start runs command with args in the guest with its output captured
// (guest-exec) and returns the guest's pid of it, for Status. input, when
// not nil, is the command's standard input.
func Start(ctx context.Context, run Runner, command string, args []string, input []byte) (int, error) {
	if args == nil {
		args = []string{}
	}
	a := map[string]any{"path": command, "arg": args, "capture-output": true}
	if input != nil {
		a["input-data"] = base64.StdEncoding.EncodeToString(input)
	}
	req, err := json.Marshal(map[string]any{"execute": "guest-exec", "arguments": a})
	if err != nil {
		return 0, fmt.Errorf("guest-exec %s: %w", command, err)
	}
	reply, err := run(ctx, string(req))
	if err != nil {
		return 0, fmt.Errorf("guest-exec %s: %w", command, err)
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := decodeReturn("guest-exec", reply, &started); err != nil {
		return 0, err
	}
	if started.PID <= 0 {
		return 0, fmt.Errorf("guest-exec %s: invalid pid %d in reply %.200q", command, started.PID, reply)
	}
	return started.PID, nil
}

// Status asks guest-exec-status of the command Start started as pid.
func Status(ctx context.Context, run Runner, pid int) (Result, error) {
	reply, err := run(ctx, fmt.Sprintf(`{"execute":"guest-exec-status","arguments":{"pid":%d}}`, pid))
	if err != nil {
		return Result{}, fmt.Errorf("guest-exec-status of pid %d: %w", pid, err)
	}
	var st struct {
		Exited       bool   `json:"exited"`
		ExitCode     int    `json:"exitcode"`
		Signal       int    `json:"signal"`
		OutData      string `json:"out-data"`
		ErrData      string `json:"err-data"`
		OutTruncated bool   `json:"out-truncated"`
		ErrTruncated bool   `json:"err-truncated"`
	}
	if err := decodeReturn("guest-exec-status", reply, &st); err != nil {
		return Result{}, err
	}
	r := Result{Exited: st.Exited, ExitCode: st.ExitCode, Signal: st.Signal, OutTruncated: st.OutTruncated, ErrTruncated: st.ErrTruncated}
	if r.Stdout, err = base64.StdEncoding.DecodeString(st.OutData); err != nil {
		return Result{}, fmt.Errorf("guest-exec-status of pid %d: output: %w", pid, err)
	}
	if r.Stderr, err = base64.StdEncoding.DecodeString(st.ErrData); err != nil {
		return Result{}, fmt.Errorf("guest-exec-status of pid %d: error output: %w", pid, err)
	}
	return r, nil
}

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
	deadline := time.Now().Add(timeout)
	pid, err := Start(ctx, run, command, args, nil)
	if err != nil {
		return "", err
	}
	every := timeout / 10
	for {
		st, err := Status(ctx, run, pid)
		if err != nil {
			return "", fmt.Errorf("%s: %w", command, err)
		}
		if st.Exited {
			if st.ExitCode != 0 {
				return string(st.Stdout), ExitError{Code: st.ExitCode}
			}
			return string(st.Stdout), nil
		}
		if time.Now().Add(every).After(deadline) {
			return "", fmt.Errorf("timed out after %v waiting for guest pid %d of command %s to exit", timeout, pid, command)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("guest-exec %s (pid %d): %w", command, pid, ctx.Err())
		case <-time.After(every):
		}
	}
}

// Wait asks Status of pid until the command has exited or ctx ends:
// often at first (a short command's answer comes at once), then once a
// second. A command still running when ctx ends is left running: the
// agent has no way to stop it.
func Wait(ctx context.Context, run Runner, pid int) (Result, error) {
	every := 20 * time.Millisecond
	for {
		st, err := Status(ctx, run, pid)
		if err != nil || st.Exited {
			return st, err
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("guest pid %d has not exited: %w", pid, ctx.Err())
		case <-time.After(every):
		}
		every = min(2*every, time.Second)
	}
}
