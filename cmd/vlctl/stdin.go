package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/manifest"
)

// stdinManifest makes the standard input, when a manifest file is "-",
// a sealed in-memory file of what it held (at most manifest.MaxBytes):
// the manifest is read from it wherever vlctl loads it (a background
// run's check, then its supervisor, whose standard input it becomes),
// always the same bytes, and it is no terminal any more.
func stdinManifest(files []string) error {
	n := 0
	for _, f := range files {
		if f == manifest.Stdin {
			n++
		}
	}
	switch {
	case n == 0:
		return nil
	case n > 1:
		return errors.New("-f -: the standard input can be given once")
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, manifest.MaxBytes+1))
	if err != nil {
		return fmt.Errorf("-f -: read the standard input: %w", err)
	}
	if len(data) > manifest.MaxBytes {
		return fmt.Errorf("-f -: the standard input holds more than the %d bytes allowed", manifest.MaxBytes)
	}
	fd, err := unix.MemfdCreate("vlctl-manifest", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("-f -: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, data); err != nil && len(data) > 0 {
		return fmt.Errorf("-f -: %w", err)
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("-f -: seal: %w", err)
	}
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return fmt.Errorf("-f -: %w", err)
	}
	return nil
}

// runFiles are the manifest files of a run: FILE and each -f.
func runFiles(file string, files []string) []string {
	if file == "" {
		return files
	}
	return append(slices.Clone(files), file)
}
