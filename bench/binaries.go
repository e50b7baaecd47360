package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// binary describes one executable the suite ran.
type binary struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	Static bool   `json:"static"`
	SHA256 string `json:"sha256"`
}

// snapshotBinaries copies the launcher binaries out of src into a directory
// of the suite's own: bin/ is shared with whoever else builds in this
// checkout, and a binary replaced halfway through would mix two builds in
// one set of figures.
func snapshotBinaries(src, workRoot string) (dir string, bins []binary, err error) {
	dir, err = os.MkdirTemp(workRoot, "bin-")
	if err != nil {
		return "", nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, nil, err
	}
	for _, name := range []string{"virt-launcher-monitor", "virt-launcher", "vlctl"} {
		b, err := copyExecutable(filepath.Join(src, name), filepath.Join(dir, name))
		if err != nil {
			return dir, nil, fmt.Errorf("%w (run make build)", err)
		}
		bins = append(bins, b)
	}
	return dir, bins, nil
}

func copyExecutable(src, dst string) (binary, error) {
	in, err := os.Open(src)
	if err != nil {
		return binary{}, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return binary{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return binary{}, fmt.Errorf("copy %s: %w", src, err)
	}
	b := binary{Name: filepath.Base(src), Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	// A static binary has no program interpreter (PT_INTERP).
	if f, err := elf.Open(dst); err == nil {
		b.Static = true
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b.Static = false
			}
		}
		f.Close()
	}
	return b, nil
}
