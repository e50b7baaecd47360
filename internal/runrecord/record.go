// Package runrecord keeps, for every running `vlctl run` on the machine, a
// small record of where its VM is (name, launcher socket, console, address),
// so that `vlctl ps|stop|kill|pause|unpause|console NAME` find it from any
// terminal.
//
// The records live in a directory only root can enter (default
// /run/vlctl, 0700, records 0600: they hold the VMI with its cloud-init
// secrets), never in a run's work dir: that tree belongs to the
// unprivileged launcher user, and root must not follow what that user can
// change. The paths a record names are inside that tree all the same, so a
// command that dials one checks who answers (PeerOwnedBy): the socket's
// listener must be a process of the same run, which keeps one VM's
// launcher user from steering vlctl onto another VM.
package runrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// DefaultDir is where root keeps the records.
const DefaultDir = "/run/vlctl"

// Record describes one running `vlctl run`.
//
// Its JSON is vlctl's on-disk interface: `vlctl ps`, `vlctl gc`, the verbs
// that find a VM by name and `vlctl run --migrate-from` read records that
// an older vlctl, still running, may have written. The groups below are
// embedded so that encoding/json flattens them: the keys, their order and
// their omitempty stay those of one flat object (TestRecordJSON pins them).
type Record struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Process
	WorkDir string `json:"workDir"`
	Sockets
	Endpoints
	// Started is when the guest's domain started.
	Started time.Time `json:"started"`
	// VMI is the VMI as the launcher was synced with: the pause and
	// unpause requests carry it.
	VMI *v1.VirtualMachineInstance `json:"vmi"`
	// VM is the VirtualMachine the VMI comes from (nil for a VMI
	// manifest): a run that takes the guest over keeps its run strategy.
	VM *v1.VirtualMachine `json:"vm,omitempty"`
	Cleanup
	Takeover
}

// Process is the run's own `vlctl run` process.
type Process struct {
	// PID is the `vlctl run` process; PIDStart its start time (clock ticks
	// after boot, /proc/<pid>/stat), which tells it from a later process
	// that reuses the pid.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`
}

// Sockets are where vlctl talks to the run and its guest.
type Sockets struct {
	// Socket is the launcher's command socket, Console the guest's serial
	// console socket.
	Socket  string `json:"socket"`
	Console string `json:"console"`
	// Control is the run's own socket, where vlctl addvolume and
	// removevolume ask it to change the running VM (root only).
	Control string `json:"control,omitempty"`
}

// Endpoints are where the guest is reachable.
type Endpoints struct {
	// Addresses are where the guest is reachable, each with the network
	// namespace it is reachable from.
	Addresses []Address `json:"addresses,omitempty"`
	// Published are the host ports forwarded to the guest (--publish),
	// as "HOST:PORT->GUESTPORT/tcp".
	Published []string `json:"published,omitempty"`
}

// Cleanup is what the run made outside its work dir, for `vlctl gc` to
// undo when the run could not (SIGKILL).
type Cleanup struct {
	// NetNS are the network namespaces of the run's pod network, Grants
	// the ACL entries it added to the user's disk files.
	NetNS  []string `json:"netns,omitempty"`
	Grants []Grant  `json:"grants,omitempty"`
	// Keep: the run was asked to keep its work dir (--keep).
	Keep bool `json:"keep,omitempty"`
	// UID is the user (and group) id the run's VM runs as, leased from
	// the machine's pool (uidpool) until the run's clean-up is done.
	UID uint32 `json:"uid,omitempty"`
}

// Takeover is what a run that takes the guest over (vlctl run
// --migrate-from) must reuse.
type Takeover struct {
	// LauncherRoot is the path the run's launcher sees its work dir at
	// (its own mount namespace): "" for the work dir itself; for a run
	// that took its guest over by live migration, the first run's work
	// dir, whose paths the guest's domain names. That directory is kept,
	// empty, for as long as a run of the VM uses it.
	LauncherRoot string `json:"launcherRoot,omitempty"`
	// Emulation: the guest runs under TCG, not KVM. A run that takes
	// it over must too.
	Emulation bool `json:"emulation,omitempty"`
	// Images are the local files the run's images given by reference
	// were pulled to (root's cache, by digest): a run that takes the guest
	// over must back its disks with the very same, not with what the
	// reference names by then.
	Images map[string]string `json:"images,omitempty"`
	// Volumes are the run's --volume mappings: claim name to the file or
	// block device. A run that takes the guest over uses the same.
	Volumes map[string]string `json:"volumes,omitempty"`
}

// Root is the path the run's launcher sees its work dir at.
func (r *Record) Root() string {
	if r.LauncherRoot != "" {
		return r.LauncherRoot
	}
	return r.WorkDir
}

// Grant is an ACL entry a run added to a file: the file (by path and, to
// never touch another file put at that path since, by device and inode),
// and its ACL before (nil when it had none) and after, which tell the
// entry.
type Grant struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Before []byte `json:"before,omitempty"`
	After  []byte `json:"after"`
}

// Address is one place the guest is reachable.
type Address struct {
	IP    string `json:"ip"`
	NetNS string `json:"netns,omitempty"`
}

func (a Address) String() string {
	if a.NetNS == "" {
		return a.IP
	}
	return a.IP + " (netns " + a.NetNS + ")"
}

