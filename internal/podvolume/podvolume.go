// Package podvolume reads the volumes KubeVirt's pod mounts for the
// launcher (secrets, config maps, downward API): the disks package makes
// ISOs of them, the guest agent propagates access credentials from them.
package podvolume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File is one file of a volume: a slash-separated path relative to the
// volume's root, its content and its permission bits.
type File struct {
	Name string
	Data []byte
	Mode fs.FileMode
}

// ReadDir reads the files of a volume directory as the pod mounts it
// (a secret, a config map, ...), below it too. Kubernetes' atomic writer keeps its bookkeeping in entries named
// "..something" (the real files are symlinks into "..data"); those are
// skipped and symlinks are followed, so the ISO holds the keys as files.
func ReadDir(dir string) ([]File, error) {
	var out []File
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > 8 {
			return fmt.Errorf("%s: directories nested too deep (symlink loop?)", filepath.Join(dir, rel))
		}
		entries, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			r := path.Join(rel, e.Name())
			full := filepath.Join(dir, filepath.FromSlash(r))
			fi, err := os.Stat(full) // follows symlinks
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir():
				if err := walk(r, depth+1); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				data, err := os.ReadFile(full)
				if err != nil {
					return err
				}
				out = append(out, File{Name: r, Data: data, Mode: fi.Mode().Perm()})
			default:
				return fmt.Errorf("%s is neither a file nor a directory", full)
			}
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("source directory: %w", err)
		}
		return nil, err
	}
	return out, nil
}
