// Package kubevirttool runs KubeVirt's own code for tests that compare our
// results with it: the small programs of the e2e/build/kubevirt module
// (pinned to the e2e cluster's KubeVirt version) read a JSON list of cases
// on standard input and write one JSON result per case.
package kubevirttool

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/repo"
)

// Tool names one program of the e2e/build/kubevirt module.
type Tool struct {
	// Dir is its directory in the module (instancetypeapply, hostdevconvert).
	Dir string
	// Cgo: it links libvirt's C library, as KubeVirt's launcher does.
	Cgo bool
	// Timeout bounds its build and its run together.
	Timeout time.Duration
}

// nosumdb are KubeVirt's dependencies the checksum database lacks; the
// module's go.sum pins them (the Makefile builds it the same way).
const nosumdb = "kubevirt.io/virt-template*,github.com/rhobs/operator-observability-toolkit"

// Run builds the tool, gives it cases and decodes its output, one result a case,
// failing t on any error and when the number of
// results is not the number of cases.
func Run[C, R any](t testing.TB, tool Tool, cases []C) []R {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(tool.Dir))
	ctx, cancel := context.WithTimeout(context.Background(), tool.Timeout)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+tool.Dir)
	build.Dir = filepath.Join(root, "e2e", "build", "kubevirt")
	cgo := "CGO_ENABLED=0"
	if tool.Cgo {
		cgo = "CGO_ENABLED=1"
	}
	build.Env = append(os.Environ(), "GONOSUMDB="+nosumdb, cgo, "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build KubeVirt's %s: %v\n%s", tool.Dir, err, out)
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, bin)
	run.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", tool.Dir, err, stderr.String())
	}
	var res []R
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s's output: %v", tool.Dir, err)
	}
	if len(res) != len(cases) {
		t.Fatalf("%s: %d results for %d cases", tool.Dir, len(res), len(cases))
	}
	return res
}
