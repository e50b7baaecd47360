package ociimage

import (
	"archive/tar"
	"errors"
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

// Spec is what goes into an image: an optional base root filesystem,
// then one layer of files, and the image config.
type Spec struct {
	Rootfs string    // a root filesystem tarball (deploy/mkrootfs) for the first layer; "" for none
	Files  []File    // the next layer
	Epoch  time.Time // every timestamp
	Config Config
	// What the layers' history says made them.
	RootfsBy, FilesBy string
}

// File is one file of the files layer: Src's contents, or Data; or, with
// Dir, a directory of that mode (give it before anything in it); or, with
// Link, a symbolic link to Link.
type File struct {
	Dst, Src string
	Data     []byte
	Dir      bool
	Link     string
	Mode     int64    // 0 means 0755 (the files we add are programs); tar's mode bits (01777 for /tmp)
	UID, GID int      // owner, root by default
	Caps     []string // file capabilities, permitted and effective
}

// Config is the part of the OCI image config a Spec sets.
type Config struct {
	Entrypoint, Cmd []string
	User            string
	Env             []string
	WorkingDir      string
}

// DefaultEnv is the PATH every image gets unless its Config sets Env.
var DefaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// Image builds the image. Its layers are written into work, which must
// outlive every use of the image (writing or pushing it).
func Image(s Spec, work string) (v1.Image, error) {
	type layerSpec struct {
		file, createdBy string
		es              []entry
	}
	var layers []layerSpec
	if s.Rootfs != "" {
		f, err := os.Open(s.Rootfs)
		if err != nil {
			return nil, err
		}
		base, err := normalRootfs(f, s.Epoch)
		f.Close()
		if err != nil {
			return nil, err
		}
		layers = append(layers, layerSpec{"rootfs.tar", s.RootfsBy, base})
	}
	top, err := fileEntries(s.Files, s.Epoch)
	if err != nil {
		return nil, err
	}
	layers = append(layers, layerSpec{"files.tar", s.FilesBy, top})

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: s.Epoch}
	cf.Config.Entrypoint = s.Config.Entrypoint
	cf.Config.Cmd = s.Config.Cmd
	cf.Config.User = s.Config.User
	cf.Config.WorkingDir = s.Config.WorkingDir
	cf.Config.Env = s.Config.Env
	if cf.Config.Env == nil {
		cf.Config.Env = DefaultEnv
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	for _, l := range layers {
		if img, err = appendLayer(img, l.es, s.Epoch, l.createdBy, filepath.Join(work, l.file)); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// Append puts one more layer of files on base (an image read with
// ReadArchive, say), with base's config unchanged; the layer's tar is
// written into work, which must outlive every use of the image.
func Append(base v1.Image, files []File, epoch time.Time, createdBy, work string) (v1.Image, error) {
	es, err := fileEntries(files, epoch)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(work, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	f.Close()
	return appendLayer(base, es, epoch, createdBy, f.Name())
}

// appendLayer writes es as the tar p and appends it to img as a layer.
func appendLayer(img v1.Image, es []entry, epoch time.Time, createdBy, p string) (v1.Image, error) {
	if err := writeTar(p, es); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", filepath.Base(p), err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", filepath.Base(p), err)
	}
	return img, nil
}

// CheckName refuses an image reference without its registry: runtimes
// differ in how they fill in a missing registry or tag.
func CheckName(ref string) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	if reg, _, _ := strings.Cut(ref, "/"); r.Context().RegistryStr() != reg && !(reg == "docker.io" && r.Context().RegistryStr() == name.DefaultRegistry) {
		return fmt.Errorf("image name %q: give the registry (e.g. docker.io/%s)", ref, ref)
	}
	return nil
}

// WriteArchive writes img as an OCI image archive (an OCI image layout in
// a tar: `ctr images import`, `podman load`, `skopeo copy oci-archive:`)
// named ref, with fixed timestamps.
func WriteArchive(img v1.Image, ref string, epoch time.Time, out string) error {
	if err := CheckName(ref); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".ociarchive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// containerd names an imported image after io.containerd.image.name;
	// podman and skopeo after org.opencontainers.image.ref.name.
	err = lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
		"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
	}))
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarDir(dir, tmp, epoch); err != nil {
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

// ReadArchive reads the single image of an OCI image archive (as
// WriteArchive writes it), unpacking the layout into work, which must
// outlive every use of the image.
func ReadArchive(archive, work string) (v1.Image, error) {
	dir := filepath.Join(work, "layout")
	if err := untarLayout(archive, dir); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s: %d images in it, want 1", archive, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

// untarLayout unpacks an OCI layout archive: regular files and
// directories only (a layout has nothing else), every name kept inside dir.
func untarLayout(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
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
		if p == dir {
			continue
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
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
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
			return fmt.Errorf("%s: not a file or directory, not an OCI layout", h.Name)
		}
	}
}
