package registrydisk

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/klauspost/compress/zstd"
)

// What is verified on a pull, as containerd verifies its content store:
// the manifest (or index) against the digest the reference pins, the
// platform's manifest against the index's entry, the config against the
// manifest's descriptor, each layer's bytes against its digest and size,
// read to their very end whatever the tar inside says, and each layer's
// uncompressed stream (to its end as well) against the config's diff ID.
// Nothing of an image is cached before all of it passed.

// maxConfigSize bounds an image's config, read whole into memory.
const maxConfigSize = 4 << 20

// errDigest marks an error as content that is not what its digest names.
var errDigest = errors.New("digest mismatch")

// errLimit marks an image that expands to more than the cache allows.
var errLimit = errors.New("image too large")

// mismatch is the error for a blob (what, e.g. "layer sha256:...") whose
// bytes hash to got.
func mismatch(what string, got ggcr.Hash) error {
	return fmt.Errorf("%s: %w: the content served has digest %s", what, errDigest, got)
}

// resolve finds the image ref names for this machine's platform and
// checks the manifest against the digest that names it: the reference's
// own when it is pinned, the index's entry when the reference names an
// index.
func resolve(ctx context.Context, r name.Reference) (ggcr.Image, ggcr.Hash, error) {
	desc, err := remote.Get(r,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(ggcr.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, ggcr.Hash{}, err
	}
	if d, ok := r.(name.Digest); ok {
		want, err := ggcr.NewHash(d.DigestStr())
		if err != nil {
			return nil, ggcr.Hash{}, err
		}
		if err := checkBytes("manifest", want, desc.Manifest); err != nil {
			return nil, ggcr.Hash{}, err
		}
	}
	img, err := desc.Image()
	if err != nil {
		return nil, ggcr.Hash{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, ggcr.Hash{}, err
	}
	digest := sha256Hash(raw)
	if !desc.MediaType.IsIndex() {
		if err := checkBytes("manifest", desc.Digest, raw); err != nil {
			return nil, ggcr.Hash{}, err
		}
		return img, digest, nil
	}
	idx, err := ggcr.ParseIndexManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, ggcr.Hash{}, fmt.Errorf("index %s: %w", desc.Digest, err)
	}
	for _, m := range idx.Manifests {
		if m.Digest == digest && m.Size == int64(len(raw)) {
			return img, digest, nil
		}
	}
	return nil, ggcr.Hash{}, fmt.Errorf("manifest %s: %w: it is not one the index %s lists", digest, errDigest, desc.Digest)
}

func sha256Hash(b []byte) ggcr.Hash {
	sum := sha256.Sum256(b)
	return ggcr.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// checkBytes checks the blob b (what) against its digest.
func checkBytes(what string, want ggcr.Hash, b []byte) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("%s %s: digest algorithm %q is not supported", what, want, want.Algorithm)
	}
	if got := sha256Hash(b); got != want {
		return mismatch(what+" "+want.String(), got)
	}
	return nil
}

// pull extracts the disk of img into the cache as the file dst, once
// every blob of the image is verified; on any failure nothing is left.
func (c *Cache) pull(ctx context.Context, d *cacheDir, img ggcr.Image, diskPath, dst string) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	limit := c.maxSize()
	cf, err := readConfig(img, m.Config)
	if err != nil {
		return err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return fmt.Errorf("config %s lists %d diff IDs for the manifest's %d layers", m.Config.Digest, len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	var compressed int64
	for _, l := range m.Layers {
		if l.Size < 0 {
			return fmt.Errorf("layer %s: size %d", l.Digest, l.Size)
		}
		if compressed += l.Size; compressed > limit {
			return fmt.Errorf("%w: its layers take more than the limit of %d bytes an image may take in the cache", errLimit, limit)
		}
	}
	tmp, err := d.createTemp(ctx, pullTempPrefix)
	if err != nil {
		return err
	}
	x := newExtraction(diskPath, tmp, limit)
	// Top layer first: what an upper layer holds, or deleted, hides what
	// the layers below have at that path.
	for i := len(m.Layers) - 1; i >= 0 && err == nil; i-- {
		err = x.layer(ctx, img, m.Layers[i], cf.RootFS.DiffIDs[i])
	}
	if err == nil {
		err = x.result()
	}
	return d.commit(tmp, err, dst, false)
}

// readConfig reads the image's config and checks it against its
// descriptor.
func readConfig(img ggcr.Image, d ggcr.Descriptor) (*ggcr.ConfigFile, error) {
	if d.Size < 0 || d.Size > maxConfigSize {
		return nil, fmt.Errorf("config %s: %d bytes (at most %d)", d.Digest, d.Size, maxConfigSize)
	}
	var b []byte
	err := readBlob(img, "config", d, func(r io.Reader) (err error) {
		b, err = io.ReadAll(r) // to its end: checked
		return err
	})
	if err != nil {
		return nil, err
	}
	cf, err := ggcr.ParseConfigFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", d.Digest, err)
	}
	return cf, nil
}

