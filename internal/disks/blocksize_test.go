package disks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestBlockSizes: what blockSize.matchVolume gets. A file (existing or
// not yet) has its file system's block size for both; a block device its
// own sizes, here a loop device made with 4 KiB logical sectors (not the
// 512 of a default device, so a probe that guessed would fail).
func TestBlockSizes(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "disk.img")
	if l, p := blockSizes(f, false); l != uint(st.Bsize) || p != uint(st.Bsize) || l == 0 {
		t.Errorf("a file not created yet: %d/%d, want the file system's %d", l, p, st.Bsize)
	}
	if err := os.WriteFile(f, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, p := blockSizes(f, false); l != uint(st.Bsize) || p != uint(st.Bsize) {
		t.Errorf("a file: %d/%d, want %d", l, p, st.Bsize)
	}
	if l, p := blockSizes(filepath.Join(dir, "none", "x.img"), false); l != 0 || p != 0 {
		t.Errorf("nowhere: %d/%d, want 0/0 (unknown)", l, p)
	}

	testenv.Programs(t, "losetup")
	backing := filepath.Join(dir, "block.img")
	if err := os.WriteFile(backing, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", "4096", backing).Output()
	if err != nil {
		testenv.Need(t, "a loop device", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	if l, p := blockSizes(dev, true); l != 4096 || p != 4096 {
		t.Errorf("loop device with 4 KiB sectors: %d/%d, want 4096/4096", l, p)
	}
}
