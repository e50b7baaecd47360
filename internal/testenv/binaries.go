package testenv

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/virtlauncher/virtlauncher/internal/repo"
)

// Binaries builds the command packages pkgs (paths from the repository's
// root, e.g. "./cmd/vlctl") into a fresh directory named after prefix,
// 0755 so that the launcher's unprivileged user reaches them, and returns
// it; the caller removes it. It is the one build step of every TestMain
// that runs the project's own binaries.
func Binaries(prefix string, pkgs ...string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := build(dir, pkgs); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

func build(dir string, pkgs []string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool(), append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %v: %v\n%s", pkgs, err, out)
	}
	return nil
}

// goTool is the go command running this test: go test puts its own
// GOROOT/bin first in PATH, so "go" is found there.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go" // exec reports it missing
}
