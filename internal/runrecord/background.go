package runrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// A background run (vlctl run -d) is held by a supervisor, a vlctl of its
// own, and keeps a directory below the record directory,
// background/<namespace>_<name>/ (a namespace has no "_"), root's alone:
//
//	lock       flock'ed by the supervisor for as long as it lives
//	run.log    the supervisor's output: vlctl's progress lines, how it ended
//	state.json its pid, and when the guest started and the run ended
//
// It outlives the run, so that what ended it can still be read, until
// vlctl rm removes it. One directory per VM name: a second background run
// of a VM waits for the first one's to be removed.

const (
	backgroundDir = "background"
	bgLock        = "lock"
	// BackgroundLog is the supervisor's output in a background run's
	// directory.
	BackgroundLog = "run.log"
	bgState       = "state.json"
)

// BackgroundState is what state.json says of a background run.
type BackgroundState struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// PID is the supervisor, PIDStart its start time (as in Record).
	PID      int    `json:"pid,omitempty"`
	PIDStart uint64 `json:"pidStart,omitempty"`
	// Started is when the guest first ran, Ended when the run ended
	// (zero while it goes on), Error why, when it failed.
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// FullName is namespace/name.
func (s *BackgroundState) FullName() string { return s.Namespace + "/" + s.Name }

// Background is a background run's directory.
type Background struct {
	BackgroundState
	// Dir is the directory's path.
	Dir string
	// Running: a supervisor holds the lock.
	Running bool
}

// NewBackground makes the directory of a background run of
// namespace/name and takes its lock, which the caller hands on to the
// supervisor (lock, open; log is run.log, new and empty). A directory
// that exists already is refused: its run goes on, or ended and was not
// removed yet.
func NewBackground(recordDir, namespace, name string) (b *Background, lock, log *os.File, err error) {
	d, err := openDir(recordDir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer d.Close()
	if err := d.MkdirAll(backgroundDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("background runs: %w", err)
	}
	sub := backgroundDir + "/" + namespace + "_" + name
	full := namespace + "/" + name
	if err := d.Mkdir(sub, 0o700); errors.Is(err, unix.EEXIST) {
		if old, rerr := readBackground(d, sub); rerr == nil && old.Running {
			return nil, nil, nil, fmt.Errorf("%s runs in the background already (vlctl ps; vlctl stop %s ends it)", full, full)
		}
		return nil, nil, nil, fmt.Errorf("%s: its last background run ended and is not removed yet: vlctl logs --run %s shows how it ended, vlctl rm %s removes it", full, full, full)
	} else if err != nil {
		return nil, nil, nil, fmt.Errorf("background run of %s: %w", full, err)
	}
	b = &Background{BackgroundState: BackgroundState{Name: name, Namespace: namespace}, Dir: d.Join(sub), Running: true}
	defer func() {
		if err != nil {
			lock.Close()
			log.Close()
			os.RemoveAll(b.Dir)
			err = fmt.Errorf("background run of %s: %w", full, err)
		}
	}()
	if lock, err = d.OpenFile(sub+"/"+bgLock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, nil, nil, fmt.Errorf("lock: %w", err)
	}
	if log, err = d.OpenFile(sub+"/"+BackgroundLog, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err = writeBackgroundState(d, sub, &b.BackgroundState); err != nil {
		return nil, nil, nil, err
	}
	return b, lock, log, nil
}

// UpdateBackground changes the state of the background run in dir (the
// supervisor's own: it alone writes it once it runs).
func UpdateBackground(dir string, change func(*BackgroundState)) error {
	d, err := safefs.OpenTrusted(dir, 0o700)
	if err != nil {
		return fmt.Errorf("background run: %w", err)
	}
	defer d.Close()
	st, err := readBackgroundState(d, ".")
	if err != nil {
		return err
	}
	change(st)
	return writeBackgroundState(d, ".", st)
}

func writeBackgroundState(d *safefs.Dir, sub string, st *BackgroundState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return d.WriteFile(sub+"/"+bgState, append(b, '\n'), 0o600)
}

func readBackgroundState(d *safefs.Dir, sub string) (*BackgroundState, error) {
	f, err := d.OpenRegular(sub + "/" + bgState)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st BackgroundState
	if err := json.NewDecoder(f).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Join(sub+"/"+bgState), err)
	}
	return &st, nil
}

