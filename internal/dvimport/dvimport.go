// Package dvimport fills a new local volume from a DataVolume's source, as
// CDI's importer fills a PVC in a cluster: an image downloaded over HTTP(S)
// (raw or qcow2, either of them gzip- or xz-compressed), a containerDisk
// image from a registry, another local volume (a clone), or nothing (blank).
// The volume is always a raw image, as CDI writes one, grown to the size
// the DataVolume requests; an image larger than the request is refused, as
// CDI refuses it.
//
// A volume appears complete or not at all: it is written to a temporary
// file in its own directory and renamed to its name once everything passed,
// and a failure removes the temporary file. Downloads go to a root-only
// cache, resume an interrupted transfer with an HTTP Range request, and are
// kept by URL with the validators the server gave (ETag, Last-Modified), so
// a second volume from the same URL is made from the cache after a
// conditional request answered 304 Not Modified.
package dvimport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtlauncher/virtlauncher/internal/disks"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// DefaultCacheDir is where downloaded images are kept (root's, 0700).
const DefaultCacheDir = "/var/cache/virtlauncher/imports"

// Kinds of source this package imports.
const (
	KindBlank    = "blank"
	KindHTTP     = "http"
	KindRegistry = "registry"
	KindPVC      = "pvc"
)

// Kind names what src imports, or says why it cannot be imported here,
// naming field (the source's place in the manifest). A nil source is
// blank, as CDI has it.
func Kind(src *cdiv1.DataVolumeSource, field string) (string, error) {
	if src == nil {
		return KindBlank, nil
	}
	switch {
	case src.Blank != nil:
		return KindBlank, nil
	case src.HTTP != nil:
		return KindHTTP, checkHTTP(src.HTTP, field+".http")
	case src.Registry != nil:
		_, err := registryRef(src.Registry, field+".registry")
		return KindRegistry, err
	case src.PVC != nil:
		if src.PVC.Name == "" {
			return KindPVC, fmt.Errorf("%s.pvc.name: empty", field)
		}
		return KindPVC, nil
	}
	refused := []struct {
		name string
		set  bool
	}{{"s3", src.S3 != nil}, {"gcs", src.GCS != nil}, {"upload", src.Upload != nil},
		{"imageio", src.Imageio != nil}, {"vddk", src.VDDK != nil}, {"snapshot", src.Snapshot != nil}}
	for _, r := range refused {
		if r.set {
			return "", fmt.Errorf("%s.%s: vlctl does not import this source (it imports http, registry, pvc and blank)", field, r.name)
		}
	}
	return "", fmt.Errorf("%s: names no source", field)
}

// checkHTTP refuses what an HTTP source asks that has no meaning here: the
// Secrets and ConfigMaps of a cluster.
func checkHTTP(h *cdiv1.DataVolumeSourceHTTP, field string) error {
	u := h.URL
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("%s.url %q: want an http:// or https:// URL", field, u)
	}
	if _, err := http.NewRequest(http.MethodGet, u, nil); err != nil {
		return fmt.Errorf("%s.url: %w", field, err)
	}
	switch {
	case h.SecretRef != "":
		return fmt.Errorf("%s.secretRef %q: vlctl has no Secrets to read credentials from; put them in the URL's user:password part, or download the image yourself and give it with --volume", field, h.SecretRef)
	case h.CertConfigMap != "":
		return fmt.Errorf("%s.certConfigMap %q: vlctl has no ConfigMaps; it trusts the host's certificate authorities (add the CA to the host's store)", field, h.CertConfigMap)
	case len(h.SecretExtraHeaders) > 0:
		return fmt.Errorf("%s.secretExtraHeaders: vlctl has no Secrets to read headers from; give them in extraHeaders", field)
	}
	for i, hd := range h.ExtraHeaders {
		if _, _, err := parseHeader(hd); err != nil {
			return fmt.Errorf("%s.extraHeaders[%d]: %w", field, i, err)
		}
	}
	return nil
}

// parseHeader splits "Name: value".
func parseHeader(h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
		return "", "", fmt.Errorf("%q: want \"Name: value\"", h)
	}
	return name, strings.TrimSpace(value), nil
}

