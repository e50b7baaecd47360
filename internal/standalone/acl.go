package standalone

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

// grant is an ACL entry vlctl added to a file for one run.
type grant struct {
	f      *os.File
	before []byte      // the ACL xattr before, nil when there was none
	mode   os.FileMode // the permission bits before
	after  []byte      // what vlctl set
}

// grantAccess gives uid read and write access to the open file f by an ACL
// entry. It returns nil, nil when nothing had to change.
func grantAccess(f *os.File, uid uint32, perm uint16) (*grant, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	before, err := getACL(f)
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
	if err := unix.Fsetxattr(int(f.Fd()), aclXattr, after, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("the file system has no POSIX ACLs to grant access with: %w", err)
		}
		return nil, fmt.Errorf("set ACL: %w", err)
	}
	return &grant{f: f, before: before, mode: st.Mode().Perm(), after: after}, nil
}

// undo takes the entry out again, unless someone changed the ACL since: then
// it is theirs and stays. It reports whether the file is as it was.
func (g *grant) undo() (bool, error) {
	now, err := getACL(g.f)
	if err != nil {
		return false, err
	}
	if !bytes.Equal(now, g.after) {
		return false, nil
	}
	if g.before != nil {
		return true, unix.Fsetxattr(int(g.f.Fd()), aclXattr, g.before, 0)
	}
	if err := unix.Fremovexattr(int(g.f.Fd()), aclXattr); err != nil {
		return false, err
	}
	// Setting the ACL put the mask into the mode's group bits; removing
	// it does not put them back.
	return true, g.f.Chmod(g.mode | modeSpecial(g.f))
}

func modeSpecial(f *os.File) os.FileMode {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Mode() & (os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

// getACL reads the ACL xattr of f; nil when there is none.
func getACL(f *os.File) ([]byte, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Fgetxattr(int(f.Fd()), aclXattr, buf)
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
