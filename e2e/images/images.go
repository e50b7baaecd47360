// Package images is the e2e cluster's image registry and puts the suite's
// images into it: images built here with internal/ociimage (the pod
// sandbox, KubeVirt's components, containerdisks) and the launcher image
// archive `make image` writes.
package images

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// Registry is the cluster's image registry: go-containerregistry's, its
// images in memory, served by the test process for the cluster's
// containerds to pull from. It listens on the machine's loopback, where
// every local user reaches it, so over the network it only serves pulls;
// the suite's pushes go to it inside the test process (inProcess), and no
// one else can put an image there (KubeVirt pulls its images IfNotPresent:
// a replaced virt-handler image would run as root on the node).
type Registry struct {
	host    string // as image references name it: localhost:PORT
	handler http.Handler
	srv     *http.Server
}

// NewRegistry is an empty registry that image references name as host.
func NewRegistry(host string) *Registry {
	return &Registry{host: host, handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
}

// Serve serves the registry's images on l, read-only, until Close.
func (r *Registry) Serve(l net.Listener) {
	r.srv = &http.Server{Handler: readOnly(r.handler), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
}

// Close stops serving.
func (r *Registry) Close(ctx context.Context) error {
	if r.srv == nil {
		return nil
	}
	return r.srv.Shutdown(ctx)
}

// Push builds spec's image and pushes it as ref, with a deadline.
func (r *Registry) Push(ctx context.Context, spec ociimage.Spec, ref string) error {
	work, err := os.MkdirTemp("", "vl-e2e-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := ociimage.Image(spec, work)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return r.PushImage(ctx, img, ref)
}

// PushImage pushes img as ref, which names this registry.
func (r *Registry) PushImage(ctx context.Context, img v1.Image, ref string) error {
	ir, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	if got := ir.Context().RegistryStr(); got != r.host {
		return fmt.Errorf("image %s: its registry is %s, not the cluster's %s", ref, got, r.host)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := remote.Write(ir, img, remote.WithContext(ctx), remote.WithTransport(inProcess{r.handler})); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// PushArchive pushes the single image of an OCI image archive (as
// deploy/mkimage writes) as ref.
func (r *Registry) PushArchive(ctx context.Context, archive, ref string) error {
	work, err := os.MkdirTemp("", "vl-e2e-archive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := ociimage.ReadArchive(archive, work)
	if err != nil {
		return err
	}
	return r.PushImage(ctx, img, ref)
}

// readOnly lets through only what a pull asks (GET, HEAD); anything else
// gets the distribution spec's DENIED.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			h.ServeHTTP(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"errors":[{"code":"DENIED","message":"this registry is read-only over the network: the e2e suite fills it from its own process"}]}`+"\n")
	})
}

// inProcess hands the suite's push requests to the registry's handler in
// this process: no socket, so nothing but the test process writes images.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	// The request as a server would see it: a body always, and a client's
	// length 0 with a body is "unknown" (-1 to a handler).
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	switch {
	case in.Body == nil || in.Body == http.NoBody:
		in.Body, in.ContentLength = http.NoBody, 0
	case in.ContentLength == 0:
		in.ContentLength = -1
	}
	in.Body = ctxBody{ctx: req.Context(), ReadCloser: in.Body}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// ctxBody ends a push's upload when its context does: the handler copies
// the body with no deadline of its own.
type ctxBody struct {
	ctx context.Context
	io.ReadCloser
}

func (b ctxBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}
