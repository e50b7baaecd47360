package standalone

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Where the run's things are in its work directory, and the path the
// launcher sees that directory at.

// rel is p relative to the work dir, for the safefs calls on r.dir.
func (r *runner) rel(p string) (string, error) {
	rel, err := filepath.Rel(r.workDir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is not below the work dir %s", p, r.workDir)
	}
	return rel, nil
}

// consoleSocket is where vlctl run shares the guest's serial console
// (consolehub): in the work dir, which stays root's.
func (r *runner) consoleSocket() string { return filepath.Join(r.workDir, "console.sock") }

// controlSocket is where the run listens: its work dir, which only root can
// write.
func (r *runner) controlSocket() string { return filepath.Join(r.workDir, "control.sock") }

// launcherRoot is the path this run's launcher sees its work dir at.
func (r *runner) launcherRoot() string { return r.cfg.guest.launcherRoot(r.workDir) }
