package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is one tar member held in memory (the root filesystem is a few
// hundred MB; sorting needs all of it).
type entry struct {
	hdr  *tar.Header
	data []byte
}

// normalRootfs reads the root filesystem tarball and returns its entries
// normalised: names relative without "./", directories ending in "/",
// sorted by name, mtime epoch, no owner names or access times, device
// nodes and FIFOs dropped (the runtime provides /dev). Hard links always
// point at an entry earlier in the order.
func normalRootfs(r io.Reader, epoch time.Time) ([]entry, error) {
	tr := tar.NewReader(r)
	var es []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read rootfs: %w", err)
		}
		switch h.Typeflag {
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			continue
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return nil, fmt.Errorf("rootfs entry %s: tar type %q not supported", h.Name, h.Typeflag)
		}
		name := cleanName(h.Name)
		if name == "" {
			continue // the root itself
		}
		var data []byte
		if h.Typeflag == tar.TypeReg {
			if data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("read rootfs %s: %w", h.Name, err)
			}
		}
		nh := &tar.Header{
			Typeflag: h.Typeflag,
			Name:     name,
			Mode:     h.Mode,
			Uid:      h.Uid,
			Gid:      h.Gid,
			Size:     int64(len(data)),
			ModTime:  epoch,
		}
		switch h.Typeflag {
		case tar.TypeDir:
			nh.Name += "/"
		case tar.TypeSymlink:
			nh.Linkname = h.Linkname
		case tar.TypeLink:
			nh.Linkname = cleanName(h.Linkname)
		}
		for k, v := range h.PAXRecords {
			// Extended attributes (file capabilities) are content.
			if strings.HasPrefix(k, "SCHILY.xattr.") {
				if nh.PAXRecords == nil {
					nh.PAXRecords = map[string]string{}
				}
				nh.PAXRecords[k] = v
			}
		}
		es = append(es, entry{nh, data})
	}
	return sortEntries(es)
}

// sortEntries orders es by name and rewrites each hard-link group so that
// its first member by name carries the data and the others link to it.
func sortEntries(es []entry) ([]entry, error) {
	byName := make(map[string]int, len(es))
	for i, e := range es {
		if _, dup := byName[e.hdr.Name]; dup {
			return nil, fmt.Errorf("rootfs: %s appears twice", e.hdr.Name)
		}
		byName[e.hdr.Name] = i
	}
	// group: data-carrying entry name -> every name of that inode.
	groups := map[string][]string{}
	for _, e := range es {
		if e.hdr.Typeflag != tar.TypeLink {
			continue
		}
		t, ok := byName[e.hdr.Linkname]
		if !ok || es[t].hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("rootfs: hard link %s to %s, not a regular file in the archive", e.hdr.Name, e.hdr.Linkname)
		}
		groups[e.hdr.Linkname] = append(groups[e.hdr.Linkname], e.hdr.Name)
	}
	for target, links := range groups {
		all := append([]string{target}, links...)
		sort.Strings(all)
		first := all[0]
		if first != target {
			// Move the data and the file's header to first.
			ti, fi := byName[target], byName[first]
			h := *es[ti].hdr
			h.Name = first
			es[fi] = entry{&h, es[ti].data}
		}
		for _, n := range all[1:] {
			i := byName[n]
			h := *es[byName[first]].hdr
			h.Name, h.Typeflag, h.Linkname, h.Size = n, tar.TypeLink, first, 0
			es[i] = entry{&h, nil}
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].hdr.Name < es[j].hdr.Name })
	return es, nil
}

// cleanName makes a tar name relative and clean ("./usr/bin/" ->
// "usr/bin"); "" for the root.
func cleanName(n string) string {
	n = path.Clean("/" + n)
	return strings.TrimPrefix(n, "/")
}

// fileEntries makes the files layer: each file with its parent
// directories (0755, root's), the file 0755 and root's unless it says
// otherwise (a fixed mode keeps a checkout's umask out of the image), and
// the requested file capabilities.
func fileEntries(files []File, epoch time.Time) ([]entry, error) {
	var es []entry
	dirs := map[string]bool{}
	for _, f := range files {
		name := cleanName(f.Dst)
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			es = append(es, entry{&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}, nil})
		}
		if f.Dir {
			if dirs[name] {
				return nil, fmt.Errorf("add %s: directory given twice, or after a file in it", f.Dst)
			}
			dirs[name] = true
			es = append(es, entry{&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: epoch}, nil})
			continue
		}
		if f.Link != "" {
			es = append(es, entry{&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.Link, Mode: 0o777, Uid: f.UID, Gid: f.GID, ModTime: epoch}, nil})
			continue
		}
		data := f.Data
		if f.Src != "" {
			st, err := os.Stat(f.Src)
			if err != nil {
				return nil, fmt.Errorf("add %s: %w", f.Dst, err)
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("add %s: %s is not a regular file", f.Dst, f.Src)
			}
			if data, err = os.ReadFile(f.Src); err != nil {
				return nil, fmt.Errorf("add %s: %w", f.Dst, err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: f.UID, Gid: f.GID, Size: int64(len(data)), ModTime: epoch}
		if len(f.Caps) > 0 {
			xattr, err := FileCaps(f.Caps)
			if err != nil {
				return nil, fmt.Errorf("add %s: %w", f.Dst, err)
			}
			h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(xattr)}
		}
		es = append(es, entry{h, data})
	}
	return sortEntries(es)
}

// DirFiles lists the tree under dir as Files under dst ("/" for the
// image's root): directories and regular files with their modes, symbolic
// links as they are, everything root's. Anything else (a device, a
// socket) is refused: a layer made from it would not be what dir holds.
func DirFiles(dir, dst string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		st, err := d.Info()
		if err != nil {
			return err
		}
		switch m := st.Mode(); {
		case m.IsDir():
			files = append(files, File{Dst: name, Dir: true, Mode: int64(m.Perm())})
		case m.IsRegular():
			files = append(files, File{Dst: name, Src: p, Mode: int64(m.Perm())})
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			files = append(files, File{Dst: name, Link: target})
		default:
			return fmt.Errorf("%s: %s is neither a file, a directory nor a symbolic link", p, m.Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return files, nil
}

// capBits are the capabilities -cap accepts (linux/capability.h).
var capBits = map[string]uint{
	"net_bind_service": 10,
	"net_admin":        12,
	"net_raw":          13,
	"sys_nice":         23,
	"sys_resource":     24,
}

// FileCaps encodes security.capability as `setcap CAPS+ep` writes it:
// struct vfs_cap_data, revision 2, the effective flag, the capabilities
// permitted and none inheritable.
func FileCaps(names []string) ([]byte, error) {
	var permitted uint64
	for _, n := range names {
		bit, ok := capBits[strings.TrimPrefix(strings.ToLower(n), "cap_")]
		if !ok {
			return nil, fmt.Errorf("capability %q unknown", n)
		}
		permitted |= 1 << bit
	}
	const revision2, effective = 0x02000000, 0x000001
	var b bytes.Buffer
	for _, v := range []uint32{revision2 | effective, uint32(permitted), 0, uint32(permitted >> 32), 0} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes(), nil
}

// writeTar writes es as a tar file at p (PAX only where an entry needs it).
func writeTar(p string, es []entry) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, e := range es {
		if err := tw.WriteHeader(e.hdr); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %s: %w", p, e.hdr.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %s: %w", p, e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	return f.Close()
}
