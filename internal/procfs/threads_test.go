package procfs

import (
	"os"
	"testing"
)

// TestThreads reads this process's own threads: the main thread is among
// them, and every thread says where it may run.
func TestThreads(t *testing.T) {
	threads, err := Threads("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	main := false
	for _, th := range threads {
		main = main || th.TID == os.Getpid()
		if th.Allowed == "" || th.Comm == "" {
			t.Errorf("thread %+v: no name or no Cpus_allowed_list", th)
		}
	}
	if !main || len(threads) < 2 {
		t.Errorf("threads %+v: want the main thread and the runtime's others", threads)
	}
	if _, err := Threads("/proc", 1<<30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
