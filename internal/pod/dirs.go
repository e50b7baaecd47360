package pod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// Dirs are a launcher pod's directories (layout.PodDirs) below one
// directory, the pod's own, which stands in for the volumes a cluster
// would mount. Root makes them through the directory's descriptor, fills
// them (images, links, network caches) while they are still its own, and
// then hands them to the pod's user.
type Dirs struct {
	root *safefs.Dir
	tops []string // root's entries that hold pod directories
}

// MakeDirs makes the pod directories of l below root, root's and
// owner-only as the launcher would make them itself (virt-handler is root,
// and every other reader, QEMU and the daemons, runs as the pod's user),
// never following a link; l must lie below root (layout.Under(root.Path())
// or a layout of the same shape). root stays the caller's to close.
func MakeDirs(root *safefs.Dir, l layout.Layout, imageVolume bool) (*Dirs, error) {
	d := &Dirs{root: root}
	for _, p := range l.PodDirs(imageVolume) {
		rel, err := filepath.Rel(root.Path(), p)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("pod directory %s is not below %s", p, root.Path())
		}
		if err := root.MkdirAll(rel, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
		if top, _, _ := strings.Cut(rel, "/"); !slices.Contains(d.tops, top) {
			d.tops = append(d.tops, top)
		}
	}
	return d, nil
}

// HandOver gives the pod's user uid:gid the pod directories and all that
// root put into them (owners changed through descriptors, links
// themselves and never their targets: safefs). The pod's own directory
// stays root's, mode 0750 with the user's group: the user reaches the
// pod directories but can neither add nor replace anything root keeps
// beside them (the launcher's log, resolv.conf, binaries, the network's
// restore state). Root writes nothing below the pod directories after
// this: the user could have replaced any of it with a link.
func (d *Dirs) HandOver(uid, gid int) error {
	for _, top := range d.tops {
		if err := d.root.ChownTree(top, uid, gid); err != nil {
			return fmt.Errorf("hand %s to uid %d: %w", d.root.Join(top), uid, err)
		}
	}
	if err := d.root.Chown(0, gid); err != nil {
		return fmt.Errorf("hand over %s: %w", d.root.Path(), err)
	}
	if err := d.root.Chmod(0o750); err != nil {
		return fmt.Errorf("hand over %s: %w", d.root.Path(), err)
	}
	return nil
}

// Remove undoes MakeDirs and HandOver, for a pod whose processes are gone
// or never started: the pod's directory is root's and 0700 again, so that
// nothing below it changes meanwhile, and the pod directories go with all
// in them (os.RemoveAll follows no link below them).
func (d *Dirs) Remove() error {
	var errs []error
	if err := d.root.Chown(0, 0); err != nil {
		errs = append(errs, fmt.Errorf("take back %s: %w", d.root.Path(), err))
	}
	if err := d.root.Chmod(0o700); err != nil {
		errs = append(errs, fmt.Errorf("take back %s: %w", d.root.Path(), err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, top := range d.tops {
		if err := os.RemoveAll(d.root.Join(top)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d.root.Join(top), err))
		}
	}
	return errors.Join(errs...)
}
