// Package registrydisk fetches KubeVirt containerDisk images (and the
// kernel and initrd of kernelBoot container images) from OCI registries
// for standalone runs, where no kubelet pulls them: a containerDisk image
// holds one disk file (qcow2 or raw) under /disk/, a kernelBoot image the
// files its kernelPath and initrdPath name; each file is extracted once
// into a root-owned cache and used from there, read-only, as a cluster
// would use the container's file.
package registrydisk

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	k8sv1 "k8s.io/api/core/v1"
)

// DefaultDir is the cache of standalone runs.
const DefaultDir = "/var/cache/virtlauncher/containerdisks"

// Cache is a directory of extracted disks, named by the digest of the
// image they came from, and of the references last resolved to them.
type Cache struct {
	Dir string
	// Status gets a line for each pull ("pulling ...").
	Status io.Writer
}

// Fetch returns the path of the disk of the image ref (an image reference
// such as quay.io/containerdisks/fedora:latest), honouring policy as the
// kubelet does: Never uses only what the cache holds, IfNotPresent pulls
// only what it lacks, Always (and "") asks the registry which image the
// reference names now and pulls that one if it is not cached. diskPath is
// the file in the image: a containerDisk's path field ("" for the only
// file under /disk/), a kernelBoot image's kernelPath or initrdPath. Registries on loopback and private addresses are
// spoken to over plain HTTP (go-containerregistry's rule); credentials
// come from root's Docker config, as `docker pull` would use them.
func (c *Cache) Fetch(ctx context.Context, ref, diskPath string, policy k8sv1.PullPolicy) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	if err := c.ensureDir(); err != nil {
		return "", err
	}
	key := refKey(r.Name(), diskPath)
	if policy == k8sv1.PullNever || policy == k8sv1.PullIfNotPresent {
		if p, ok := c.cached(key); ok {
			return p, nil
		}
		if policy == k8sv1.PullNever {
			return "", fmt.Errorf("image %s is not in the cache %s and imagePullPolicy is Never", r.Name(), c.Dir)
		}
	}
	img, err := remote.Image(r,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(ggcr.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return "", fmt.Errorf("image %s: %w", r.Name(), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("image %s: %w", r.Name(), err)
	}
	disk := filepath.Join(c.Dir, digest.Hex+"-"+pathKey(diskPath)+".img")
	if _, err := os.Lstat(disk); err != nil {
		if c.Status != nil {
			fmt.Fprintf(c.Status, "vlctl: pulling %s (%s)\n", r.Name(), digest)
		}
		if err := extract(img, diskPath, disk); err != nil {
			return "", fmt.Errorf("image %s: %w", r.Name(), err)
		}
	}
	if err := writeAtomic(filepath.Join(c.Dir, key+".ref"), []byte(filepath.Base(disk))); err != nil {
		return "", err
	}
	return disk, nil
}

// ensureDir makes the cache directory, which must be root's and writable
// by root alone: what is in it is handed to QEMU.
func (c *Cache) ensureDir() error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	fi, err := os.Lstat(c.Dir)
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("image cache %s: must be a directory owned by root and writable by root alone", c.Dir)
	}
	return nil
}

// cached is the disk the reference key last resolved to, if it is still
// there.
func (c *Cache) cached(key string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(c.Dir, key+".ref"))
	if err != nil {
		return "", false
	}
	name := strings.TrimSpace(string(b))
	if name != filepath.Base(name) || !strings.HasSuffix(name, ".img") {
		return "", false
	}
	p := filepath.Join(c.Dir, name)
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return p, true
}

// extract copies the disk file of img to dst (through a temporary file in
// the same directory, renamed when complete).
func extract(img ggcr.Image, diskPath, dst string) error {
	want := ""
	if diskPath != "" {
		want = strings.TrimPrefix(path.Clean("/"+diskPath), "/")
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".pull-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var found []string
	links := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read layers: %w", err)
		}
		n := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			links[n] = h.Linkname
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if want != "" && n != want || want == "" && path.Dir(n) != "disk" {
			continue
		}
		found = append(found, "/"+n)
		if len(found) > 1 {
			continue // refused below
		}
		if _, err := io.Copy(tmp, tr); err != nil {
			return fmt.Errorf("extract /%s: %w", n, err)
		}
	}
	switch {
	case len(found) == 0 && links[want] != "":
		return fmt.Errorf("/%s is a link in the image (to %s): name the file itself", want, links[want])
	case len(found) == 0 && want != "":
		return fmt.Errorf("no file /%s in the image", want)
	case len(found) == 0:
		return errors.New("no disk under /disk/ in the image: not a KubeVirt containerDisk")
	case len(found) > 1:
		return fmt.Errorf("several files under /disk/ (%s): name one with containerDisk.path", strings.Join(found, ", "))
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// writeAtomic replaces path with data (temporary file, then rename).
func writeAtomic(p string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".ref-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// refKey names the reference (and the file chosen in it) in the cache.
func refKey(ref, diskPath string) string { return "ref-" + pathKey(ref+"\x00"+diskPath) }

// pathKey is a short hash of s, safe as a file name.
func pathKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
