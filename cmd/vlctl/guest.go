package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// vlctl exec and cp reach the guest through its agent (qemu-guest-agent),
// on a libvirt connection of their own to the daemon of the VM's launcher:
// they need neither a network nor a login in the guest.

// dialAgent connects to the guest agent of the run's VM, refusing a
// daemon socket that is not its run's.
func dialAgent(ctx context.Context, e *runrecord.Entry) (*agent.Daemon, error) {
	if e.VMI == nil {
		return nil, fmt.Errorf("%s: its record has no VMI", e.FullName())
	}
	// The launcher's session daemon has its sockets in libvirt/ of the
	// run dir, under KubeVirt's name (virtqemud-sock: the socket, or a
	// link to libvirtd's).
	sock := filepath.Join(layout.Under(e.WorkDir).LibvirtRunDir, "libvirt", "virtqemud-sock")
	d, err := agent.DialDaemon(ctx, sock, "qemu:///session", domain.DomainName(e.VMI.Namespace, e.VMI.Name), e.PeerOwnedBy)
	if err != nil {
		return nil, fmt.Errorf("%s: guest agent: %w", e.FullName(), err)
	}
	return d, nil
}

// withAgent calls f with the guest agent of the VM that query names, all
// of it within timeout.
func withAgent(ctx context.Context, n *nameFlags, query string, timeout time.Duration, f func(context.Context, *runrecord.Entry, *agent.Daemon) error) error {
	e, err := n.find(query)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := dialAgent(ctx, e)
	if err != nil {
		return err
	}
	defer d.Close()
	return f(ctx, e, d)
}

// newGuestAccessCmds are the ways into a running guest.
func newGuestAccessCmds() []*cobra.Command {
	return append([]*cobra.Command{newExecCmd(), newCpCmd(), newVNCCmd(), newScreenshotCmd()}, newSSHCmds()...)
}

func newExecCmd() *cobra.Command {
	var n nameFlags
	var timeout time.Duration
	var stdin bool
	cmd := &cobra.Command{
		Use:   "exec NAME [--timeout D] [-i] -- COMMAND [ARG...]",
		Short: "Run a command in the guest through its guest agent; its output and exit status come back",
		Long: `exec runs COMMAND with its ARGs in the guest through the guest agent (qemu-guest-agent's
guest-exec, then guest-exec-status until it exits), as virtctl's guest-exec-like tools do: no
network and no login in the guest is needed, only its agent. COMMAND is run as the agent runs
it (root, in a Linux guest), not through a shell, and found in the agent's PATH. Its standard
output and standard error are printed once it has exited (the agent keeps 16 MiB of each), and
vlctl exits with its exit status (128+N for a command ended by signal N).
With -i, vlctl's standard input is read to its end first and given to the command.
A command still running after --timeout is left running in the guest (the agent cannot stop
it) and vlctl fails. NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM
of that name.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash != 1 {
				return errors.New("exec: give NAME, then -- and the command: vlctl exec NAME -- COMMAND [ARG...]")
			}
			if timeout <= 0 {
				return fmt.Errorf("exec: --timeout %s: must be more than 0", timeout)
			}
			var input []byte
			if stdin {
				var err error
				if input, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxExecInput+1)); err != nil {
					return fmt.Errorf("exec: read standard input: %w", err)
				}
				if len(input) > maxExecInput {
					return fmt.Errorf("exec: -i: standard input is more than %d bytes", maxExecInput)
				}
			}
			var res agent.Result
			err := withAgent(cmd.Context(), &n, args[0], timeout, func(ctx context.Context, e *runrecord.Entry, d *agent.Daemon) error {
				pid, err := agent.Start(ctx, d.Run, args[1], args[2:], input)
				if err != nil {
					return fmt.Errorf("exec in %s: %w", e.FullName(), err)
				}
				if res, err = agent.Wait(ctx, d.Run, pid); err != nil {
					return fmt.Errorf("exec in %s: %s: %w", e.FullName(), args[1], err)
				}
				return nil
			})
			if err != nil {
				return err
			}
			cmd.OutOrStdout().Write(res.Stdout)
			cmd.ErrOrStderr().Write(res.Stderr)
			if res.OutTruncated || res.ErrTruncated {
				fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: the guest agent kept only part of the command's output\n")
			}
			switch {
			case res.Signal != 0:
				return exitStatus(128 + res.Signal)
			case res.ExitCode != 0:
				return exitStatus(res.ExitCode)
			}
			return nil
		},
	}
	n.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long the command may run")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "give vlctl's standard input (read to its end first) to the command")
	return cmd
}

// maxExecInput bounds -i's input: it goes to the agent in one message.
const maxExecInput = 1 << 20

func newCpCmd() *cobra.Command {
	var n nameFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of the guest through its guest agent",
		Long: `cp copies one file between this machine and the guest: vlctl cp FILE NAME:PATH puts FILE
into the guest at PATH, vlctl cp NAME:PATH FILE brings PATH back into FILE; "-" as FILE is
standard input or output. PATH must be absolute; ending in /, it is a directory the file goes
into under its own name. It goes through the guest agent
(qemu-guest-agent's guest-file-open, -read, -write and -close), as KubeVirt propagates SSH keys
to a guest, so it needs neither a network, nor an SSH server, nor scp or sftp in the guest,
and no key: only the agent. A file written in the guest is created (or emptied first) with the
agent's rights and the mode the agent gives new files; one brought back is written to FILE
as vlctl's user, 0644 (a new file renamed over it once complete; into a directory, by the
guest file's name). Directories are not copied. For large
files SSH is faster: vlctl ssh NAME -- cat PATH > FILE.
NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM of that name.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst, err := parseCp(args[0], args[1])
			if err != nil {
				return err
			}
			return withAgent(cmd.Context(), &n, src.vm+dst.vm, timeout, func(ctx context.Context, e *runrecord.Entry, d *agent.Daemon) error {
				if dst.vm != "" {
					return cpIn(ctx, cmd, d, e, src.path, dst.path)
				}
				return cpOut(ctx, cmd, d, e, src.path, dst.path)
			})
		},
	}
	n.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long the copy may take")
	return cmd
}

