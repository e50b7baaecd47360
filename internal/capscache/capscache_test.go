package capscache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestCapsCacheTrusted: the shared QEMU capability cache is a fixed path
// root writes and every launcher trusts: a link there, or a directory of
// another user's above it, is refused before anything is read or written,
// even when what it leads to looks like a valid cache of root's.
func TestCapsCacheTrusted(t *testing.T) {
	testenv.Root(t, "the cache is root's; the directory above it another user's")
	top := t.TempDir()
	target := filepath.Join(top, "elsewhere")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"stamp": machineStamp(), "x86_64.xml": []byte("<qemuCaps></qemuCaps>\n")} {
		if err := os.WriteFile(filepath.Join(target, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(top, "other")
	if err := errors.Join(os.Mkdir(other, 0o755), os.Chown(other, 1879300010, 1879300010)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir, want string }{
		{"a link", filepath.Join(top, "caps-link"), "caps-link is a symbolic link"},
		{"below another user's directory", filepath.Join(other, "qemu-caps"), other + " is owned by uid 1879300010"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.Symlink(target, c.dir); err != nil {
				t.Fatal(err)
			}
			// No pool or work dir: a probe would fail on them, not on
			// the refusal looked for.
			dir, err := Ensure(context.Background(), Options{Dir: c.dir})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Ensure(%s) = %q, %v; want it refused: %s", c.dir, dir, err, c.want)
			}
		})
	}
	if ents, _ := os.ReadDir(target); len(ents) != 2 {
		t.Errorf("the link's target holds %d entries, want its 2", len(ents))
	}
}
