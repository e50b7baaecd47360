package standalone

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// A VM's id has no account on the machine (uidpool), yet libvirt looks up
// the user of every client that connects (getpwuid) and refuses one it
// cannot find. So a VM's processes get a passwd and group of their own, as a
// container image gives its processes theirs: in a mount namespace that
// only the pod's processes share, /etc/passwd and /etc/group are read-only
// bind mounts of copies of the host's files with the VM's user added.
// Nothing on the host changes, and the copies stay root's in the work dir.

// identity is a passwd and group file for one id, open.
type identity struct{ passwd, group *os.File }

// userName is the VM's user inside its pod: vl-<uid>, a name no account of
// the host has (the id has none, and the prefix is ours).
func userName(o ids) string { return "vl-" + strconv.Itoa(o.uid) }

// writeIdentity writes passwd and group below the directory sub of d (made
// 0755, root's) for user o, and opens them for enterIdentity.
func writeIdentity(d *safefs.Dir, sub string, o ids) (*identity, error) {
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil, err
	}
	hostGroup, err := os.ReadFile("/etc/group")
	if err != nil {
		return nil, err
	}
	name := userName(o)
	passwd := withLine(hostPasswd, fmt.Sprintf("%s:x:%d:%d:virtlauncher VM:/nonexistent:/usr/sbin/nologin", name, o.uid, o.gid))
	group := withLine(addMember(hostGroup, o.groups, name), fmt.Sprintf("%s:x:%d:", name, o.gid))
	if err := d.MkdirAll(sub, 0o755); err != nil {
		return nil, err
	}
	id := &identity{}
	for _, f := range []struct {
		name string
		data []byte
		into **os.File
	}{{"passwd", passwd, &id.passwd}, {"group", group, &id.group}} {
		rel := sub + "/" + f.name
		if err := d.WriteFile(rel, f.data, 0o644); err != nil {
			id.close()
			return nil, err
		}
		if *f.into, err = d.OpenRegular(rel); err != nil {
			id.close()
			return nil, err
		}
	}
	return id, nil
}

func (id *identity) close() {
	if id == nil {
		return
	}
	for _, f := range []*os.File{id.passwd, id.group} {
		if f != nil {
			f.Close()
		}
	}
}

// withLine appends line to a passwd or group file's content.
func withLine(file []byte, line string) []byte {
	out := bytes.TrimRight(file, "\n")
	out = append(out[:len(out):len(out)], '\n')
	return append(append(out, line...), '\n')
}

// addMember adds user to the member lists of the groups gids (kvm).
func addMember(file []byte, gids []uint32, user string) []byte {
	lines := bytes.Split(bytes.TrimRight(file, "\n"), []byte("\n"))
	for i, l := range lines {
		f := bytes.Split(l, []byte(":"))
		if len(f) != 4 {
			continue
		}
		gid, err := strconv.ParseUint(string(f[2]), 10, 32)
		if err != nil || !slices.Contains(gids, uint32(gid)) {
			continue
		}
		if len(f[3]) > 0 {
			f[3] = append(append(f[3][:len(f[3]):len(f[3])], ','), user...)
		} else {
			f[3] = []byte(user)
		}
		lines[i] = bytes.Join(f, []byte(":"))
	}
	return append(bytes.Join(lines, []byte("\n")), '\n')
}

// enter puts the calling thread, which must be locked to its goroutine
// and never unlocked again, into a new mount namespace, private (nothing
// mounted in it reaches the host), where /etc/passwd and /etc/group are
// the identity's files, read-only. Processes the thread starts inherit it.
func (id *identity) enter() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount namespace private: %w", err)
	}
	var errs []error
	for _, m := range []struct {
		f   *os.File
		dst string
	}{{id.passwd, "/etc/passwd"}, {id.group, "/etc/group"}} {
		// A mount's source must be seen through this namespace, so the
		// file is opened again by its path (root's all the way), never
		// following a link, and must be the very file written.
		fd, err := unix.Open(m.f.Name(), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("bind %s: %w", m.dst, err))
			continue
		}
		var was, now unix.Stat_t
		err = errors.Join(unix.Fstat(int(m.f.Fd()), &was), unix.Fstat(fd, &now))
		if err == nil && (was.Dev != now.Dev || was.Ino != now.Ino) {
			err = fmt.Errorf("%s is not the file written", m.f.Name())
		}
		if err == nil {
			err = unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), m.dst, "", unix.MS_BIND, "")
		}
		unix.Close(fd)
		if err != nil {
			errs = append(errs, fmt.Errorf("bind %s: %w", m.dst, err))
			continue
		}
		if err := unix.Mount("", m.dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			errs = append(errs, fmt.Errorf("make %s read-only: %w", m.dst, err))
		}
	}
	return errors.Join(errs...)
}

type ids struct {
	uid, gid int
	name     string // for messages
	// groups are supplementary groups: kvm, for /dev/kvm.
	groups []uint32
}

// leasedIDs is the VM's own user: the leased id as uid and gid, and the
// kvm group when the machine has one (QEMU opens /dev/kvm, 0660
// root:kvm).
func leasedIDs(l *uidpool.Lease) ids {
	o := ids{uid: int(l.ID), gid: int(l.ID), name: fmt.Sprintf("uid %d", l.ID)}
	if g, err := user.LookupGroup("kvm"); err == nil {
		if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			o.groups = []uint32{uint32(gid)}
		}
	}
	return o
}

// credential runs a process as o.
func (o ids) credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: o.groups}
}

func lookupUser(name string) (ids, error) {
	uid, gid, err := LookupUser(name)
	return ids{uid: uid, gid: gid, name: name}, err
}

// LookupUser returns the ids of the unprivileged user that runs launchers,
// their libvirt daemons and QEMU; root is refused.
func LookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q (runs the launcher and QEMU; scripts/install-deps creates it): %w", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, fmt.Errorf("user %q is root: launchers run unprivileged", name)
	}
	return uid, gid, nil
}
