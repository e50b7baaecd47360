package testguest

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// xenElfNotePhys32Entry is the ELF note ("Xen", type 18) that marks a
// kernel QEMU can start directly at its 32-bit PVH entry point.
const xenElfNotePhys32Entry = 18

var errNoPVH = errors.New("kernel cannot be booted through PVH")

// extractPVHKernel writes the uncompressed kernel (vmlinux) inside the
// bzImage src to dst, if it is xz-compressed and has a PVH entry point.
//
// Why: under TCG the kernel's own decompression of an xz bzImage costs
// several seconds of emulated CPU on every boot (about 10 s of a 25 s boot
// on a loaded two-core machine). QEMU loads a PVH ELF kernel itself, so the
// guest starts straight in the kernel. Returns errNoPVH when src does not
// qualify; the caller then uses src as it is.
func extractPVHKernel(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	magic := []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	off := bytes.Index(data, magic)
	if off < 0 {
		return errNoPVH
	}
	// The kernel's xz stream uses the x86 BCJ filter, which Go's xz
	// packages lack; Debian's xz (xz-utils) has it. Without xz, the
	// compressed kernel is used.
	xzBin, err := exec.LookPath("xz")
	if err != nil {
		return errNoPVH
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// The payload is one xz stream followed by padding and more data.
	cmd := exec.Command(xzBin, "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(data[off:])
	cmd.Stdout = f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("decompress %s: %w: %s", src, err, bytes.TrimSpace(stderr.Bytes()))
	}
	ok, err := hasPVHNote(dst)
	if err != nil || !ok {
		os.Remove(dst)
		if err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
		return errNoPVH
	}
	return nil
}

// hasPVHNote reports whether the ELF file has the Xen PHYS32_ENTRY note.
func hasPVHNote(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return false, err
		}
		for len(b) >= 12 {
			namesz := binary.LittleEndian.Uint32(b[0:4])
			descsz := binary.LittleEndian.Uint32(b[4:8])
			typ := binary.LittleEndian.Uint32(b[8:12])
			b = b[12:]
			nameLen := int(namesz+3) &^ 3
			descLen := int(descsz+3) &^ 3
			if nameLen+descLen > len(b) {
				break
			}
			name := string(bytes.TrimRight(b[:namesz], "\x00"))
			if name == "Xen" && typ == xenElfNotePhys32Entry {
				return true, nil
			}
			b = b[nameLen+descLen:]
		}
	}
	return false, nil
}