// cpEnd is one side of vlctl cp: a VM's path (vm set) or a local file.
type cpEnd struct{ vm, path string }

// parseCp tells which side is the guest's: NAME:PATH, where a local file
// with a colon is written as ./a:b or /a:b.
func parseCp(a, b string) (src, dst cpEnd, err error) {
	side := func(s string) cpEnd {
		if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
			return cpEnd{path: s}
		}
		if vm, p, ok := strings.Cut(s, ":"); ok {
			return cpEnd{vm: vm, path: p}
		}
		return cpEnd{path: s}
	}
	src, dst = side(a), side(b)
	switch {
	case (src.vm == "") == (dst.vm == ""):
		return src, dst, fmt.Errorf("cp: exactly one of %q and %q must be NAME:PATH, the guest's file", a, b)
	case src.vm != "" && !strings.HasPrefix(src.path, "/"), dst.vm != "" && !strings.HasPrefix(dst.path, "/"):
		return src, dst, fmt.Errorf("cp: the guest's path in %q must be absolute", map[bool]string{true: a, false: b}[src.vm != ""])
	}
	return src, dst, nil
}

// cpIn copies the local file (or standard input) into the guest.
func cpIn(ctx context.Context, cmd *cobra.Command, d *agent.Daemon, e *runrecord.Entry, local, guest string) error {
	var r io.Reader = cmd.InOrStdin()
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("cp: %s is not a regular file", local)
		}
		r = f
	}
	if strings.HasSuffix(guest, "/") && local != "-" {
		guest += filepath.Base(local) // into that directory, as cp does
	}
	if _, err := agent.WriteFile(ctx, d.Run, guest, r); err != nil {
		return fmt.Errorf("cp into %s: %w", e.FullName(), err)
	}
	return nil
}

// cpOut copies the guest's file to the local file (or standard output;
// into a directory, by the guest file's name).
func cpOut(ctx context.Context, cmd *cobra.Command, d *agent.Daemon, e *runrecord.Entry, guest, local string) error {
	read := func(w io.Writer) error {
		if _, err := agent.ReadFile(ctx, d.Run, guest, w); err != nil {
			return fmt.Errorf("cp from %s: %w", e.FullName(), err)
		}
		return nil
	}
	if local == "-" {
		return read(cmd.OutOrStdout())
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, filepath.Base(guest))
	}
	if err := replaceFile(local, read); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return nil
}
