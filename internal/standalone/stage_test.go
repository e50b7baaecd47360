package standalone

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestBinaryReach: a binary in a directory only root can enter is not
// reachable by the launcher's user, and its copy is.
func TestBinaryReach(t *testing.T) {
	o := launcherUser(t)
	// Not t.TempDir: its parent is 0700.
	root := testenv.OpenDir(t)
	private := filepath.Join(root, "private")
	open := filepath.Join(root, "open")
	for dir, mode := range map[string]os.FileMode{private: 0o700, open: 0o755} {
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "virt-launcher"), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if reachable(filepath.Join(private, "virt-launcher"), o) {
		t.Error("a binary in a 0700 root-owned directory counts as reachable")
	}
	if !reachable(filepath.Join(open, "virt-launcher"), o) {
		t.Error("a binary in a 0755 directory counts as unreachable")
	}
	if err := os.Mkdir(filepath.Join(root, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	work, err := safefs.Open(filepath.Join(root, "work"))
	if err != nil {
		t.Fatal(err)
	}
	defer work.Close()
	dst, err := copyBinary(filepath.Join(private, "virt-launcher"), work, "bin")
	if err != nil {
		t.Fatal(err)
	}
	if !reachable(dst, o) {
		t.Errorf("the copy %s is not reachable", dst)
	}
	if b, _ := os.ReadFile(dst); string(b) != "#!/bin/true\n" {
		t.Errorf("copy holds %q", b)
	}
	if _, err := copyBinary(filepath.Join(private, "missing"), work, "bin"); err == nil {
		t.Error("a missing binary was copied")
	}
}
