package cmdserver_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

// FuzzVMIRequest feeds arbitrary bytes, as a VMIRequest protobuf and as the
// VMI JSON inside one, through the handlers' decode path: protobuf
// decoding, VMI JSON decoding, the Sync options and the Sync validation.
// Beyond "never panics": a failure always carries a message, and a Sync
// the server lets through is a VMI that validates. Seeds live in
// testdata/fuzz/FuzzVMIRequest; a long run is
// `go test -run='^$' -fuzz=FuzzVMIRequest -fuzztime=10m ./internal/cmdserver`.
func FuzzVMIRequest(f *testing.F) {
	fake := &cmdservertest.Fake{}
	c := cmdserver.Handlers(cmdserver.New(fake, slog.New(slog.NewTextHandler(io.Discard, nil))))
	f.Fuzz(func(t *testing.T, reqBytes, vmiJSON []byte) {
		// The fake records every call: each input starts with none, so
		// that a long run does not grow it.
		fake.Ops = nil
		tm := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("input took over 10s: %q %q", reqBytes, vmiJSON)) })
		defer tm.Stop()
		var reqs []*cmdv1.VMIRequest
		req := &cmdv1.VMIRequest{}
		if err := proto.Unmarshal(reqBytes, req); err == nil {
			reqs = append(reqs, req)
		}
		reqs = append(reqs, &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}})
		if len(reqs) == 2 {
			withJSON := proto.Clone(reqs[0]).(*cmdv1.VMIRequest)
			withJSON.Vmi = &cmdv1.VMI{VmiJson: vmiJSON}
			reqs = append(reqs, withJSON)
		}
		ctx := context.Background()
		for _, r := range reqs {
			// The handlers consume the request's VMI JSON: each gets a copy.
			resp, err := c.SyncVirtualMachine(ctx, proto.Clone(r).(*cmdv1.VMIRequest))
			if err != nil {
				t.Fatalf("Sync returned a gRPC error: %v", err)
			}
			if !resp.Success && resp.Message == "" {
				t.Fatalf("Sync failed with an empty message")
			}
			if resp.Success {
				v, _, err := cmdserver.DecodeVMI(r.GetVmi())
				if err != nil {
					t.Fatalf("Sync succeeded on a VMI that does not decode: %v", err)
				}
				if err := cmdserver.ValidateSyncVMI(v); err != nil {
					t.Fatalf("Sync succeeded on an invalid VMI: %v", err)
				}
			}
			resp, err = c.PauseVirtualMachine(ctx, proto.Clone(r).(*cmdv1.VMIRequest))
			if err != nil || (!resp.Success && resp.Message == "") {
				t.Fatalf("Pause: %v %+v", err, resp)
			}
		}
	})
}

// TestFuzzSeedsPresent: the committed corpus exists and holds a request
// that the server accepts, so the seeds reach past the decoding.
func TestFuzzSeedsPresent(t *testing.T) {
	files, _ := filepath.Glob("testdata/fuzz/FuzzVMIRequest/*")
	if len(files) < 5 {
		t.Fatalf("%d seeds in testdata/fuzz/FuzzVMIRequest, want at least 5", len(files))
	}
	b, err := os.ReadFile("testdata/fuzz/FuzzVMIRequest/valid-vmi")
	if err != nil || !strings.HasPrefix(string(b), "go test fuzz v1\n") {
		t.Fatalf("seed valid-vmi: %v", err)
	}
}
