// Package images puts the e2e suite's images into the cluster's registry:
// images built here with internal/ociimage (the pod sandbox, KubeVirt's
// components, containerdisks) and the launcher image archive `make image`
// writes.
package images

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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

// PushArchive pushes the single image of an OCI image archive (as
// deploy/mkimage writes) as ref.
func PushArchive(ctx context.Context, archive, ref string) error {
	work, err := os.MkdirTemp("", "vl-e2e-archive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := ociimage.ReadArchive(archive, work)
	if err != nil {
		return err
	}
	return PushImage(ctx, img, ref)
}