// readBlob fetches the blob d of img and hands it to use as it arrives,
// through a reader that fails at the blob's end when the bytes are not
// what d names (and before, once more than its size came). After use, the
// rest of the blob is read, so its digest is checked whatever use read.
// When use fails on damaged content, the blob is read to its end as well:
// a digest mismatch, the cause, is what is reported.
func readBlob(img ggcr.Image, what string, d ggcr.Descriptor, use func(io.Reader) error) error {
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("%s %s: digest algorithm %q is not supported", what, d.Digest, d.Digest.Algorithm)
	}
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, d.Digest, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, d.Digest, err)
	}
	defer rc.Close()
	br := &blobReader{r: rc, what: what, want: d.Digest, size: d.Size, h: sha256.New()}
	err = use(br)
	if err == nil || !errors.Is(err, errLimit) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		if _, derr := io.Copy(io.Discard, br); derr != nil && (err == nil || errors.Is(derr, errDigest)) {
			err = derr
		}
	}
	return err
}

// blobReader reads a blob, hashing what it reads, and at the blob's end
// (or when more than its size comes) fails unless the bytes are the ones
// its digest names.
type blobReader struct {
	r    io.Reader
	what string // "layer", "config"
	want ggcr.Hash
	size int64
	h    hash.Hash
	n    int64
	err  error // once set, every Read returns it
}

func (b *blobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if left := b.size - b.n + 1; int64(len(p)) > left {
		p = p[:left] // one byte past the size tells a longer blob
	}
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	switch {
	case b.n > b.size:
		b.err = fmt.Errorf("%s %s: %w: more than the %d bytes of its descriptor", b.what, b.want, errDigest, b.size)
		return 0, b.err
	case err == nil:
		return n, nil
	case b.n == b.size:
		// Every byte is here: whatever the source says at its end (its
		// own check's error, or EOF), the digest decides.
		if got := (ggcr.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(b.h.Sum(nil))}); got != b.want {
			b.err = mismatch(b.what+" "+b.want.String(), got)
		} else if err == io.EOF {
			b.err = io.EOF
		} else {
			b.err = fmt.Errorf("%s %s: %w", b.what, b.want, err)
		}
	case err == io.EOF:
		b.err = fmt.Errorf("%s %s: ended after %d of its %d bytes", b.what, b.want, b.n, b.size)
	default:
		b.err = fmt.Errorf("%s %s: %w", b.what, b.want, err)
	}
	return n, b.err
}

// extraction finds the disk file in an image's layers, top layer first,
// and writes it to the temporary file.
type extraction struct {
	want   string // the file's path in the image, "" for the one under disk/
	out    *sparseWriter
	budget int64 // bytes the layers may still expand to
	limit  int64
	// What the upper layers hold: true for a file, link or whiteout
	// (which hide everything below their path), false for a directory;
	// and the directories an upper layer made opaque.
	upper  map[string]bool
	opaque map[string]bool
	found  []string
	links  map[string]string
}

func newExtraction(diskPath string, out *os.File, limit int64) *extraction {
	want := ""
	if diskPath != "" {
		want = strings.TrimPrefix(path.Clean("/"+diskPath), "/")
	}
	return &extraction{want: want, out: &sparseWriter{f: out}, budget: limit, limit: limit,
		upper: map[string]bool{}, opaque: map[string]bool{}, links: map[string]string{}}
}