// readBackground reads one background run's directory below d.
func readBackground(d *safefs.Dir, sub string) (*Background, error) {
	st, err := readBackgroundState(d, sub)
	if err != nil {
		return nil, err
	}
	held, err := lockHeld(d, sub+"/"+bgLock)
	if err != nil {
		return nil, err
	}
	return &Background{BackgroundState: *st, Dir: d.Join(sub), Running: held}, nil
}

// lockHeld says whether a supervisor holds the lock file name.
func lockHeld(d *safefs.Dir, name string) (bool, error) {
	f, err := d.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return false, nil
}

// ListBackground reads the background runs' directories in recordDir,
// sorted by namespace/name; ones that do not read are reported in the
// error alongside the others.
func ListBackground(recordDir string) ([]Background, error) {
	if _, err := os.Lstat(recordDir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	d, err := openDir(recordDir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	bd, err := d.OpenDir(backgroundDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("background runs: %w", err)
	}
	defer bd.Close()
	ents, err := os.ReadDir(bd.Path())
	if err != nil {
		return nil, fmt.Errorf("background runs: %w", err)
	}
	var out []Background
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.Contains(e.Name(), "_") {
			continue
		}
		b, err := readBackground(bd, e.Name())
		if err != nil {
			errs = append(errs, fmt.Errorf("background run %s: %w", bd.Join(e.Name()), err))
			continue
		}
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName() < out[j].FullName() })
	return out, errors.Join(errs...)
}

// MatchBackground finds the background run that query names, as Match
// finds a live run: "namespace/name", or "name" with namespace or alone
// when only one namespace has one of that name. nil when none; a query
// whose namespace --namespace contradicts is refused, as by Match.
func MatchBackground(runs []Background, query, namespace string) (*Background, error) {
	namespace, name, err := splitQuery(query, namespace)
	if err != nil {
		return nil, err
	}
	var found []*Background
	for i := range runs {
		if runs[i].Name == name && (namespace == "" || runs[i].Namespace == namespace) {
			found = append(found, &runs[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	var names []string
	for _, b := range found {
		names = append(names, b.FullName())
	}
	return nil, fmt.Errorf("%q is ambiguous: background runs %s; give NAMESPACE/NAME or --namespace", query, strings.Join(names, ", "))
}

// RemoveBackground removes the directory of a background run that has
// ended; one whose supervisor still holds the lock is refused.
func RemoveBackground(b *Background) error {
	d, err := safefs.OpenTrusted(b.Dir, 0o700)
	if err != nil {
		return fmt.Errorf("background run of %s: %w", b.FullName(), err)
	}
	defer d.Close()
	lock, err := d.OpenFile(bgLock, os.O_RDONLY, 0)
	if err == nil {
		defer lock.Close()
		// Held while the directory goes: no supervisor can start in it.
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return fmt.Errorf("background run of %s: its supervisor still runs (%v)", b.FullName(), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("background run of %s: %w", b.FullName(), err)
	}
	// Root's directory below root's record directory; RemoveAll follows
	// no link.
	if err := os.RemoveAll(b.Dir); err != nil {
		return fmt.Errorf("background run of %s: %w", b.FullName(), err)
	}
	return nil
}

// OpenBackgroundLog opens a background run's log for reading.
func OpenBackgroundLog(b *Background) (*os.File, error) {
	d, err := safefs.OpenTrusted(b.Dir, 0o700)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.OpenRegular(BackgroundLog)
}
