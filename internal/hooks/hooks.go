// Package hooks is the launcher's side of KubeVirt's hook sidecars
// (KubeVirt's pkg/hooks): containers in the launcher pod, requested with
// the VMI annotation hooks.kubevirt.io/hookSidecars, that may change the
// domain XML before it is defined and the cloud-init data before its ISO
// is written.
//
// virt-controller mounts one emptyDir at /var/run/kubevirt-hooks in the
// compute container and its subdirectory hook-sidecar-<i> at the same path
// in sidecar container i, and passes --hook-sidecars <count>. Each sidecar
// listens on a unix socket in its directory. At start-up, before the
// libvirt daemon, the launcher waits for that many sockets (Collect,
// looking every 300 ms, for up to --qemu-timeout), asks each one Info
// (name, hook points, Callbacks versions) and picks the newest version
// both sides speak: v1alpha3, then v1alpha2, then v1alpha1. A socket that
// does not accept connections yet is tried again; one whose Info fails or
// that offers no known version is a fatal error, as in KubeVirt.
//
// The callbacks then run, each with a one-minute deadline, over a fresh
// connection:
//   - PreCloudInitIso (v1alpha2, v1alpha3), while the disks are prepared:
//     only the first subscribed sidecar is called, as in KubeVirt v1.9.
//   - OnDefineDomain (every version), just before the domain is defined:
//     every subscribed sidecar in turn, each given the previous one's XML.
//   - Shutdown (v1alpha3), once QEMU is gone.
//
// Sidecars run in discovery order: directory name, then socket name,
// within one look, and a sidecar found in a later look after those found
// earlier. HookPoint.priority is not used for ordering, as in KubeVirt
// v1.9 (kubevirt/kubevirt#11940). An error from any callback fails the
// operation that called it (the Sync), naming the sidecar.
//
// The sidecars' directories are writable by the sidecars: each one is
// opened without following symbolic links and kept open, sockets are
// reached through that open directory (/proc/self/fd/N/name), and entries
// that are not sockets (symbolic links included) are ignored.
package hooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	hooksinfo "github.com/virtlauncher/virtlauncher/api/hooks/info"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// Hook point names (KubeVirt's pkg/hooks/info).
const (
	PointOnDefineDomain  = "OnDefineDomain"
	PointPreCloudInitIso = "PreCloudInitIso"
	PointShutdown        = "Shutdown"
)

// Callbacks versions.
const (
	V1alpha1 = "v1alpha1"
	V1alpha2 = "v1alpha2"
	V1alpha3 = "v1alpha3"
)

// Versions are the Callbacks versions this launcher speaks, preferred
// first (KubeVirt v1.9's order).
var Versions = []string{V1alpha3, V1alpha2, V1alpha1}

// Deadlines, KubeVirt's (pkg/hooks/manager.go, pkg/util/net/grpc).
const (
	PollInterval   = 300 * time.Millisecond // between looks for sockets
	ConnectTimeout = 2 * time.Second        // to establish a connection
	InfoTimeout    = time.Second            // for Info
	CallTimeout    = time.Minute            // for each callback
)

// Sidecar is one collected hook sidecar.
type Sidecar struct {
	Socket  string   // the socket's path, for messages
	Name    string   // what Info called it
	Version string   // the Callbacks version chosen
	Points  []string // subscribed hook points, in Info's order

	dir  *os.File // the socket's directory, held open
	base string   // the socket's name in dir
}

func (s *Sidecar) String() string {
	return fmt.Sprintf("hook sidecar %q (%s, %s)", s.Name, s.Socket, s.Version)
}

// Manager holds the collected sidecars. A nil or empty Manager has no
// sidecars: its callbacks change nothing.
type Manager struct {
	log      *slog.Logger
	sidecars []*Sidecar // discovery order
}

// Sidecars are the collected sidecars in discovery order.
func (m *Manager) Sidecars() []*Sidecar {
	if m == nil {
		return nil
	}
	return m.sidecars
}

// Close releases the sidecars' directories.
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, s := range m.sidecars {
		errs = append(errs, s.dir.Close())
	}
	return errors.Join(errs...)
}

// Collect waits until n sidecar sockets under dir have answered Info, or
// ctx ends (the caller sets the deadline: --qemu-timeout in a pod). With
// n == 0 it returns an empty Manager at once, without looking at dir. On
// error nothing stays open.
func Collect(ctx context.Context, dir string, n uint, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{log: log}
	if n == 0 {
		return m, nil
	}
	t0 := time.Now()
	seen := map[string]bool{}
	waiting := map[string]error{} // socket -> why it is not usable yet
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		if err := m.look(ctx, dir, seen, waiting); err != nil {
			m.Close()
			return nil, err
		}
		if uint(len(m.sidecars)) >= n {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			err := fmt.Errorf("hook sidecars: %d of %d found under %s after %v (%w)%s",
				len(m.sidecars), n, dir, time.Since(t0).Round(time.Millisecond), ctx.Err(), describe(m.sidecars, waiting))
			m.Close()
			return nil, err
		}
	}
	for _, s := range m.sidecars {
		log.Info("hook sidecar collected", "name", s.Name, "socket", s.Socket, "version", s.Version, "hookPoints", s.Points)
	}
	log.Info("collected all requested hook sidecars", "count", len(m.sidecars), "took", time.Since(t0).String())
	return m, nil
}

