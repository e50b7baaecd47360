// Package userstorage is the storage of the user's that a standalone VM
// uses, and what vlctl does to it: which files and devices a run needs
// (Plan: the manifest's hostDisks, PVCs and DataVolumes, mapped with
// --volume or kept in the volume store), opening and creating them
// without following a path the VM's user could change (Spec.Open), the
// POSIX ACL entry that gives the VM's user access to one for a run, set
// and taken back through an open descriptor (GrantAccess), what one run
// holds (Held: its disks, hotplugged volumes and pulled images), and the
// volume store (Store, RemoveVolumes).
package userstorage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// QEMU runs as the launcher's user, which does not own the user's disk
// files. Rather than chown a file the user did not ask us to change, vlctl
// adds one POSIX ACL entry (user:<launcher uid>:rw) for the run and takes it
// out again at the end: owner, group and other permissions stay as they
// were. Everything is done on an open file descriptor, never by path, so a
// path swapped during the run cannot redirect root's changes.

const aclXattr = "system.posix_acl_access"

// POSIX ACL xattr encoding (linux/posix_acl_xattr.h).
const (
	aclVersion  = 2
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclNoID     = 0xffffffff
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

func decodeACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, errors.New("malformed POSIX ACL")
	}
	var out []aclEntry
	for p := b[4:]; len(p) > 0; p = p[8:] {
		out = append(out, aclEntry{binary.LittleEndian.Uint16(p), binary.LittleEndian.Uint16(p[2:]), binary.LittleEndian.Uint32(p[4:])})
	}
	return out, nil
}

func encodeACL(es []aclEntry) []byte {
	sort.Slice(es, func(i, j int) bool {
		if es[i].tag != es[j].tag {
			return es[i].tag < es[j].tag
		}
		return es[i].id < es[j].id
	})
	b := make([]byte, 4, 4+8*len(es))
	binary.LittleEndian.PutUint32(b, aclVersion)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// withUser returns the ACL es (the mode's three entries when es is empty)
// with user uid granted perm (r=4, w=2) on top of what it had, and a mask
// that lets the grant through. The owning group's own entry is left as it
// is, so the group gains nothing even though `ls -l` then shows the mask in
// the group bits.
func withUser(es []aclEntry, mode os.FileMode, uid uint32, perm uint16) []aclEntry {
	if len(es) == 0 {
		m := uint16(mode.Perm())
		es = []aclEntry{{aclUserObj, m >> 6 & 7, aclNoID}, {aclGroupObj, m >> 3 & 7, aclNoID}, {aclOther, m & 7, aclNoID}}
	}
	out := make([]aclEntry, 0, len(es)+2)
	found := false
	var groupObj uint16
	var mask *aclEntry
	for _, e := range es {
		switch e.tag {
		case aclUser:
			if e.id == uid {
				e.perm |= perm
				found = true
			}
		case aclGroupObj:
			groupObj = e.perm
		}
		out = append(out, e)
	}
	if !found {
		out = append(out, aclEntry{aclUser, perm, uid})
	}
	for i := range out {
		if out[i].tag == aclMask {
			mask = &out[i]
		}
	}
	if mask == nil {
		// A new mask must not take anything from the named entries and
		// the owning group that were there: it is their union.
		m := groupObj
		for _, e := range out {
			if e.tag == aclUser || e.tag == aclGroup {
				m |= e.perm
			}
		}
		out = append(out, aclEntry{aclMask, m, aclNoID})
	} else {
		mask.perm |= perm
	}
	return out
}

// Grant is an ACL entry vlctl added to a file for one run.
type Grant struct {
	f *os.File
	// Before is the ACL xattr before, nil when there was none; After is
	// what vlctl set. A run's record keeps both (vlctl gc).
	Before, After []byte
}

// Recorded is the grant a run recorded (Before, After), on the file f
// opened again: vlctl gc undoes it.
func Recorded(f *os.File, before, after []byte) *Grant {
	return &Grant{f: f, Before: before, After: after}
}

// File is the file the entry is on.
func (g *Grant) File() *os.File { return g.f }

// GrantAccess gives uid read and write access to the open file f by an ACL
// entry. It returns nil, nil when nothing had to change.
func GrantAccess(f *os.File, uid uint32, perm uint16) (*Grant, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	before, err := ACL(f)
	if err != nil {
		return nil, err
	}
	var es []aclEntry
	if before != nil {
		if es, err = decodeACL(before); err != nil {
			return nil, err
		}
	}
	after := encodeACL(withUser(es, st.Mode(), uid, perm))
	if bytes.Equal(after, before) {
		return nil, nil
	}
	if err := unix.Setxattr(fdPath(f), aclXattr, after, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("the file system has no POSIX ACLs to grant access with: %w", err)
		}
		return nil, fmt.Errorf("set ACL: %w", err)
	}
	return &Grant{f: f, Before: before, After: after}, nil
}

