package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func rootfsTar(t *testing.T, hs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return &b
}

// TestNormalRootfs: names cleaned and sorted, one mtime, no owner names,
// devices dropped, and a hard link that sorts before its target becomes
// the data-carrying entry (a tar reader needs the target first).
func TestNormalRootfs(t *testing.T) {
	old := time.Unix(1e9, 0)
	in := rootfsTar(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: old},
		&tar.Header{Typeflag: tar.TypeDir, Name: "./usr/", Mode: 0o755, ModTime: old, Uname: "root"},
		&tar.Header{Typeflag: tar.TypeReg, Name: "./usr/zz", Mode: 0o4755, Size: 3, ModTime: old, Uid: 5, Gid: 6, Uname: "u", Gname: "g"},
		&tar.Header{Typeflag: tar.TypeLink, Name: "./usr/aa", Linkname: "./usr/zz", ModTime: old},
		&tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Devmajor: 1, Devminor: 3, ModTime: old},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "./var/run", Linkname: "../run", ModTime: old},
	)
	epoch := time.Unix(1735689600, 0)
	es, err := normalRootfs(in, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.hdr.Name)
		if !e.hdr.ModTime.Equal(epoch) || e.hdr.Uname != "" || e.hdr.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q", e.hdr.Name, e.hdr.ModTime, e.hdr.Uname, e.hdr.Gname)
		}
	}
	if got := strings.Join(names, " "); got != "usr/ usr/aa usr/zz var/run" {
		t.Fatalf("entries %q", got)
	}
	aa, zz := es[1].hdr, es[2].hdr
	if aa.Typeflag != tar.TypeReg || len(es[1].data) != 3 || aa.Mode != 0o4755 || aa.Uid != 5 || aa.Gid != 6 {
		t.Errorf("usr/aa should carry the file: %+v", aa)
	}
	if zz.Typeflag != tar.TypeLink || zz.Linkname != "usr/aa" || es[2].data != nil {
		t.Errorf("usr/zz should link to usr/aa: %+v", zz)
	}
	if es[3].hdr.Linkname != "../run" {
		t.Errorf("symlink target %q changed", es[3].hdr.Linkname)
	}
}

func TestNormalRootfsRefusesDanglingHardLink(t *testing.T) {
	in := rootfsTar(t, &tar.Header{Typeflag: tar.TypeLink, Name: "./a", Linkname: "./missing"})
	if _, err := normalRootfs(in, time.Unix(0, 0)); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %v, want one naming the missing target", err)
	}
}

// TestFileCaps: the bytes `setcap cap_net_bind_service=+ep` stores
// (getcap -v and the kernel's vfs_cap_data revision 2).
func TestFileCaps(t *testing.T) {
	b, err := FileCaps([]string{"net_bind_service"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(b), "0100000200040000000000000000000000000000"; got != want {
		t.Errorf("security.capability = %s, want %s", got, want)
	}
	if _, err := FileCaps([]string{"cap_bogus"}); err == nil {
		t.Error("unknown capability accepted")
	}
}

func TestFileEntries(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("ELF"), 0o600); err != nil {
		t.Fatal(err)
	}
	es, err := fileEntries([]File{{Dst: "/usr/bin/m", Src: src, Caps: []string{"net_bind_service"}}}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].hdr.Name != "usr/" || es[1].hdr.Name != "usr/bin/" || es[2].hdr.Name != "usr/bin/m" {
		t.Fatalf("entries %v", es)
	}
	h := es[2].hdr
	if h.Mode != 0o755 || h.Uid != 0 || h.PAXRecords["SCHILY.xattr.security.capability"] == "" {
		t.Errorf("usr/bin/m: mode %o uid %d pax %v", h.Mode, h.Uid, h.PAXRecords)
	}
	if _, err := fileEntries([]File{{Dst: "/x", Src: filepath.Dir(src)}}, time.Unix(1, 0)); err == nil {
		t.Error("a directory accepted as a file")
	}
}

func TestFileEntriesDataDirsOwners(t *testing.T) {
	es, err := fileEntries([]File{
		{Dst: "/tmp", Dir: true, Mode: 0o1777},
		{Dst: "/etc/passwd", Data: []byte("u:x:1001:1001::/:/bin/sh\n"), Mode: 0o644},
		{Dst: "/disk/disk.qcow2", Data: []byte("QFI"), Mode: 0o440, UID: 107, GID: 107},
	}, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.hdr.Name] = fmt.Sprintf("%o %d:%d %d", e.hdr.Mode, e.hdr.Uid, e.hdr.Gid, len(e.data))
	}
	want := map[string]string{
		"tmp/": "1777 0:0 0", "etc/": "755 0:0 0", "etc/passwd": "644 0:0 25",
		"disk/": "755 0:0 0", "disk/disk.qcow2": "440 107:107 3",
	}
	if len(got) != len(want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if _, err := fileEntries([]File{{Dst: "/a/b", Data: []byte("x")}, {Dst: "/a", Dir: true, Mode: 0o700}}, time.Unix(1, 0)); err == nil {
		t.Error("a directory given after a file in it was accepted")
	}
}

// TestDirFiles: a tree (as dpkg-deb -x leaves it) becomes Files with its
// modes and links, and the layer made of them holds the same tree; a FIFO
// is refused.
func TestDirFiles(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/bin/xorriso"), []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/lib/libx.so.1.2"), []byte("SO"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libx.so.1.2", filepath.Join(dir, "usr/lib/libx.so.1")); err != nil {
		t.Fatal(err)
	}
	files, err := DirFiles(dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	es, err := fileEntries(files, time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.hdr.Name] = fmt.Sprintf("%c %o %s %d", e.hdr.Typeflag, e.hdr.Mode, e.hdr.Linkname, len(e.data))
	}
	want := map[string]string{
		"usr/": "5 755  0", "usr/bin/": "5 755  0", "usr/lib/": "5 755  0",
		"usr/bin/xorriso":     "0 755  3",
		"usr/lib/libx.so.1.2": "0 644  2",
		"usr/lib/libx.so.1":   "2 777 libx.so.1.2 0",
	}
	if len(got) != len(want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "usr/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := DirFiles(dir, "/"); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("a FIFO: %v, want it refused", err)
	}
}

// TestAppend: one more layer on an image, its config kept.
func TestAppend(t *testing.T) {
	work := t.TempDir()
	epoch := time.Unix(1, 0).UTC()
	base, err := Image(Spec{Files: []File{{Dst: "/usr/bin/a", Data: []byte("A")}}, Epoch: epoch,
		Config: Config{Entrypoint: []string{"/usr/bin/a"}}}, work)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Append(base, []File{{Dst: "/usr/bin/a", Data: []byte("B")}, {Dst: "/usr/bin/b", Link: "a"}}, epoch, "test", work)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/bin/a" || cf.History[len(cf.History)-1].CreatedBy != "test" {
		t.Fatalf("%d layers, config %+v, history %+v", len(layers), cf.Config, cf.History)
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, fmt.Sprintf("%s:%c:%s", h.Name, h.Typeflag, h.Linkname))
	}
	if got := strings.Join(names, " "); got != "usr/:5: usr/bin/:5: usr/bin/a:0: usr/bin/b:2:a" {
		t.Errorf("top layer %s", got)
	}
}
