// Command fakelauncher stands in for virt-launcher in the monitor's tests.
// It is driven by environment variables (the monitor passes its environment
// through unchanged) so that its arguments stay free for the pass-through
// check:
//
//	FAKE_MODE          "" (launcher), "spawner" or "stubborn"
//	FAKE_ARGS_FILE     write os.Args[1:] there, one per line
//	FAKE_READY_FILE    create it once set-up is done
//	FAKE_ORPHANS       start a spawner that starts this many short-lived
//	                   children (half /bin/true, half /bin/sleep 0.2) and
//	                   exits without waiting, orphaning them
//	FAKE_ORPHAN_CMDS   "path arg...;path arg..." started the same way
//	FAKE_ORPHAN_MODE   FAKE_MODE for those orphans
//	FAKE_PID_FILE      the spawner appends the orphans' pids there
//	FAKE_WAIT_TERM     1: wait for SIGINT/SIGTERM/SIGQUIT before exiting and
//	                   write the signal's name to FAKE_TERM_FILE
//	FAKE_KILL_SELF     end by sending itself this signal number
//	FAKE_EXIT          exit status (default 0)
//	FAKE_STATUS_FILE   copy /proc/self/status there (capabilities, ids)
//
// In "stubborn" mode it ignores SIGTERM and sleeps until killed.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	switch os.Getenv("FAKE_MODE") {
	case "spawner":
		spawner()
		return
	case "stubborn":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		touch(os.Getenv("FAKE_READY_FILE"))
		for {
			time.Sleep(time.Hour)
		}
	}

	if f := os.Getenv("FAKE_ARGS_FILE"); f != "" {
		must(os.WriteFile(f, []byte(strings.Join(os.Args[1:], "\n")), 0o644))
	}
	if f := os.Getenv("FAKE_STATUS_FILE"); f != "" {
		b, err := os.ReadFile("/proc/self/status")
		must(err)
		must(os.WriteFile(f, b, 0o644))
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)

	if os.Getenv("FAKE_ORPHANS") != "" || os.Getenv("FAKE_ORPHAN_CMDS") != "" {
		self, err := os.Executable()
		must(err)
		env := append(os.Environ(), "FAKE_MODE=spawner")
		p, err := os.StartProcess(self, []string{self}, &os.ProcAttr{Env: env, Files: []*os.File{nil, os.Stdout, os.Stderr}})
		must(err)
		st, err := p.Wait()
		must(err)
		if !st.Success() {
			fail("spawner failed: %v", st)
		}
	}
	touch(os.Getenv("FAKE_READY_FILE"))

	if os.Getenv("FAKE_WAIT_TERM") == "1" {
		s := <-sigs
		if f := os.Getenv("FAKE_TERM_FILE"); f != "" {
			must(os.WriteFile(f, []byte(s.String()), 0o644))
		}
	}
	if s := os.Getenv("FAKE_KILL_SELF"); s != "" {
		n, err := strconv.Atoi(s)
		must(err)
		signal.Reset()
		must(syscall.Kill(os.Getpid(), syscall.Signal(n)))
		time.Sleep(10 * time.Second)
	}
	code, _ := strconv.Atoi(os.Getenv("FAKE_EXIT"))
	os.Exit(code)
}

// spawner starts the orphans and exits at once without waiting for them,
// so the kernel re-parents them to the nearest subreaper: the monitor.
func spawner() {
	env := []string{"PATH=" + os.Getenv("PATH"), "FAKE_MODE=" + os.Getenv("FAKE_ORPHAN_MODE")}
	attr := &os.ProcAttr{Env: env, Files: []*os.File{nil, nil, os.Stderr}}
	var pids []string
	n, _ := strconv.Atoi(os.Getenv("FAKE_ORPHANS"))
	for i := range n {
		argv := []string{"/bin/true"}
		if i%2 == 1 {
			argv = []string{"/bin/sleep", "0.2"}
		}
		p, err := os.StartProcess(argv[0], argv, attr)
		must(err)
		_ = p.Release()
	}
	for _, c := range strings.Split(os.Getenv("FAKE_ORPHAN_CMDS"), ";") {
		argv := strings.Fields(c)
		if len(argv) == 0 {
			continue
		}
		p, err := os.StartProcess(argv[0], argv, attr)
		must(err)
		pids = append(pids, strconv.Itoa(p.Pid))
		_ = p.Release()
	}
	if f := os.Getenv("FAKE_PID_FILE"); f != "" {
		must(os.WriteFile(f, []byte(strings.Join(pids, "\n")), 0o644))
	}
	os.Exit(0)
}

func touch(path string) {
	if path != "" {
		must(os.WriteFile(path, nil, 0o644))
	}
}

func must(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakelauncher: "+format+"\n", args...)
	os.Exit(99)
}
