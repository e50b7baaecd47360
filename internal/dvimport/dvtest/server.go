// Package dvtest is a web server standing in for the internet in the
// tests of DataVolume imports: it serves files with an ETag and a
// Last-Modified (Range, If-Range and If-None-Match as net/http's
// ServeContent answers them), 404 for anything else, can break a transfer
// off at a byte offset, and counts what it answered.
package dvtest

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is the stand-in.
type Server struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	cuts  map[string]cut
	// counts of 200, 206 and 304 answers.
	full, ranged, notModified int
}

// cut breaks off the response carrying byte at of a file; once: only the
// first such response.
type cut struct {
	at   int64
	once bool
}

// New starts a server, closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{files: map[string][]byte{}, cuts: map[string]cut{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Put serves b at /name and returns its URL.
func (s *Server) Put(name string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[name] = b
	return s.URL + "/" + name
}

// Cut breaks off the transfers of name at byte at: the first one (once),
// or every one, a resumed one included (which then never gets past it).
func (s *Server) Cut(name string, at int64, once bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts[name] = cut{at: at, once: once}
}

// Counts are the answers so far: whole files (200), ranges (206) and
// not modified (304).
func (s *Server) Counts() (full, ranged, notModified int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full, s.ranged, s.notModified
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	s.mu.Lock()
	b, ok := s.files[name]
	c, cutting := s.cuts[name]
	if cutting && c.once {
		delete(s.cuts, name)
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", fmt.Sprintf(`"%d-%x"`, len(b), b[:min(len(b), 16)]))
	rec := &recorder{ResponseWriter: w, s: s, limit: -1}
	if cutting {
		var start int64
		if a, _, ok := strings.Cut(strings.TrimPrefix(r.Header.Get("Range"), "bytes="), "-"); ok {
			start, _ = strconv.ParseInt(a, 10, 64)
		}
		rec.limit = max(c.at-start, 0)
	}
	http.ServeContent(rec, r, name, time.Unix(1700000000, 0), bytes.NewReader(b))
}

// recorder counts answers and breaks a body off after limit bytes.
type recorder struct {
	http.ResponseWriter
	s       *Server
	limit   int64 // -1: no limit
	written int64
}

func (r *recorder) WriteHeader(code int) {
	r.s.mu.Lock()
	switch code {
	case http.StatusOK:
		r.s.full++
	case http.StatusPartialContent:
		r.s.ranged++
	case http.StatusNotModified:
		r.s.notModified++
	}
	r.s.mu.Unlock()
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.limit >= 0 && r.written+int64(len(p)) > r.limit {
		n, _ := r.ResponseWriter.Write(p[:r.limit-r.written])
		r.written += int64(n)
		r.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-body
	}
	n, err := r.ResponseWriter.Write(p)
	r.written += int64(n)
	return n, err
}
