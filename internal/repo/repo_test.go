package repo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoot: the module root holds this module's go.mod, and is found from
// a directory below it too.
func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.Contains(string(mod), "module github.com/virtlauncher/virtlauncher\n") {
		t.Fatalf("go.mod at %s: %v", root, err)
	}
	if got, err := rootAbove(filepath.Join(root, "internal", "repo")); err != nil || got != root {
		t.Errorf("rootAbove(internal/repo) = %s, %v; want %s", got, err, root)
	}
	if _, err := rootAbove(t.TempDir()); err == nil {
		t.Errorf("rootAbove found a go.mod above a fresh temp dir")
	}
}

// TestCorpus: VL_CORPUS wins when it names a directory and is an error
// when it does not; without it the corpus beside the checkout is found and
// holds the examples the tests use.
func TestCorpus(t *testing.T) {
	d := t.TempDir()
	t.Setenv(CorpusEnv, d)
	if got, err := Corpus(); err != nil || got != d {
		t.Errorf("Corpus with %s=%s: %s, %v", CorpusEnv, d, got, err)
	}
	t.Setenv(CorpusEnv, filepath.Join(d, "missing"))
	if _, err := Corpus(); err == nil || !strings.Contains(err.Error(), CorpusEnv) {
		t.Errorf("Corpus with a missing %s: %v", CorpusEnv, err)
	}
	t.Setenv(CorpusEnv, "")
	c, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c, "vmi-fedora.yaml")); err != nil {
		t.Errorf("corpus %s: %v", c, err)
	}
}
