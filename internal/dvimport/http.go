package dvimport

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/disks"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// The download cache holds, per URL (key: a hash of it), the image as
// downloaded and decompressed (<key>.img) and what the server said of it
// (<key>.json). A download in progress is <key>.part and its
// decompression <key>.dec, both under the URL's lock (<key>.lock).

// meta is what the cache knows of a URL's download.
type meta struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"lastModified,omitempty"`
	// Size and SHA256 are of the bytes downloaded (compressed, if so).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// maxDecompressed bounds what a download may expand to.
const maxDecompressed = registrydisk.DefaultMaxSize

// download returns the path of req's HTTP source image in the cache,
// downloading it unless the cache holds what the server still serves at
// that URL. done releases the URL's lock; the file stays valid while it is
// held.
func (im *Importer) download(ctx context.Context, req Request) (path string, done func(), err error) {
	url := req.Source.HTTP.URL
	shown := shownURL(url)
	cacheDir := im.CacheDir
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	d, err := safefs.OpenTrusted(cacheDir, 0o700)
	if err != nil {
		return "", nil, fmt.Errorf("download cache: %w", err)
	}
	sweepCache(d)
	h := sha256.Sum256([]byte(url))
	key := hex.EncodeToString(h[:12])
	lock, err := d.OpenFile(key+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		d.Close()
		return "", nil, fmt.Errorf("download cache: %w", err)
	}
	done = func() { lock.Close(); d.Close() }
	if err := flockWait(ctx, lock); err != nil {
		return "", done, fmt.Errorf("wait for another import of the same URL: %w", err)
	}
	old, cached := readMeta(d, key, url)
	resp, err := im.get(ctx, req, old, 0)
	if err != nil {
		return "", done, err
	}
	if resp.StatusCode == http.StatusNotModified && cached {
		resp.Body.Close()
		im.say("vlctl: DataVolume %s: %s not modified since it was downloaded: using the cached copy\n", req.DataVolume, shown)
		return d.Join(key + ".img"), done, nil
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return "", done, fmt.Errorf("GET %s: %s", shown, resp.Status)
	}
	m, err := im.transfer(ctx, req, d, key, resp)
	if err == nil {
		err = im.unpack(ctx, d, key)
	}
	d.Remove(key + ".part")
	if err != nil {
		d.Remove(key + ".dec")
		return "", done, err
	}
	if err := renameReplace(d, key+".dec", key+".img"); err != nil {
		return "", done, err
	}
	b, _ := json.Marshal(m)
	if err := d.WriteFile(key+".json", b, 0o600); err != nil {
		return "", done, err
	}
	return d.Join(key + ".img"), done, nil
}

// sweepCache removes what killed imports left: the partial download and
// decompression of a URL that no import holds the lock of.
func sweepCache(d *safefs.Dir) {
	df, err := d.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	names, err := df.Readdirnames(-1)
	df.Close()
	if err != nil {
		return
	}
	for _, n := range names {
		key, ok := strings.CutSuffix(n, ".part")
		if !ok {
			if key, ok = strings.CutSuffix(n, ".dec"); !ok {
				continue
			}
		}
		lock, err := d.OpenFile(key+".lock", os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			d.Remove(n)
		}
		lock.Close()
	}
}

// shownURL is url as messages show it: a password in it left out.
func shownURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// readMeta is the cache's record of url, when its image is there too.
func readMeta(d *safefs.Dir, key, url string) (meta, bool) {
	var m meta
	b, err := d.ReadFile(key + ".json")
	if err != nil || json.Unmarshal(b, &m) != nil || m.URL != url {
		return meta{}, false
	}
	f, err := d.OpenRegular(key + ".img")
	if err != nil {
		return meta{}, false
	}
	f.Close()
	return m, m.ETag != "" || m.LastModified != ""
}

// client is the HTTP client: every step of a request has a deadline short
// of the transfer itself, which the stall watchdog bounds.
func (im *Importer) client() *http.Client {
	if im.Client != nil {
		return im.Client
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
	}}
}

func (im *Importer) stall() time.Duration {
	if im.Stall > 0 {
		return im.Stall
	}
	return 60 * time.Second
}

func (im *Importer) attempts() int {
	if im.Attempts > 0 {
		return im.Attempts
	}
	return 6
}

// get sends the GET of req's URL: conditional on what the cache holds
// (old), or for the bytes from offset on when offset > 0.
func (im *Importer) get(ctx context.Context, req Request, old meta, offset int64) (*http.Response, error) {
	url := req.Source.HTTP.URL
	shown := shownURL(url)
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for _, h := range req.Source.HTTP.ExtraHeaders {
		name, value, _ := parseHeader(h)
		hr.Header.Add(name, value)
	}
	// The bytes as stored: a .gz is unpacked here, never by the transport.
	hr.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		hr.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		// The rest of the same file, or all of a changed one.
		if v := old.ETag; v != "" && !strings.HasPrefix(v, "W/") {
			hr.Header.Set("If-Range", v)
		} else if old.LastModified != "" {
			hr.Header.Set("If-Range", old.LastModified)
		}
	} else {
		if old.ETag != "" {
			hr.Header.Set("If-None-Match", old.ETag)
		}
		if old.LastModified != "" {
			hr.Header.Set("If-Modified-Since", old.LastModified)
		}
	}
	resp, err := im.client().Do(hr)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", shown, err)
	}
	return resp, nil
}

// transfer writes the body of resp (a 200) to <key>.part, resuming with
// Range requests when the transfer breaks off, and returns what the server
// said of the file once it is all there.
func (im *Importer) transfer(ctx context.Context, req Request, d *safefs.Dir, key string, resp *http.Response) (meta, error) {
	url := req.Source.HTTP.URL
	shown := shownURL(url)
	f, err := d.OpenFile(key+".part", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		resp.Body.Close()
		return meta{}, err
	}
	defer f.Close()
	m := meta{URL: url, ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified")}
	total := resp.ContentLength // -1: unknown
	prog := newProgress(im.Status, im.Terminal, "DataVolume "+req.DataVolume+": "+shown, total)
	defer prog.end()
	var off int64
	var last error
	for attempt := 1; ; attempt++ {
		if resp != nil {
			n, err := im.copyBody(ctx, f, off, resp, prog)
			resp.Body.Close()
			resp = nil
			off += n
			if (total >= 0 && off == total) || (total < 0 && err == nil) {
				break
			}
			if err == nil {
				err = fmt.Errorf("the transfer ended at byte %d of %d", off, total)
			}
			last = err
		}
		if ctx.Err() != nil {
			return meta{}, fmt.Errorf("GET %s: %w", shown, ctx.Err())
		}
		if attempt >= im.attempts() {
			return meta{}, fmt.Errorf("GET %s: gave up after %d attempts, at byte %d of %s: %w", shown, attempt, off, sizeText(total), last)
		}
		if !resumable(m, total) {
			off = 0
			prog.restart()
		}
		im.say("vlctl: DataVolume %s: %s: %v; trying again from byte %d\n", req.DataVolume, shown, last, off)
		select {
		case <-ctx.Done():
			return meta{}, fmt.Errorf("GET %s: %w", shown, ctx.Err())
		case <-time.After(min(time.Duration(attempt)*time.Second, 5*time.Second)):
		}
		var err error
		if resp, err = im.get(ctx, req, m, off); err != nil {
			last = err
			continue
		}
		switch resp.StatusCode {
		case http.StatusPartialContent:
			if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != off {
				resp.Body.Close()
				return meta{}, fmt.Errorf("GET %s: asked for the bytes from %d on, got Content-Range %q", shown, off, resp.Header.Get("Content-Range"))
			}
		case http.StatusOK:
			// The file changed (If-Range), or the server ignores ranges:
			// all of it again.
			off = 0
			prog.restart()
			m.ETag, m.LastModified = resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
			total = resp.ContentLength
		default:
			resp.Body.Close()
			return meta{}, fmt.Errorf("GET %s (from byte %d): %s", shown, off, resp.Status)
		}
	}
	if off == 0 {
		return meta{}, fmt.Errorf("GET %s: the file is empty", shown)
	}
	if err := f.Truncate(off); err != nil {
		return meta{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return meta{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return meta{}, err
	}
	m.Size, m.SHA256 = off, hex.EncodeToString(h.Sum(nil))
	return m, nil
}

// resumable: a broken transfer of a file of known length whose version
// the server names (a strong ETag, or Last-Modified) goes on with a Range
// request conditional on that version (If-Range); any other starts over.
func resumable(m meta, total int64) bool {
	return total > 0 && ((m.ETag != "" && !strings.HasPrefix(m.ETag, "W/")) || m.LastModified != "")
}

// copyBody writes resp's body to f from off, cutting the transfer when no
// byte came for the stall time.
func (im *Importer) copyBody(ctx context.Context, f *os.File, off int64, resp *http.Response, prog *progress) (int64, error) {
	stalled := make(chan struct{})
	timer := time.AfterFunc(im.stall(), func() { close(stalled); resp.Body.Close() })
	defer timer.Stop()
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		if k > 0 {
			timer.Reset(im.stall())
			if _, werr := f.WriteAt(buf[:k], off+n); werr != nil {
				return n, werr
			}
			n += int64(k)
			prog.add(int64(k))
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			select {
			case <-stalled:
				return n, fmt.Errorf("no data for %s", im.stall())
			default:
			}
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, err
		}
	}
}

// rangeStart is the first byte a Content-Range "bytes A-B/N" names.
func rangeStart(cr string) (int64, bool) {
	r, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(r, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil
}

func sizeText(n int64) string {
	if n < 0 {
		return "an unknown length"
	}
	return strconv.FormatInt(n, 10)
}

// Magic numbers of the compressed forms CDI unpacks, and of tar.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	xzMagic   = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
)

// unpack makes <key>.dec from <key>.part: decompressed when it is gzip or
// xz (told by its first bytes, as CDI tells them), with zeros left as
// holes, and checked to be a disk image vlctl uses (raw, or qcow2 without
// a backing or data file).
func (im *Importer) unpack(ctx context.Context, d *safefs.Dir, key string) error {
	in, err := d.OpenRegular(key + ".part")
	if err != nil {
		return err
	}
	defer in.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(in, head)
	head = head[:n]
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return err
	}
	var r io.Reader = in
	var what string
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(in)
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		r, what = zr, "gzip"
	case bytes.HasPrefix(head, xzMagic):
		zr, err := xz.NewReader(in)
		if err != nil {
			return fmt.Errorf("xz: %w", err)
		}
		r, what = zr, "xz"
	}
	out, err := d.OpenFile(key+".dec", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	w := registrydisk.SparseWriter(out)
	n64, err := io.Copy(w, &ctxReader{ctx: ctx, r: io.LimitReader(r, maxDecompressed+1)})
	if err != nil {
		if what != "" {
			return fmt.Errorf("%s: %w (a truncated or damaged file)", what, err)
		}
		return err
	}
	if n64 > maxDecompressed {
		return fmt.Errorf("expands to more than %d bytes, the most vlctl unpacks", int64(maxDecompressed))
	}
	if err := out.Truncate(n64); err != nil {
		return err
	}
	if isTar(out) {
		return errors.New("a tar archive: vlctl imports disk images (raw or qcow2, optionally .gz or .xz), not archives")
	}
	if err := out.Sync(); err != nil {
		return err
	}
	p := &disks.Preparer{QemuImg: im.QemuImg}
	if _, _, err := p.ImageInfo(ctx, d.Join(key+".dec")); err != nil {
		return fmt.Errorf("not a disk image vlctl uses: %w", err)
	}
	return nil
}

// isTar tells a tar archive by its header's magic.
func isTar(f *os.File) bool {
	b := make([]byte, 8)
	n, _ := f.ReadAt(b, 257)
	return n == 8 && (bytes.Equal(b[:6], []byte("ustar\x00")) || bytes.Equal(b, []byte("ustar  \x00")))
}

// ctxReader ends a copy when ctx does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// renameReplace renames tmp to name in d, replacing it.
func renameReplace(d *safefs.Dir, tmp, name string) error {
	df, err := d.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer df.Close()
	if err := unix.Renameat(int(df.Fd()), tmp, int(df.Fd()), name); err != nil {
		return fmt.Errorf("rename %s: %w", d.Join(tmp), err)
	}
	return nil
}

// flockWait takes f's exclusive lock, waiting until ctx ends.
func flockWait(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
