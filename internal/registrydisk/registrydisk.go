// Package registrydisk fetches KubeVirt containerDisk images (and the
// kernel and initrd of kernelBoot container images) from OCI registries
// for standalone runs, where no kubelet pulls them: a containerDisk image
// holds one disk file (qcow2 or raw) under /disk/, a kernelBoot image the
// files its kernelPath and initrdPath name; each file is extracted once
// into a root-owned cache and used from there, read-only, as a cluster
// would use the container's file.
package registrydisk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	k8sv1 "k8s.io/api/core/v1"
)

// DefaultDir is the cache of standalone runs.
const DefaultDir = "/var/cache/virtlauncher/containerdisks"

// DefaultMaxSize bounds what an image's layers may expand to, and so the
// file extracted from it, when Cache.MaxSize is 0: room for a large raw
// disk, but not for a small gzip stream that expands without end.
const DefaultMaxSize = 64 << 30

// Cache is a directory of extracted disks, named by the digest of the
// image they came from, and of the references last resolved to them. It is
// root's alone (0711: the path can be passed through, the names not
// listed; files 0600): its images may have been pulled with root's
// registry credentials. A run gets read access to the files it uses by an
// ACL entry of its own (internal/standalone).
type Cache struct {
	Dir string
	// Status gets a line for each pull ("pulling ...").
	Status io.Writer
	// MaxSize is the most bytes an image's layers may expand to, all
	// together (0: DefaultMaxSize).
	MaxSize int64
}

// Fetch returns the path of the disk of the image ref (an image reference
// such as quay.io/containerdisks/fedora:latest), honouring policy as the
// kubelet does: Never uses only what the cache holds, IfNotPresent pulls
// only what it lacks, Always (and "") asks the registry which image the
// reference names now and pulls that one if it is not cached. diskPath is
// the file in the image: a containerDisk's path field ("" for the only
// file under /disk/), a kernelBoot image's kernelPath or initrdPath.
// Registries on loopback and private addresses are spoken to over plain
// HTTP (go-containerregistry's rule); credentials come from root's Docker
// config, as `docker pull` would use them. Everything pulled is checked
// against its digest before it is used (pull.go); a pull that fails
// leaves nothing in the cache.
func (c *Cache) Fetch(ctx context.Context, ref, diskPath string, policy k8sv1.PullPolicy) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	if err := c.open(); err != nil {
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
	img, digest, err := resolve(ctx, r)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", r.Name(), err)
	}
	file := digest.Hex + "-" + pathKey(diskPath) + ".img"
	disk := filepath.Join(c.Dir, file)
	if _, err := os.Lstat(disk); err != nil {
		if c.Status != nil {
			fmt.Fprintf(c.Status, "vlctl: pulling %s (%s)\n", r.Name(), digest)
		}
		if err := c.pull(ctx, img, diskPath, file); err != nil {
			return "", fmt.Errorf("image %s: %w", r.Name(), err)
		}
	}
	if err := c.writeAtomic(ctx, key+".ref", []byte(file)); err != nil {
		return "", fmt.Errorf("image cache %s: %w", c.Dir, err)
	}
	return disk, nil
}

func (c *Cache) maxSize() int64 {
	if c.MaxSize > 0 {
		return c.MaxSize
	}
	return DefaultMaxSize
}

// open makes the cache directory, which must be root's and writable by
// root alone (what is in it is handed to QEMU), closes it to other users
// (a cache an earlier version left readable included), and removes what
// pulls that were killed left (tempfiles.go).
func (c *Cache) open() error {
	if err := os.MkdirAll(c.Dir, 0o711); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	d, err := os.OpenFile(c.Dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("image cache %s: %w", c.Dir, err)
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("image cache %s: must be a directory owned by root and writable by root alone", c.Dir)
	}
	if fi.Mode().Perm() != 0o711 {
		if err := d.Chmod(0o711); err != nil {
			return fmt.Errorf("image cache %s: %w", c.Dir, err)
		}
	}
	if err := sweep(d); err != nil {
		return fmt.Errorf("image cache %s: %w", c.Dir, err)
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

// writeAtomic replaces the cache's file name with data (a temporary file,
// then rename).
func (c *Cache) writeAtomic(ctx context.Context, name string, data []byte) error {
	tmp, err := c.createTemp(ctx, refTempPrefix)
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	return c.commit(tmp, err, name, true)
}

// refKey names the reference (and the file chosen in it) in the cache.
func refKey(ref, diskPath string) string { return "ref-" + pathKey(ref+"\x00"+diskPath) }

// pathKey is a short hash of s, safe as a file name.
func pathKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
