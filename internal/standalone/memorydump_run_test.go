package standalone_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlMemoryDump: `vlctl memory-dump NAME FILE` writes the running
// guest's memory into a new file, as `virtctl memory-dump get` writes it
// to a PVC: an ELF core readelf reads, root's and 0600, with no ACL entry
// left; the guest runs on (its console still answers). A relative or an
// existing FILE is refused naming FILE and leaves nothing; a dump into a
// directory QEMU's user cannot enter fails naming it, and no file is
// left; after the run nothing is left.
func TestVlctlMemoryDump(t *testing.T) {
	needRoot(t)
	testenv.Programs(t, "readelf")
	t.Parallel()
	records := workRoot(t)
	file := testGuestManifest(t, "dump", "--no-network")
	dir := userDir(t, "vldump")
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing.core")
	if err := os.WriteFile(existing, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}

	root := workRoot(t)
	ptm, stdout, errOut, exited := runOnPTY(t, "run", "--emulation", "--workdir", root, "--record-dir", records, file)
	waitFor(t, "the guest's shell", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})
	for _, bad := range []struct{ path, want string }{
		{"dump.core", `FILE "dump.core": give an absolute path`},
		{existing, "FILE " + existing + ": exists"},
		{filepath.Join(closed, "x.core"), closed},
	} {
		if code, _, stderr := vlctl(t, time.Minute, "memory-dump", "dump", bad.path, "--record-dir", records); code == 0 || !strings.Contains(stderr, bad.want) {
			t.Errorf("vlctl memory-dump %s: exit %d, %q; want a failure saying %q", bad.path, code, stderr, bad.want)
		}
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "keep" {
		t.Errorf("the existing file after the refusal: %q, %v", b, err)
	}
	if left, _ := os.ReadDir(closed); len(left) != 0 {
		t.Errorf("left in the closed directory: %v", left)
	}

	out := filepath.Join(dir, "guest.core")
	code, _, stderr := vlctl(t, 2*time.Minute, "memory-dump", "dump", out, "--record-dir", records)
	if code != 0 || !strings.Contains(stderr, "dumped to "+out) {
		t.Fatalf("vlctl memory-dump: exit %d: %s", code, stderr)
	}
	t.Logf("%s", strings.TrimSpace(stderr))
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 || st.Size() < 128<<20 {
		t.Errorf("the dump file: %v, %v; want root's, 0600, at least the guest's 128 MiB", st, err)
	}
	for _, tc := range []struct{ flag, want string }{{"-h", "CORE (Core file)"}, {"-n", "NT_PRSTATUS"}} {
		b, err := exec.Command("readelf", tc.flag, out).CombinedOutput()
		if err != nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("readelf %s: %v, want %q in %.2000s", tc.flag, err, tc.want, b)
		}
	}
	if _, err := unix.Getxattr(out, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("an ACL is left on %s after the dump (%v)", out, err)
	}
	askGuest(t, ptm, stdout, "the guest after the dump", "echo VL-DUMP-$((40+2))X", regexp.MustCompile(`VL-DUMP-42X`))

	stopOnPTY(t, ptm, errOut, exited)
	checkNothingLeft(t, root)
}
