// Package repo finds the repository's own files and the test data that
// lives beside it, from the module root, so that nothing in the tree names
// a path of one particular machine.
package repo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// CorpusEnv overrides where the example corpus is.
const CorpusEnv = "VL_CORPUS"

// corpusRel is where KubeVirt's example manifests sit relative to a
// directory above the module root: the project's shared/ folder is a
// sibling of the checkout (../shared/corpus/kubevirt-examples).
var corpusRel = filepath.Join("shared", "corpus", "kubevirt-examples")

// Root is the module root: the first directory at or above the working
// directory that holds go.mod (tests run in their package's directory,
// `go run ./bench` in the root).
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	return rootAbove(wd)
}

func rootAbove(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("module root: no go.mod at or above %s", dir)
		}
	}
}

// Corpus is the directory of KubeVirt's example manifests: $VL_CORPUS when
// set, else shared/corpus/kubevirt-examples in the nearest directory above
// the module root that has one. A clone made elsewhere (git clone of the
// checkout into a temporary directory) finds it above the checkout it was
// cloned from, its origin, when that is a local directory.
func Corpus() (string, error) {
	if d := os.Getenv(CorpusEnv); d != "" {
		if err := isDir(d); err != nil {
			return "", fmt.Errorf("%s=%s: %w", CorpusEnv, d, err)
		}
		return d, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	starts := []string{root}
	if o := localOrigin(root); o != "" {
		starts = append(starts, o)
	}
	var tried []string
	for _, s := range starts {
		for d := filepath.Dir(s); ; d = filepath.Dir(d) {
			c := filepath.Join(d, corpusRel)
			if isDir(c) == nil {
				return c, nil
			}
			tried = append(tried, c)
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return "", fmt.Errorf("example corpus not found (looked for %s above %s; set %s): tried %s",
		corpusRel, strings.Join(starts, " and "), CorpusEnv, strings.Join(tried, ", "))
}

func isDir(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

// localOrigin is the checkout's origin when it is a directory on this
// machine ("" otherwise).
func localOrigin(root string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "-C", root, "config", "--get", "remote.origin.url")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	u := strings.TrimPrefix(strings.TrimSpace(string(out)), "file://")
	if !filepath.IsAbs(u) || isDir(u) != nil {
		return ""
	}
	return filepath.Clean(u)
}