func describe(found []*Sidecar, waiting map[string]error) string {
	var b strings.Builder
	if len(found) > 0 {
		b.WriteString("; found:")
		for _, s := range found {
			fmt.Fprintf(&b, " %s", s.Socket)
		}
	}
	if len(waiting) > 0 {
		socks := make([]string, 0, len(waiting))
		for s := range waiting {
			socks = append(socks, s)
		}
		slices.Sort(socks)
		b.WriteString("; not answering:")
		for _, s := range socks {
			fmt.Fprintf(&b, " %s (%v)", s, waiting[s])
		}
	}
	return b.String()
}

// look reads dir once and probes each socket not seen before.
func (m *Manager) look(ctx context.Context, dir string, seen map[string]bool, waiting map[string]error) error {
	top, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("hook sidecars: %w", err)
	}
	defer top.Close()
	entries, err := top.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("hook sidecars: read %s: %w", dir, err)
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if !e.IsDir() { // symbolic links included
			continue
		}
		if err := m.lookSub(ctx, top, filepath.Join(dir, e.Name()), e.Name(), seen, waiting); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) lookSub(ctx context.Context, top *os.File, path, name string, seen map[string]bool, waiting map[string]error) error {
	fd, err := unix.Openat(int(top.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hook sidecars: open %s: %w", path, err)
	}
	sub := os.NewFile(uintptr(fd), path)
	defer sub.Close()
	entries, err := sub.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("hook sidecars: read %s: %w", path, err)
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		sock := filepath.Join(path, e.Name())
		if seen[sock] {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			continue
		}
		s, ready, err := m.probe(ctx, sub, e.Name(), sock)
		if err != nil {
			return err
		}
		if !ready {
			waiting[sock] = errNotReady
			continue
		}
		delete(waiting, sock)
		seen[sock] = true
		m.sidecars = append(m.sidecars, s)
	}
	return nil
}

var errNotReady = errors.New("no connection")

// probe connects to a socket and asks Info. ready is false while the
// socket does not accept connections; an error is fatal.
func (m *Manager) probe(ctx context.Context, dir *os.File, base, sock string) (s *Sidecar, ready bool, err error) {
	held, err := dupDir(dir)
	if err != nil {
		return nil, false, fmt.Errorf("hook sidecar socket %s: %w", sock, err)
	}
	s = &Sidecar{Socket: sock, dir: held, base: base}
	defer func() {
		if s == nil || !ready {
			held.Close()
		}
	}()
	conn, err := s.dial(ctx)
	if err != nil {
		m.log.Info("hook sidecar socket not ready yet", "socket", sock, "reason", err.Error())
		return nil, false, nil
	}
	defer conn.Close()
	ictx, cancel := context.WithTimeout(ctx, InfoTimeout)
	defer cancel()
	info, err := hooksinfo.NewInfoClient(conn).Info(ictx, &hooksinfo.InfoParams{})
	if err != nil {
		return nil, false, fmt.Errorf("hook sidecar socket %s: Info: %w", sock, err)
	}
	s.Name = info.GetName()
	for _, v := range Versions {
		if slices.Contains(info.GetVersions(), v) {
			s.Version = v
			break
		}
	}
	if s.Version == "" {
		return nil, false, fmt.Errorf("hook sidecar %q (%s): offers Callbacks versions %q, this launcher speaks %q", s.Name, sock, info.GetVersions(), Versions)
	}
	for _, p := range info.GetHookPoints() {
		switch p.GetName() {
		case PointOnDefineDomain, PointPreCloudInitIso, PointShutdown:
		default:
			m.log.Warn("hook sidecar subscribes to an unknown hook point; it is never called for it", "sidecar", s.Name, "socket", sock, "hookPoint", p.GetName())
		}
		s.Points = append(s.Points, p.GetName())
	}
	return s, true, nil
}

func dupDir(dir *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hold directory %s: %w", dir.Name(), err)
	}
	return os.NewFile(uintptr(fd), dir.Name()), nil
}

// dial connects to the sidecar through its held directory, within
// ConnectTimeout.
func (s *Sidecar) dial(ctx context.Context) (*grpc.ClientConn, error) {
	path := fmt.Sprintf("/proc/self/fd/%d/%s", s.dir.Fd(), s.base)
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	return unixgrpc.Dial(cctx, s.Socket, path)
}

// subscribed lists the sidecars subscribed to point, in discovery order
// (a sidecar naming the point twice is listed twice, as in KubeVirt).
func (m *Manager) subscribed(point string) []*Sidecar {
	if m == nil {
		return nil
	}
	var out []*Sidecar
	for _, s := range m.sidecars {
		for _, p := range s.Points {
			if p == point {
				out = append(out, s)
			}
		}
	}
	return out
}

// call runs fn over a fresh connection to s with CallTimeout.
func (s *Sidecar) call(ctx context.Context, point string, fn func(context.Context, *grpc.ClientConn) error) error {
	conn, err := s.dial(ctx)
	if err != nil {
		return fmt.Errorf("%s: %s: dial: %w", s, point, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if err := fn(cctx, conn); err != nil {
		return fmt.Errorf("%s: %s: %w", s, point, err)
	}
	return nil
}
