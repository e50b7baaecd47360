package testguest

import (
	"fmt"
	"io"
	"path"
	"syscall"
)

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks as
// an initramfs: a 110-byte ASCII header per entry, the name, the data, each
// padded to 4 bytes, and a TRAILER!!! entry at the end.
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	err  error
	dirs map[string]bool // directories written so far
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rdevMajor, rdevMinor uint32) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := uint32(1)
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Dir, File, Symlink and CharDev add entries; names have no leading slash.
func (c *cpioWriter) Dir(name string, perm uint32) {
	if c.dirs == nil {
		c.dirs = map[string]bool{}
	}
	c.dirs[name] = true
	c.entry(name, syscall.S_IFDIR|perm, nil, 0, 0)
}

// Parents adds the directories above name (relative, cleaned) that were
// not written yet, outermost first, mode 0755.
func (c *cpioWriter) Parents(name string) {
	var missing []string
	for d := path.Dir(name); d != "." && d != "/" && !c.dirs[d]; d = path.Dir(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		c.Dir(missing[i], 0o755)
	}
}
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, syscall.S_IFREG|perm, data, 0, 0)
}
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, syscall.S_IFLNK|0o777, []byte(target), 0, 0)
}
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, syscall.S_IFCHR|perm, nil, major, minor)
}

// Close writes the trailer and returns the first error.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}
