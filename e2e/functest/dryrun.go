package functest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DryRun lists the full texts of the specs sel selects, in ginkgo's order,
// from a dry run of the suite's test binary suiteBin (no cluster needed:
// ginkgo walks the spec tree and runs no node). dir takes its JSON report
// and artifacts.
func DryRun(ctx context.Context, suiteBin, dir string, sel Selection) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "dry-run.json")
	os.Remove(out)
	args := append([]string{"--ginkgo.dry-run", "--ginkgo.json-report=" + out, "-config=/dev/null", "-artifacts=" + dir}, sel.FilterArgs()...)
	cmd := exec.CommandContext(ctx, suiteBin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		if _, serr := os.Stat(out); serr != nil {
			return nil, fmt.Errorf("dry run of the suite: %w: %s", err, lastLines(b, 20))
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("dry run of the suite: %w", err)
	}
	return DryRunSpecs(b)
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DryRunSpecs returns the full texts (container texts and the leaf's,
// space-joined: what ginkgo's --focus matches) of the specs a ginkgo
// dry run (--ginkgo.dry-run --ginkgo.json-report) selected, in its order.
func DryRunSpecs(report []byte) ([]string, error) {
	var suites []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
		}
	}
	if err := json.Unmarshal(report, &suites); err != nil {
		return nil, fmt.Errorf("ginkgo JSON report: %w", err)
	}
	var texts []string
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != "It" || sp.State != "passed" {
				continue
			}
			texts = append(texts, strings.Join(append(append([]string{}, sp.ContainerHierarchyTexts...), sp.LeafNodeText), " "))
		}
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("ginkgo JSON report: the dry run selected no spec")
	}
	return texts, nil
}