// FullName is namespace/name.
func (r *Record) FullName() string { return r.Namespace + "/" + r.Name }

// Entry is a record read back, with whether its run is gone.
type Entry struct {
	Record
	Path string
	// Stale: the recorded vlctl run process is gone (SIGKILLed, say); the
	// record must not be acted on.
	Stale bool
}

// Self returns the pid and start time of the calling process, for a record.
func Self() (int, uint64, error) {
	pid := os.Getpid()
	s, err := procfs.ReadStat("/proc", pid)
	if err != nil {
		return 0, 0, fmt.Errorf("own start time: %w", err)
	}
	return pid, s.StartTime, nil
}

// Alive reports whether the recorded vlctl run is still the same process.
func (r *Record) Alive() bool {
	s, err := procfs.ReadStat("/proc", r.PID)
	return err == nil && s.State != 'Z' && s.StartTime == r.PIDStart && r.PIDStart != 0
}

// openDir opens the record directory, made when missing: root's alone,
// 0700 (an existing one of root's is closed to others if it was not), with
// no directory above it that another user can change (safefs.OpenTrusted).
// Records hold the whole VMI, cloud-init passwords included.
func openDir(dir string) (*safefs.Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("record directory: %w", err)
	}
	d, err := safefs.OpenTrusted(abs, 0o700)
	if err != nil {
		return nil, fmt.Errorf("record directory: %w", err)
	}
	return d, nil
}

// Write stores rec in dir atomically (a temporary file renamed over the
// name, never written through a link), as a file only root can read and
// write (0600); it returns the file's path, for Remove.
func Write(dir string, rec *Record) (string, error) {
	d, err := openDir(dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("record of %s: %w", rec.FullName(), err)
	}
	name := FileName(rec)
	if err := d.WriteFile(name, append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("record of %s: %w", rec.FullName(), err)
	}
	return d.Join(name), nil
}

// FileName is the name of rec's file in the record directory.
func FileName(rec *Record) string {
	return fmt.Sprintf("%d-%s.json", rec.PID, filepath.Base(rec.WorkDir))
}

// Path is where Write(dir, rec) puts rec, as an absolute path.
func Path(dir string, rec *Record) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("record directory: %w", err)
	}
	return filepath.Join(abs, FileName(rec)), nil
}

// List reads the records in dir, sorted by namespace/name; a missing dir
// holds none. Files not written by root, or unreadable, are skipped and
// reported in the returned error alongside what was read.
func List(dir string) ([]Entry, error) {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := os.ReadDir(d.Path())
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	var out []Entry
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := d.Join(e.Name())
		rec, err := read(d, e.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Entry{Record: *rec, Path: path, Stale: !rec.Alive()})
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].FullName(), out[j].FullName(); a != b {
			return a < b
		}
		return out[i].PID < out[j].PID
	})
	return out, errors.Join(errs...)
}

func read(d *safefs.Dir, name string) (*Record, error) {
	path := d.Join(name)
	f, err := d.OpenRegular(name)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || !ok || sys.Uid != 0 || st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("record %s: not a regular file only root can write; ignored", path)
	}
	var rec Record
	if err := json.NewDecoder(f).Decode(&rec); err != nil {
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	if rec.Name == "" || rec.PID <= 0 {
		return nil, fmt.Errorf("record %s: no name or pid", path)
	}
	return &rec, nil
}

// Remove deletes a record file; a missing one is fine.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove record: %w", err)
	}
	return nil
}

// splitQuery reads a VM named on the command line, "namespace/name" or
// "name", beside the --namespace given (empty: none): the namespace to
// look in (empty: any) and the name.
func splitQuery(query, namespace string) (string, string, error) {
	name := query
	if ns, n, ok := strings.Cut(query, "/"); ok {
		if namespace != "" && namespace != ns {
			return "", "", fmt.Errorf("%q names namespace %s, --namespace says %s", query, ns, namespace)
		}
		namespace, name = ns, n
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: give NAME or NAMESPACE/NAME", query)
	}
	return namespace, name, nil
}

// Match finds the one live run that query names: "namespace/name", or
// "name" with namespace (--namespace) or alone when only one namespace has
// a VM of that name. Stale records are never returned.
func Match(entries []Entry, query, namespace string) (*Entry, error) {
	namespace, name, err := splitQuery(query, namespace)
	if err != nil {
		return nil, err
	}
	var live, stale []*Entry
	for i := range entries {
		e := &entries[i]
		if e.Name != name || (namespace != "" && e.Namespace != namespace) {
			continue
		}
		if e.Stale {
			stale = append(stale, e)
		} else {
			live = append(live, e)
		}
	}
	switch {
	case len(live) == 1:
		return live[0], nil
	case len(live) > 1:
		var names []string
		for _, e := range live {
			names = append(names, e.FullName()+" (pid "+strconv.Itoa(e.PID)+")")
		}
		if namespace != "" {
			return nil, fmt.Errorf("%q: %d runs of this VM: %s", query, len(live), strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("%q is ambiguous: %s; give NAMESPACE/NAME or --namespace", query, strings.Join(names, ", "))
	case len(stale) > 0:
		return nil, fmt.Errorf("%q: its vlctl run (pid %d) is gone; the stale record %s is not acted on", query, stale[0].PID, stale[0].Path)
	}
	return nil, fmt.Errorf("no running VM named %q (vlctl ps lists them)", query)
}