// registryRef is the image reference a registry source names.
func registryRef(r *cdiv1.DataVolumeSourceRegistry, field string) (string, error) {
	switch {
	case r.ImageStream != nil:
		return "", fmt.Errorf("%s.imageStream: OpenShift image streams do not exist here; give url: docker://IMAGE", field)
	case r.SecretRef != nil && *r.SecretRef != "":
		return "", fmt.Errorf("%s.secretRef %q: vlctl has no Secrets; it uses root's registry credentials (docker login)", field, *r.SecretRef)
	case r.CertConfigMap != nil && *r.CertConfigMap != "":
		return "", fmt.Errorf("%s.certConfigMap %q: vlctl has no ConfigMaps; it trusts the host's certificate authorities", field, *r.CertConfigMap)
	case r.URL == nil || *r.URL == "":
		return "", fmt.Errorf("%s.url: missing", field)
	}
	ref, ok := strings.CutPrefix(*r.URL, cdiv1.RegistrySchemeDocker+"://")
	if !ok {
		return "", fmt.Errorf("%s.url %q: want docker://IMAGE (vlctl pulls from registries only; oci-archive is not read)", field, *r.URL)
	}
	return ref, nil
}

// Request is one volume to fill.
type Request struct {
	// DataVolume is the DataVolume's name and Field its source's place in
	// the manifest, for messages.
	DataVolume, Field string
	Source            *cdiv1.DataVolumeSource
	// ContentType is the DataVolume's; only "kubevirt" (a disk image, the
	// default) is imported.
	ContentType cdiv1.DataVolumeContentType
	// Size is the storage the DataVolume requests (bytes), 0 when it
	// names none: the volume is then the image's size.
	Size int64
	// Dir and Name are where the volume goes: a new file Name in Dir,
	// which must not exist yet.
	Dir  *safefs.Dir
	Name string
	// CloneFrom is, for a pvc source, the path of the volume to copy; the
	// caller found it, in a directory only root can change.
	CloneFrom string
}

// Importer fills volumes.
type Importer struct {
	// CacheDir keeps downloads (DefaultCacheDir when empty).
	CacheDir string
	// Images pulls registry sources.
	Images *registrydisk.Cache
	// Status gets progress and what was done; Terminal makes the progress
	// one line rewritten in place.
	Status   io.Writer
	Terminal bool
	// Client makes the HTTP requests (a client with connect, TLS and
	// response-header deadlines when nil).
	Client *http.Client
	// Attempts bounds the requests of one download, resumptions included
	// (default 6); Stall is how long a transfer may go without a byte
	// before it is cut and resumed (default 60 s).
	Attempts int
	Stall    time.Duration
	// QemuImg is the qemu-img binary ("qemu-img" from PATH when empty).
	QemuImg string
}

// Import fills req's volume. Every error names the DataVolume and, for a
// download or pull, where from; nothing is left at req.Name then.
func (im *Importer) Import(ctx context.Context, req Request) error {
	kind, err := Kind(req.Source, req.Field)
	if err != nil {
		return fmt.Errorf("DataVolume %s: %w", req.DataVolume, err)
	}
	if req.ContentType != "" && req.ContentType != cdiv1.DataVolumeKubeVirt {
		return fmt.Errorf("DataVolume %s: spec.contentType %q: vlctl imports disk images only (kubevirt)", req.DataVolume, req.ContentType)
	}
	var from, src string
	switch kind {
	case KindBlank:
		if req.Size <= 0 {
			return fmt.Errorf("DataVolume %s: a blank volume needs a storage request", req.DataVolume)
		}
		return im.write(ctx, req, "", "", 0, req.Size)
	case KindHTTP:
		from = shownURL(req.Source.HTTP.URL)
		var done func()
		src, done, err = im.download(ctx, req)
		if done != nil {
			defer done()
		}
	case KindRegistry:
		from, _ = registryRef(req.Source.Registry, req.Field)
		if im.Images == nil {
			err = errors.New("no image cache to pull into")
		} else {
			src, err = im.Images.Fetch(ctx, from, "", "")
		}
	case KindPVC:
		from = req.Source.PVC.Namespace + "/" + req.Source.PVC.Name
		src = req.CloneFrom
		if src == "" {
			err = errors.New("no local volume of that name to clone")
		}
	}
	if err == nil {
		err = im.fill(ctx, req, src)
	}
	if err != nil {
		return fmt.Errorf("DataVolume %s: import from %s: %w", req.DataVolume, from, err)
	}
	im.say("vlctl: DataVolume %s: imported %s into %s\n", req.DataVolume, from, req.Dir.Join(req.Name))
	return nil
}