// Undo takes the run's own entry (user uid, as GrantAccess set it) out of
// the file's ACL as it is now, and nothing else: entries added since (another
// run's grant to the same file, the user's own) stay. Restoring the whole
// ACL as it was before would take a later run's entry away while that run
// still uses the file, and that run's own undo would then put this run's
// entry back for good, left to whoever gets the uid next. When the entry is
// not what GrantAccess set any more, it is someone else's now and stays.
// It reports whether the entry was taken out.
func (g *Grant) Undo() (bool, error) {
	nowRaw, err := ACL(g.f)
	if err != nil || nowRaw == nil {
		return false, err
	}
	now, err := decodeACL(nowRaw)
	if err != nil {
		return false, err
	}
	var before []aclEntry
	if g.Before != nil {
		if before, err = decodeACL(g.Before); err != nil {
			return false, err
		}
	}
	after, err := decodeACL(g.After)
	if err != nil {
		return false, err
	}
	es, ok := withoutGrant(now, before, after)
	if !ok {
		return false, nil
	}
	if mode, ok := minimalMode(es); ok {
		// No named entry is left: back to permission bits alone, no
		// ACL, and the group bits the mask had taken.
		if err := unix.Removexattr(fdPath(g.f), aclXattr); err != nil {
			return false, err
		}
		return true, os.Chmod(fdPath(g.f), mode|modeSpecial(g.f))
	}
	return true, unix.Setxattr(fdPath(g.f), aclXattr, encodeACL(es), 0)
}

// withoutGrant is the ACL now with the one named user entry that after
// added or widened over before put back as it was before, and the mask
// narrowed to what it was before plus what the entries added since need.
// ok is false when that entry is no longer what after set.
func withoutGrant(now, before, after []aclEntry) (_ []aclEntry, ok bool) {
	find := func(es []aclEntry, tag uint16, id uint32) *aclEntry {
		for i := range es {
			if es[i].tag == tag && es[i].id == id {
				return &es[i]
			}
		}
		return nil
	}
	// The entry the grant set: the named user entry of after that before
	// lacked or had with less.
	var mine *aclEntry
	for i := range after {
		e := after[i]
		if e.tag != aclUser {
			continue
		}
		if b := find(before, aclUser, e.id); b == nil || b.perm != e.perm {
			mine = &after[i]
			break
		}
	}
	if mine == nil {
		return nil, false
	}
	cur := find(now, aclUser, mine.id)
	if cur == nil || cur.perm != mine.perm {
		return nil, false
	}
	out := make([]aclEntry, 0, len(now))
	var mask *aclEntry
	for _, e := range now {
		if e.tag == aclUser && e.id == mine.id {
			b := find(before, aclUser, e.id)
			if b == nil {
				continue
			}
			e.perm = b.perm
		}
		out = append(out, e)
	}
	for i := range out {
		if out[i].tag == aclMask {
			mask = &out[i]
		}
	}
	if mask != nil {
		// What it was before (none: the owning group's), widened for
		// the named entries that came since and are still there.
		m := uint16(0)
		if b := find(before, aclMask, aclNoID); b != nil {
			m = b.perm
		} else if gobj := find(out, aclGroupObj, aclNoID); gobj != nil {
			m = gobj.perm
		}
		for _, e := range out {
			if (e.tag == aclUser || e.tag == aclGroup) && find(before, e.tag, e.id) == nil {
				m |= e.perm
			}
		}
		mask.perm = m
	}
	return out, true
}

// minimalMode is the permission bits that say what es says, when es has
// no named entry (only the owner, owning group, other and mask entries):
// the owning group gets what its entry and the mask both allow.
func minimalMode(es []aclEntry) (os.FileMode, bool) {
	var user, group, other uint16
	mask := uint16(7)
	for _, e := range es {
		switch e.tag {
		case aclUser, aclGroup:
			return 0, false
		case aclUserObj:
			user = e.perm
		case aclGroupObj:
			group = e.perm
		case aclOther:
			other = e.perm
		case aclMask:
			mask = e.perm
		}
	}
	return os.FileMode(user<<6 | (group&mask)<<3 | other), true
}

func modeSpecial(f *os.File) os.FileMode {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Mode() & (os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

// fdPath names the file f is open on through its descriptor, so that its
// attributes are read and set on that very file even when f is an O_PATH
// descriptor (a VFIO group's node, which a real open would claim), where
// the f*xattr calls fail.
func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// ACL reads the ACL xattr of f; nil when there is none.
func ACL(f *os.File) ([]byte, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Getxattr(fdPath(f), aclXattr, buf)
		switch {
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return nil, fmt.Errorf("read ACL: %w", err)
		}
		return append([]byte(nil), buf[:n]...), nil
	}
}

// UserPerm is the permission the ACL of f gives the user uid by a named
// entry; ok is false when it has none.
func UserPerm(f *os.File, uid uint32) (perm uint16, ok bool, err error) {
	raw, err := ACL(f)
	if err != nil || raw == nil {
		return 0, false, err
	}
	es, err := decodeACL(raw)
	if err != nil {
		return 0, false, err
	}
	for _, e := range es {
		if e.tag == aclUser && e.id == uid {
			return e.perm, true, nil
		}
	}
	return 0, false, nil
}
