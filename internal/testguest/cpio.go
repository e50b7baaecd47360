package testguest

import (
	"fmt"
	"io"
	"syscall"
)

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks as
// an initramfs: a 110-byte ASCII header per entry, the name, the data, each
// padded to 4 bytes, and a TRAILER!!! entry at the end.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
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
func (c *cpioWriter) Dir(name string, perm uint32) { c.entry(name, syscall.S_IFDIR|perm, nil, 0, 0) }
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
