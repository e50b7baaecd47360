// Package images puts the e2e suite's images into the cluster's registry:
// images built here with internal/ociimage (the pod sandbox, KubeVirt's
// components, containerdisks) and the launcher image archive `make image`
// writes.
package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// Push builds spec's image and pushes it as ref (a plain-HTTP registry
// on loopback), with a deadline.
func Push(ctx context.Context, spec ociimage.Spec, ref string) error {
	work, err := os.MkdirTemp("", "vl-e2e-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := ociimage.Image(spec, work)
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return PushImage(ctx, img, ref)
}

// PushImage pushes img as ref.
func PushImage(ctx context.Context, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := remote.Write(r, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// PushArchive pushes the single image of an OCI image archive (an OCI
// layout in a tar, as deploy/mkimage writes) as ref.
func PushArchive(ctx context.Context, archive, ref string) error {
	work, err := os.MkdirTemp("", "vl-e2e-archive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := untar(archive, work); err != nil {
		return fmt.Errorf("unpack %s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(work)
	if err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("%s: %d images in it, want 1", archive, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return err
	}
	return PushImage(ctx, img, ref)
}

// untar unpacks an OCI layout archive: regular files and directories
// only, every name kept inside dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s: name outside the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: not a file or directory", h.Name)
		}
	}
}
