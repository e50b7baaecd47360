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

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sys/unix"
	k8sv1 "k8s.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
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
	d, err := c.open()
	if err != nil {
		return "", err
	}
	defer d.close()
	key := refKey(r.Name(), diskPath)
	if policy == k8sv1.PullNever || policy == k8sv1.PullIfNotPresent {
		if p, ok := d.cached(key); ok {
			return p, nil
		}
		if policy == k8sv1.PullNever {
			return "", fmt.Errorf("image %s is not in the cache %s and imagePullPolicy is Never", r.Name(), d.Path())
		}
	}
	img, digest, err := resolve(ctx, r)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", r.Name(), err)
	}
	file := digest.Hex + "-" + pathKey(diskPath) + ".img"
	if !d.exists(file) {
		if c.Status != nil {
			fmt.Fprintf(c.Status, "vlctl: pulling %s (%s)\n", r.Name(), digest)
		}
		if err := c.pull(ctx, d, img, diskPath, file); err != nil {
			return "", fmt.Errorf("image %s: %w", r.Name(), err)
		}
	}
	if err := d.writeAtomic(ctx, key+".ref", []byte(file)); err != nil {
		return "", fmt.Errorf("image cache %s: %w", d.Path(), err)
	}
	return d.Join(file), nil
}

func (c *Cache) maxSize() int64 {
	if c.MaxSize > 0 {
		return c.MaxSize
	}
	return DefaultMaxSize
}

// cacheDir is the cache directory as one Fetch uses it: opened once,
// and every name in it resolved against that descriptor, never by path.
type cacheDir struct {
	*safefs.Dir
	f *os.File // the same directory: its listing and renames in it
}

// open opens the cache directory, a fixed path root writes images to and
// hands to QEMU: with safefs.OpenTrusted, which makes it when missing and
// refuses one that is a link, one another user owns or can write, and one
// below a directory another user can change (the fix in its error). It is
// closed to other users (mode 0711, a cache an earlier version left
// readable included), and what pulls that were killed left is removed
// (tempfiles.go).
func (c *Cache) open() (*cacheDir, error) {
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("image cache %s: %w", c.Dir, err)
	}
	td, err := safefs.OpenTrusted(abs, 0o711)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	f, err := td.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		td.Close()
		return nil, fmt.Errorf("image cache: %w", err)
	}
	d := &cacheDir{Dir: td, f: f}
	if err := sweep(f); err != nil {
		d.close()
		return nil, fmt.Errorf("image cache %s: %w", abs, err)
	}
	return d, nil
}

func (d *cacheDir) close() {
	d.f.Close()
	d.Dir.Close()
}

// stat describes the entry name of the cache itself (a link is not
// followed).
func (d *cacheDir) stat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(d.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// exists says whether the cache has an entry name.
func (d *cacheDir) exists(name string) bool {
	_, err := d.stat(name)
	return err == nil
}

// cached is the disk the reference key last resolved to, if it is still
// there.
func (d *cacheDir) cached(key string) (string, bool) {
	b, err := d.ReadFile(key + ".ref")
	if err != nil {
		return "", false
	}
	name := strings.TrimSpace(string(b))
	if name != filepath.Base(name) || !strings.HasSuffix(name, ".img") {
		return "", false
	}
	if st, err := d.stat(name); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	return d.Join(name), true
}

// writeAtomic replaces the cache's file name with data (a temporary file,
// then rename).
func (d *cacheDir) writeAtomic(ctx context.Context, name string, data []byte) error {
	tmp, err := d.createTemp(ctx, refTempPrefix)
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	return d.commit(tmp, err, name, true)
}

// refKey names the reference (and the file chosen in it) in the cache.
func refKey(ref, diskPath string) string { return "ref-" + pathKey(ref+"\x00"+diskPath) }

// pathKey is a short hash of s, safe as a file name.
func pathKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}