// fill checks the image src and writes it to the volume.
func (im *Importer) fill(ctx context.Context, req Request, src string) error {
	p := &disks.Preparer{QemuImg: im.QemuImg}
	format, virtual, err := p.ImageInfo(ctx, src)
	if err != nil {
		return err
	}
	size := virtual
	if req.Size > 0 {
		if virtual > req.Size {
			return fmt.Errorf("the image's virtual size, %d bytes, is more than the %d bytes the DataVolume requests (CDI refuses it too): request more storage", virtual, req.Size)
		}
		size = req.Size
	}
	return im.write(ctx, req, src, format, virtual, size)
}

// convertMemoryLimit bounds qemu-img convert's address space: it reads an
// image from elsewhere, as root.
const convertMemoryLimit = 2 << 30

// tempMark is in the name of a volume being written: "." + name + mark +
// random hex.
const tempMark = ".import-"

// write makes the volume: a temporary file in req.Dir, the image src (of
// format and virtual size; "" for none) converted into it as raw, grown to
// size, then renamed to req.Name, which must not exist.
func (im *Importer) write(ctx context.Context, req Request, src, format string, virtual, size int64) (err error) {
	sweepTemps(req.Dir, req.Name)
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := "." + req.Name + tempMark + hex.EncodeToString(rnd[:])
	f, err := req.Dir.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("volume %s: %w", req.Dir.Join(req.Name), err)
	}
	defer func() {
		if err != nil {
			req.Dir.Remove(tmp)
		}
		f.Close()
	}()
	// Held until the end: a later import's sweep leaves a locked file alone.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("lock %s: %w", req.Dir.Join(tmp), err)
	}
	if src != "" {
		if err := im.convert(ctx, src, format, virtual, f); err != nil {
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("grow %s to %d bytes: %w", req.Dir.Join(tmp), size, err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return renameNoReplace(req.Dir, tmp, req.Name)
}

// convert writes the image src as raw into f, an empty file, with
// qemu-img (as CDI converts), which leaves zeros as holes. qemu-img gets f
// as an inherited descriptor: no path is resolved in the volume's
// directory.
func (im *Importer) convert(ctx context.Context, src, format string, virtual int64, f *os.File) error {
	qemuImg := im.QemuImg
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	// --target-is-zero: f is new and empty, so only data is written.
	script := `ulimit -v "$1" && shift && exec "$@"`
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script, "sh", strconv.Itoa(convertMemoryLimit/1024),
		qemuImg, "convert", "-q", "-n", "--target-is-zero", "-f", format, "-O", "raw", src, "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{f}
	cmd.WaitDelay = 5 * time.Second
	// The target must be at least the image's size for -n.
	if err := f.Truncate(virtual); err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("qemu-img convert: %w", ctx.Err())
		}
		return fmt.Errorf("qemu-img convert: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// renameNoReplace renames tmp to name in d, refusing to replace a file
// that appeared meanwhile.
func renameNoReplace(d *safefs.Dir, tmp, name string) error {
	df, err := d.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer df.Close()
	fd := int(df.Fd())
	err = unix.Renameat2(fd, tmp, fd, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) { // a file system without RENAME_NOREPLACE
		if _, serr := d.OpenRegular(name); serr == nil {
			err = unix.EEXIST
		} else {
			err = unix.Renameat(fd, tmp, fd, name)
		}
	}
	if err != nil {
		return &fs.PathError{Op: "rename", Path: d.Join(name), Err: err}
	}
	return nil
}

// sweepTemps removes the temporary files of imports into name that were
// killed (no lock held on them any more).
func sweepTemps(d *safefs.Dir, name string) {
	df, err := d.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer df.Close()
	names, err := df.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "."+name+tempMark) {
			continue
		}
		f, err := d.OpenFile(n, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			d.Remove(n)
		}
		f.Close()
	}
}

func (im *Importer) say(format string, a ...any) {
	if im.Status != nil {
		fmt.Fprintf(im.Status, format, a...)
	}
}
