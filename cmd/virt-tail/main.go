// Command virt-tail streams a VM's serial console log to stdout. It runs in
// the guest-console-log container of a KubeVirt launcher pod as
//
//	virt-tail --logfile /var/run/kubevirt-private/<vmi-uid>/virt-serial0-log
//
// so that `kubectl logs -c guest-console-log` shows the console.
//
// Behaviour (KubeVirt's, except where noted):
//   - the log file need not exist yet; it is followed as it grows, and
//     re-read from the start when it is truncated or replaced;
//   - the serial console socket is the log's name without "-log"
//     (virt-serial0). virt-tail waits for it as long as the pod lives, as
//     KubeVirt's does: a live migration's target pod has no QEMU until the
//     migration starts, which may be minutes after the pod (a 20 s limit
//     here once made the target's guest-console-log container crash-loop).
//     With --socket-timeout D it exits 1 if the socket has not appeared
//     within D. When it is removed after having existed (QEMU is gone),
//     virt-tail prints what is left and exits 0 (KubeVirt's exits 1 then; a
//     finished VM's console is not an error);
//   - <logfile>-sigTerm being removed, or <logfile>-sigTerm-done existing,
//     ends it with 0, as KubeVirt's launcher uses them;
//   - SIGTERM and SIGINT end it with 0 after printing what is left
//     (KubeVirt's handles only SIGINT).
//
// Changes are found by polling every --poll (100 ms): one stat and at most
// one read per period, no inotify dependency. Unknown flags are ignored.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/logging"
)

type config struct {
	logFile       string
	verbosity     int
	socketTimeout time.Duration // 0: wait for the socket as long as it takes
	poll          time.Duration
}

const usage = `Usage: virt-tail --logfile PATH [flags]

Streams the serial console log PATH to stdout, following it as it grows.

  --logfile PATH            the log to stream (required)
  --socket-timeout DURATION exit 1 if PATH without "-log" (the console socket)
                            has not appeared by then (default 0: wait as long
                            as it takes, as a migration target must)
  --poll DURATION           how often to look for new output (default 100ms)
  -v, --v INT               log verbosity (default 2; VIRT_LAUNCHER_LOG_VERBOSITY wins)
`

func main() {
	c, help, err := parseArgs(os.Args[1:])
	log := logging.New(os.Stderr, "virt-tail", logging.Verbosity(c.verbosity))
	if help {
		fmt.Print(usage)
		return
	}
	if err != nil {
		log.Error("bad arguments", "reason", err)
		fmt.Fprint(os.Stderr, usage)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log, c, os.Stdout); err != nil {
		log.Error("virt-tail failed", "reason", err)
		os.Exit(1)
	}
}

// parseArgs reads --name value / --name=value (one or two dashes) and
// ignores unknown flags, as KubeVirt's pflag set-up does.
func parseArgs(args []string) (config, bool, error) {
	c := config{verbosity: 2, poll: 100 * time.Millisecond}
	help := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag %s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "logfile":
			c.logFile, err = value()
		case "v":
			var s string
			if s, err = value(); err == nil {
				if c.verbosity, err = strconv.Atoi(s); err != nil {
					err = fmt.Errorf("flag -v: %q is not an integer", s)
				}
			}
		case "socket-timeout", "poll":
			var s string
			var d time.Duration
			if s, err = value(); err == nil {
				if d, err = time.ParseDuration(s); err != nil || d < 0 {
					err = fmt.Errorf("flag --%s: %q is not a non-negative duration", name, s)
				}
			}
			if name == "poll" {
				if d == 0 {
					d = 100 * time.Millisecond
				}
				c.poll = d
			} else {
				c.socketTimeout = d
			}
		case "help", "h":
			help = true
		}
		if err != nil {
			return c, help, err
		}
	}
	if c.logFile == "" && !help {
		return c, help, errors.New("--logfile is required")
	}
	return c, help, nil
}

// follower reads a growing file and writes complete lines.
type follower struct {
	path    string
	out     io.Writer
	f       *os.File
	ino     uint64
	off     int64
	partial []byte
	buf     []byte
}

// step opens the file if needed, reacts to truncation and replacement,
// and copies new complete lines to out.
func (t *follower) step() error {
	st, err := os.Stat(t.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // not there (yet, or between rotations)
		}
		return err
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if t.f != nil && ino != t.ino {
		// Replaced: finish the old file, then start the new one.
		if err := t.drain(); err != nil {
			return err
		}
		t.f.Close()
		t.f = nil
	}
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		t.f, t.ino, t.off = f, ino, 0
	}
	if st.Size() < t.off { // truncated: start over
		if _, err := t.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		t.off = 0
	}
	return t.drain()
}

// drain copies everything readable now.
func (t *follower) drain() error {
	if t.f == nil {
		return nil
	}
	if t.buf == nil {
		t.buf = make([]byte, 32<<10)
	}
	for {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			t.off += int64(n)
			if werr := t.emit(t.buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// emit writes complete lines and keeps the unfinished tail for later.
func (t *follower) emit(b []byte) error {
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		t.partial = append(t.partial, b...)
		return nil
	}
	if len(t.partial) > 0 {
		if _, err := t.out.Write(t.partial); err != nil {
			return err
		}
		t.partial = t.partial[:0]
	}
	if _, err := t.out.Write(b[:i+1]); err != nil {
		return err
	}
	t.partial = append(t.partial, b[i+1:]...)
	return nil
}

// finish prints what is left, including an unfinished last line.
func (t *follower) finish() error {
	err := t.step()
	if len(t.partial) > 0 {
		if _, werr := t.out.Write(append(t.partial, '\n')); err == nil {
			err = werr
		}
		t.partial = nil
	}
	if t.f != nil {
		t.f.Close()
	}
	return err
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// run follows c.logFile until ctx ends or the VM's console goes away. It
// returns nil for every normal end.
func run(ctx context.Context, log *slog.Logger, c config, out io.Writer) error {
	t := &follower{path: c.logFile, out: out}
	socket := ""
	if strings.HasSuffix(c.logFile, "-log") {
		socket = strings.TrimSuffix(c.logFile, "-log")
	}
	termFile := c.logFile + "-sigTerm"
	termDone := termFile + "-done"
	socketSeen, termSeen := false, false
	start := time.Now()
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	for {
		if err := t.step(); err != nil {
			t.finish()
			return fmt.Errorf("read %s: %w", c.logFile, err)
		}
		if socket != "" {
			switch now := exists(socket); {
			case now:
				socketSeen = true
			case socketSeen:
				log.Info("serial console socket removed; exiting", "path", socket)
				return t.finish()
			case c.socketTimeout > 0 && time.Since(start) > c.socketTimeout:
				t.finish()
				return fmt.Errorf("serial console socket %s did not appear within %v", socket, c.socketTimeout)
			}
		}
		if exists(termDone) {
			log.Info("termination marker found; exiting", "path", termDone)
			return t.finish()
		}
		if exists(termFile) {
			termSeen = true
		} else if termSeen {
			log.Info("termination file removed; exiting", "path", termFile)
			return t.finish()
		}
		select {
		case <-ctx.Done():
			return t.finish()
		case <-tick.C:
		}
	}
}
