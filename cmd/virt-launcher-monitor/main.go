// Command virt-launcher-monitor is PID 1 of a KubeVirt launcher pod: it runs
// virt-launcher with the same arguments, reaps zombies, forwards signals,
// starts a new launcher when one dies by accident while its guest runs, and
// exits with the launcher's status. See internal/monitor and
// `virt-launcher-monitor --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/virtlauncher/virtlauncher/internal/logging"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
)

func main() {
	// The monitor allocates almost nothing after start-up; a low GC target
	// and a soft limit keep its heap, and so its RSS, at about 3 MiB in
	// every pod. The limit is not lower because the runtime's own memory
	// counts against it: at 4 MiB the GC ran hundreds of times a second
	// while the monitor cleaned up. GOGC/GOMEMLIMIT in the environment win.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One P: the monitor never computes in parallel, and every P
		// costs its own caches (about 0.4 MiB of RSS each).
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(8 << 20)
	}

	cfg, err := monitor.ParseArgs(os.Args[1:], os.Getenv)
	log := logging.New(os.Stderr, "virt-launcher-monitor", logging.Verbosity(cfg.Verbosity))
	if err != nil {
		log.Error("bad arguments", "reason", err)
		fmt.Fprint(os.Stderr, monitor.Usage)
		os.Exit(1)
	}
	if cfg.Help {
		fmt.Fprint(os.Stdout, monitor.Usage)
		return
	}
	os.Exit(monitor.Run(context.Background(), log, cfg))
}
