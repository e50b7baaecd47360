package runrecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestBackground: a background run's directory is made once per VM name
// with its lock held; while the lock is held the run is listed as
// running and a second one is refused as such; once the lock is let go
// it is listed as ended, and a new one is refused until it is removed.
func TestBackground(t *testing.T) {
	testenv.Root(t, "records are root's")
	dir := filepath.Join(t.TempDir(), "records")
	b, lock, log, err := NewBackground(dir, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	log.WriteString("hello\n")
	log.Close()
	if _, _, _, err := NewBackground(dir, "default", "web"); err == nil || !strings.Contains(err.Error(), "runs in the background already") {
		t.Errorf("second background run while the first runs: %v", err)
	}
	runs, err := ListBackground(dir)
	if err != nil || len(runs) != 1 || !runs[0].Running || runs[0].FullName() != "default/web" || runs[0].Dir != b.Dir {
		t.Fatalf("ListBackground: %+v, %v", runs, err)
	}
	if err := UpdateBackground(b.Dir, func(s *BackgroundState) { s.Error = "boom" }); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	runs, err = ListBackground(dir)
	if err != nil || len(runs) != 1 || runs[0].Running || runs[0].Error != "boom" {
		t.Fatalf("ListBackground after the supervisor's end: %+v, %v", runs, err)
	}
	if _, _, _, err := NewBackground(dir, "default", "web"); err == nil || !strings.Contains(err.Error(), "vlctl rm default/web removes it") {
		t.Errorf("new background run over an ended one: %v", err)
	}
	if m, err := MatchBackground(runs, "web", ""); err != nil || m == nil || m.Dir != b.Dir {
		t.Errorf("MatchBackground(web): %+v, %v", m, err)
	}
	if m, err := MatchBackground(runs, "other/web", ""); err != nil || m != nil {
		t.Errorf("MatchBackground(other/web): %+v, %v", m, err)
	}
	f, err := OpenBackgroundLog(&runs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := os.ReadFile(f.Name()); string(b) != "hello\n" {
		t.Errorf("log %q", b)
	}
}
