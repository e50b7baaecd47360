package userstorage

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// Held is the user storage one run (one boot of `vlctl run`) holds open
// for its VM's user: the manifest's disks, the volumes plugged in while
// the guest runs, and the pulled images it reads, each with the ACL entry
// the run added. Release gives all of it back.
type Held struct {
	user   vmuser.User
	status io.Writer // where what was created or left is told
	disks  []*Disk   // the manifest's and --volume's
	// hot are the user's files and devices plugged in while the guest
	// runs (vlctl addvolume), in the VMI as hotplugged volumes.
	hot []*Disk
	// images are the pulled image files, with read access (OpenImages).
	images []*Disk
}

// NewHeld holds nothing yet for u; status receives the notes of what was
// created, and of an ACL left as it was found at the end.
func NewHeld(u vmuser.User, status io.Writer) *Held {
	return &Held{user: u, status: status}
}

func (h *Held) logf(format string, a ...any) { fmt.Fprintf(h.status, format, a...) }

// Open opens (and where asked creates) the user's storage specs (Plan's,
// for the VMI v); on failure nothing is left changed.
func (h *Held) Open(v *v1.VirtualMachineInstance, specs []Spec) error {
	// Everything that can be seen without changing anything first, so
	// a bad mapping creates nothing.
	for _, s := range specs {
		if _, err := s.check(h.user); err != nil {
			return err
		}
	}
	// What was created is told once the run has all its disks.
	var msgs strings.Builder
	note := func(format string, a ...any) { fmt.Fprintf(&msgs, format, a...) }
	for _, s := range specs {
		d, err := s.Open(h.user, note)
		if err != nil {
			h.releaseDisks(false)
			return err
		}
		h.disks = append(h.disks, d)
	}
	if d := h.blankBootDisk(v); d != nil {
		fmt.Fprintf(&msgs, "vlctl: warning: the boot disk %s is %s, created blank by this run: nothing boots from it until an image is written to it\n", d.volume, d.path)
	}
	fmt.Fprint(h.status, msgs.String())
	return nil
}

// blankBootDisk is the user disk the guest of v boots from (lowest
// bootOrder, else the first disk) when this run created it empty.
func (h *Held) blankBootDisk(v *v1.VirtualMachineInstance) *Disk {
	disks := v.Spec.Domain.Devices.Disks
	if len(disks) == 0 {
		return nil
	}
	boot := disks[0]
	var best uint
	for _, d := range disks {
		if d.BootOrder != nil && (best == 0 || *d.BootOrder < best) {
			best, boot = *d.BootOrder, d
		}
	}
	for _, d := range h.disks {
		if d.volume == boot.Name && d.created {
			return d
		}
	}
	return nil
}

// Link puts a symlink to each of the manifest's disks where the launcher
// looks for it in layout l. It runs before the tree is handed to the
// launcher's user, through the work dir's descriptor dir; rel makes a path
// of l relative to dir.
func (h *Held) Link(dir *safefs.Dir, l layout.Layout, rel func(string) (string, error)) error {
	for _, d := range h.disks {
		dst, err := d.Link(l)
		if err == nil {
			dst, err = rel(dst)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", d.field, err)
		}
		if err := dir.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return fmt.Errorf("%s: %w", d.field, err)
		}
		if err := dir.Symlink(d.real, dst); err != nil {
			return fmt.Errorf("%s %s: link it for the launcher: %w", d.field, d.path, err)
		}
	}
	return nil
}

// OpenImages gives the VM's user read access to the pulled files pulled
// names (by reference, a kernelBoot file's with a NUL before its file
// name). The image cache is root's alone (registrydisk: images may come
// with root's registry credentials), so, as for the user's own disks, the
// run adds an ACL entry of its own (user:<the VM's uid>:r) to each file,
// which the run record keeps for vlctl gc and Release takes out; the other
// runs using the same image have their own.
func (h *Held) OpenImages(pulled map[string]string) error {
	seen := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(pulled)) {
		p := pulled[key]
		if seen[p] {
			continue
		}
		seen[p] = true
		field := "image " + strings.ReplaceAll(key, "\x00", " ")
		f, err := openNoFollow(p)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		d := &Disk{Spec: Spec{field: field, path: p}, real: p, f: f}
		h.images = append(h.images, d)
		if d.grant, err = GrantAccess(f, uint32(h.user.UID), 4); err != nil {
			return fmt.Errorf("%s: give user %s (QEMU) read access to %s: %w", field, h.user.Name, p, err)
		}
		if !h.user.Test("-r", p) {
			dir := h.user.FirstClosedDir(p)
			return fmt.Errorf("%s: QEMU runs as user %s, which cannot reach %s: directory %s is closed to it (give --image-cache elsewhere, or: chmod o+x %s)", field, h.user.Name, p, dir, dir)
		}
	}
	return nil
}

// AddHot holds d, plugged into the running guest.
func (h *Held) AddHot(d *Disk) { h.hot = append(h.hot, d) }

// Hot is the plugged-in volume of that name, nil when none.
func (h *Held) Hot(volume string) *Disk {
	if i := slices.IndexFunc(h.hot, func(d *Disk) bool { return d.volume == volume }); i >= 0 {
		return h.hot[i]
	}
	return nil
}

// DropHot lets go of d, unplugged (its Release is the caller's).
func (h *Held) DropHot(d *Disk) {
	h.hot = slices.DeleteFunc(h.hot, func(x *Disk) bool { return x == d })
}

// Grants are the ACL entries the run holds, as its record keeps them for
// vlctl gc.
func (h *Held) Grants() []runrecord.Grant {
	var out []runrecord.Grant
	for _, d := range slices.Concat(h.disks, h.hot, h.images) {
		if g, ok := d.recordedGrant(); ok {
			out = append(out, g)
		}
	}
	return out
}

// Release takes back the access granted and, when the guest never ran
// (started false), removes the files this run created.
func (h *Held) Release(started bool) {
	h.releaseDisks(started)
	for _, d := range h.images {
		d.Release(h.logf)
	}
	h.images = nil
}

func (h *Held) releaseDisks(started bool) {
	for _, d := range h.hot {
		d.Release(h.logf)
	}
	h.hot = nil
	for _, d := range h.disks {
		if !started {
			d.RemoveCreated()
		}
		d.Release(h.logf)
	}
	h.disks = nil
}

// UserPaths rewrites the launcher's view of the user's disks (links in
// the work dir of layout l) back to the paths the user gave, in an error
// for the user.
func (h *Held) UserPaths(err error, l layout.Layout) error {
	if err == nil || len(h.disks)+len(h.hot) == 0 {
		return err
	}
	var pairs []string
	for _, d := range slices.Concat(h.disks, h.hot) {
		if dst, lerr := d.Link(l); lerr == nil {
			pairs = append(pairs, dst, d.path+" ("+d.field+")")
		}
	}
	return errors.New(strings.NewReplacer(pairs...).Replace(err.Error()))
}
