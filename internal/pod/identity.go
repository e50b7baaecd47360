package pod

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// A VM's id has no account on the machine (uidpool), yet libvirt looks up
// the user of every client that connects (getpwuid) and refuses one it
// cannot find. So a VM's processes get a passwd and group of their own, as a
// container image gives its processes theirs: in a mount namespace that
// only the pod's processes share, /etc/passwd and /etc/group are read-only
// bind mounts of copies of the host's files with the VM's user added.
// Nothing on the host changes, and the copies stay root's in the work dir.

// Identity is a passwd and group file for one id, open.
type Identity struct{ passwd, group *os.File }

// UserName is the user of id inside its pod: vl-<id>, a name no account
// of the host has (the id has none, and the prefix is ours).
func UserName(id int) string { return "vl-" + strconv.Itoa(id) }

// WriteIdentity writes passwd and group below the directory sub of d (made
// 0755, root's) for user uid, whose primary group is gid and who is added
// to the groups gids, and opens them for Enter.
func WriteIdentity(d *safefs.Dir, sub string, uid, gid int, gids []uint32) (*Identity, error) {
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil, err
	}
	hostGroup, err := os.ReadFile("/etc/group")
	if err != nil {
		return nil, err
	}
	name := UserName(uid)
	passwd := withLine(hostPasswd, fmt.Sprintf("%s:x:%d:%d:virtlauncher VM:/nonexistent:/usr/sbin/nologin", name, uid, gid))
	group := withLine(addMember(hostGroup, gids, name), fmt.Sprintf("%s:x:%d:", name, gid))
	if err := d.MkdirAll(sub, 0o755); err != nil {
		return nil, err
	}
	id := &Identity{}
	for _, f := range []struct {
		name string
		data []byte
		into **os.File
	}{{"passwd", passwd, &id.passwd}, {"group", group, &id.group}} {
		rel := sub + "/" + f.name
		if err := d.WriteFile(rel, f.data, 0o644); err != nil {
			id.Close()
			return nil, err
		}
		if *f.into, err = d.OpenRegular(rel); err != nil {
			id.Close()
			return nil, err
		}
	}
	return id, nil
}

// Close closes the files; the mounts made from them stay.
func (id *Identity) Close() {
	if id == nil {
		return
	}
	for _, f := range []*os.File{id.passwd, id.group} {
		if f != nil {
			f.Close()
		}
	}
}

// removeIdentity removes what WriteIdentity wrote below IdentityDir of d,
// as far as it got.
func removeIdentity(d *safefs.Dir) error {
	var errs []error
	for _, name := range []string{IdentityDir + "/passwd", IdentityDir + "/group", IdentityDir} {
		if err := d.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// Enter puts the calling thread, which must be locked to its goroutine
// and never unlocked again, into a new mount namespace, private (nothing
// mounted in it reaches the host), where /etc/passwd and /etc/group are
// the identity's files, read-only. Processes the thread starts inherit it
// (Start runs it on the starting thread).
func (id *Identity) Enter() error {
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