// layer reads one layer: its blob verified against its digest, the
// stream inside it (gzip, zstd or none, by its first bytes) against the
// config's diff ID, both to their end.
func (x *extraction) layer(ctx context.Context, img ggcr.Image, d ggcr.Descriptor, diffID ggcr.Hash) error {
	return readBlob(img, "layer", d, func(blob io.Reader) error {
		u, done, err := decompress(blob)
		if err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		defer done()
		h := sha256.New()
		stream := &budgetReader{r: io.TeeReader(u, h), x: x, layer: d.Digest}
		if err := x.walk(ctx, stream); err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		// What follows the tar's end is the layer's as well.
		if _, err := io.Copy(io.Discard, stream); err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		if got := (ggcr.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}); got != diffID {
			return fmt.Errorf("layer %s: %w: uncompressed, it is %s, not the config's diff ID %s", d.Digest, errDigest, got, diffID)
		}
		return nil
	})
}

// decompress reads what r holds, told by its first bytes.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 1<<16)
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		// A gzip stream must end the blob: with multistream, anything
		// after it is read as another stream or refused.
		return zr, func() {}, nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	default:
		return br, func() {}, nil
	}
}

// budgetReader counts a layer's uncompressed bytes against what the image
// may expand to.
type budgetReader struct {
	r     io.Reader
	x     *extraction
	layer ggcr.Hash
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if int64(len(p)) > b.x.budget+1 {
		p = p[:b.x.budget+1]
	}
	n, err := b.r.Read(p)
	b.x.budget -= int64(n)
	if b.x.budget < 0 {
		return 0, b.x.overLimit()
	}
	return n, err
}

func (x *extraction) overLimit() error {
	return fmt.Errorf("%w: it expands to more than the limit of %d bytes an image may take in the cache", errLimit, x.limit)
}

// walk reads the tar of one layer: entries an upper layer hides are
// skipped, the disk file is written out, whiteouts and opaque directories
// hide what the layers below have.
func (x *extraction) walk(ctx context.Context, r io.Reader) error {
	layerOpaque := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read its tar: %w", err)
		}
		n := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		base, dir := path.Base(n), path.Dir(n)
		if base == ".wh..wh..opq" {
			layerOpaque[dir] = true
			continue
		}
		whiteout := strings.HasPrefix(base, ".wh.")
		if whiteout {
			n = path.Join(dir, strings.TrimPrefix(base, ".wh."))
		}
		if _, ok := x.upper[n]; (ok && !whiteout) || x.hidden(n) {
			continue
		}
		x.upper[n] = whiteout || h.Typeflag != tar.TypeDir
		if whiteout {
			continue
		}
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			x.links[n] = h.Linkname
		}
		if h.Typeflag != tar.TypeReg || !x.wanted(n) {
			continue
		}
		x.found = append(x.found, "/"+n)
		if len(x.found) > 1 {
			continue // refused in result
		}
		if h.Size > x.budget {
			return fmt.Errorf("/%s is %d bytes: %w", n, h.Size, x.overLimit())
		}
		if _, err := io.CopyBuffer(x.out, tr, make([]byte, 1<<20)); err != nil {
			return fmt.Errorf("extract /%s: %w", n, err)
		}
		if err := x.out.f.Truncate(h.Size); err != nil {
			return fmt.Errorf("extract /%s: %w", n, err)
		}
	}
	for d := range layerOpaque {
		x.opaque[d] = true
	}
	return nil
}

// hidden: an upper layer has a file or whiteout at a directory above n, or
// made one of them opaque.
func (x *extraction) hidden(n string) bool {
	for d := path.Dir(n); ; d = path.Dir(d) {
		if x.upper[d] || x.opaque[d] {
			return true
		}
		if d == "." || d == "/" {
			return false
		}
	}
}

func (x *extraction) wanted(n string) bool {
	if x.want != "" {
		return n == x.want
	}
	return path.Dir(n) == "disk"
}

// result says whether exactly the one file was found.
func (x *extraction) result() error {
	switch {
	case len(x.found) == 0 && x.links[x.want] != "":
		return fmt.Errorf("/%s is a link in the image (to %s): name the file itself", x.want, x.links[x.want])
	case len(x.found) == 0 && x.want != "":
		return fmt.Errorf("no file /%s in the image", x.want)
	case len(x.found) == 0:
		return errors.New("no disk under /disk/ in the image: not a KubeVirt containerDisk")
	case len(x.found) > 1:
		return fmt.Errorf("several files under /disk/ (%s): name one with containerDisk.path", strings.Join(x.found, ", "))
	}
	return nil
}
