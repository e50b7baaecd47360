package userstorage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// StoreNamespaces are the namespaces whose directory in the volume store
// has volumes of a VM called name (vlctl rm NAME finds the VM's
// namespace from them too).
func StoreNamespaces(store, name string) ([]string, error) {
	if _, err := os.Lstat(store); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, nil // no VM of the store has that name
	}
	d, err := openStore(store)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := os.ReadDir(d.Path())
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if sub, err := d.OpenDir(e.Name() + "/" + name); err == nil {
			sub.Close()
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemoveVolumes removes the VM namespace/name's volumes from the volume
// store: its directory <store>/<namespace>/<name>/ and what is in it (the
// DataVolumes' files and what an import killed midway left), then the
// namespace's directory if it is empty. Nothing is removed while a live
// run's record names one of the files, or an import into the directory
// goes on; the caller has made sure no run of the VM goes on. It
// returns the files removed; a VM with no volumes there has none.
func RemoveVolumes(store, recordDir, namespace, name string) ([]string, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	if _, err := os.Lstat(store); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	d, err := openStore(store)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	rel := namespace + "/" + name
	vd, err := d.OpenDir(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	defer vd.Close()
	ents, err := os.ReadDir(vd.Path())
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	files := map[string]string{}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			return nil, fmt.Errorf("volume store: %s is a directory, which vlctl does not make there; remove it yourself", vd.Join(e.Name()))
		}
		files[vd.Join(e.Name())] = "volume"
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if err := storeInUse(recordDir, files); err != nil {
		return nil, err
	}
	var removed []string
	for _, n := range names {
		if strings.Contains(n, ".import-") {
			if err := importGoesOn(vd, n); err != nil {
				return removed, err
			}
		}
		if err := vd.Remove(n); err != nil {
			return removed, fmt.Errorf("volume store: %w", err)
		}
		removed = append(removed, vd.Join(n))
	}
	if err := d.Remove(rel); err != nil {
		return removed, fmt.Errorf("volume store: %w", err)
	}
	// The namespace's directory goes with its last VM.
	if err := d.Remove(namespace); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return removed, fmt.Errorf("volume store: %w", err)
	}
	return removed, nil
}

// importGoesOn refuses the temporary file of an import that still holds
// its lock.
func importGoesOn(d *safefs.Dir, name string) error {
	f, err := d.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("volume store: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("volume store: %s: an import into it goes on; try again once it ended", filepath.Join(d.Path(), name))
	}
	return nil
}
