package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what goes into the image.
type Spec struct {
	Rootfs string    // deploy/mkrootfs's tarball: the first layer
	Files  []File    // the second layer
	Name   string    // the reference recorded in the archive
	Epoch  time.Time // every timestamp
}

// File is one file of the second layer.
type File struct {
	Dst, Src string
	Caps     []string // file capabilities, permitted and effective
}

// The image config as KubeVirt's launcher image has it
// (cmd/virt-launcher/BUILD.bazel: entrypoint /usr/bin/virt-launcher, user
// 107). The pod template sets the command (/usr/bin/virt-launcher-monitor)
// and the user (0 or 107) itself, so these only matter outside KubeVirt.
var (
	entrypoint = []string{"/usr/bin/virt-launcher"}
	imageUser  = "107"
	imageEnv   = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
)

// Build writes the OCI image archive out.
func Build(s Spec, out string) error {
	// The name is recorded as given, so it must be complete: runtimes
	// differ in how they fill in a missing registry or tag.
	ref, err := name.ParseReference(s.Name, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-name %q: %w", s.Name, err)
	}
	if reg, _, _ := strings.Cut(s.Name, "/"); ref.Context().RegistryStr() != reg && !(reg == "docker.io" && ref.Context().RegistryStr() == name.DefaultRegistry) {
		return fmt.Errorf("-name %q: give the registry (e.g. docker.io/%s)", s.Name, s.Name)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	f, err := os.Open(s.Rootfs)
	if err != nil {
		return err
	}
	base, err := normalRootfs(f, s.Epoch)
	f.Close()
	if err != nil {
		return err
	}
	top, err := fileEntries(s.Files, s.Epoch)
	if err != nil {
		return err
	}
	layers := []struct {
		file, createdBy string
		es              []entry
	}{
		{"rootfs.tar", "deploy/mkrootfs: Debian 12 (mmdebstrap)", base},
		{"files.tar", "deploy/mkimage: the virtlauncher binaries", top},
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: s.Epoch}
	cf.Config.Entrypoint = entrypoint
	cf.Config.User = imageUser
	cf.Config.Env = imageEnv
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	for _, l := range layers {
		p := filepath.Join(work, l.file)
		if err := writeTar(p, l.es); err != nil {
			return err
		}
		layer, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.file, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: s.Epoch}, CreatedBy: l.createdBy},
		})
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.file, err)
		}
	}

	dir := filepath.Join(work, "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// containerd names an imported image after io.containerd.image.name;
	// podman and skopeo after org.opencontainers.image.ref.name.
	err = lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          s.Name,
		"org.opencontainers.image.ref.name": s.Name,
		"org.opencontainers.image.created":  s.Epoch.Format(time.RFC3339),
	}))
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp, s.Epoch); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// tarDir packs the OCI layout directory as a tar with sorted names, fixed
// mtimes and root ownership.
func tarDir(dir, out string, epoch time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range names {
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch}
		switch {
		case st.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case st.Mode().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
		default:
			return fmt.Errorf("OCI layout: %s is not a file or directory", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return fmt.Errorf("pack %s: %w", rel, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}
