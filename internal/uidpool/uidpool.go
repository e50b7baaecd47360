// Package uidpool hands each standalone VM a user and group id of its own,
// as Firecracker's jailer runs each microVM as its own uid: a guest that
// escapes into its QEMU gets a uid that owns nothing but that VM's tree,
// and can neither reach another VM's sockets nor change what another VM's
// launcher trusts.
//
// The ids come from a range no account uses (they have no passwd entry;
// processes run as bare numbers). A lease is a file named for the id in
// the machine's one lease directory (DefaultDir, whatever record directory
// a run uses: two tables would hand one id to two VMs), only root's, made
// with O_EXCL, so two runs never take the same id; it names the vlctl
// process holding it (pid and start time) and, once written, the run's
// record, so a lease whose holder died is told apart and swept by `vlctl
// gc` once the record's clean-up is done. The same number serves as uid
// and gid. docs/standalone.md, "One id per VM".
package uidpool

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// DefaultRange is the ids handed out by default: the start of the block
// systemd's "UID/GID ranges" document leaves unused (1879048192 and up,
// above the container ranges and below the 2^31 boundary), 65536 of them.
const DefaultRange = "1879048192-1879113727"

// DefaultDir is the machine's lease table: every vlctl run leases here.
const DefaultDir = "/run/vlctl/uids"

// Pool is a range of ids and the directory of their leases.
type Pool struct {
	// Dir holds one lease file per id in use; only root may write it.
	Dir         string
	First, Last uint32
	// ProcRoot is /proc (tests give another); SubIDFiles are the
	// delegated ranges no id may come from (/etc/subuid, /etc/subgid).
	ProcRoot   string
	SubIDFiles []string
}

// New returns the pool of the range "FIRST-LAST" with its leases in dir.
func New(dir, ids string) (*Pool, error) {
	first, last, err := ParseRange(ids)
	if err != nil {
		return nil, err
	}
	return &Pool{Dir: dir, First: first, Last: last, ProcRoot: "/proc",
		SubIDFiles: []string{"/etc/subuid", "/etc/subgid"}}, nil
}

// ForMachine returns the pool of the range "FIRST-LAST" in the machine's
// lease table (DefaultDir).
func ForMachine(ids string) (*Pool, error) { return New(DefaultDir, ids) }

// MachineTable is the machine's lease table without a range: for reading
// leases (Holder), claiming a dead run's id (Claim) and sweeping.
func MachineTable() *Pool { return &Pool{Dir: DefaultDir, ProcRoot: "/proc"} }

// ParseRange reads "FIRST-LAST". Ids below 1000 (the system's own
// accounts), 65534/65535 (nobody, the 16-bit -1) and 2^32-1 (-1) are
// refused, as are ranges of more than 2^24 ids.
func ParseRange(s string) (first, last uint32, err error) {
	a, b, ok := strings.Cut(s, "-")
	f, ferr := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	l, lerr := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case !ok || ferr != nil || lerr != nil:
		return 0, 0, fmt.Errorf("id range %q: want FIRST-LAST, two decimal ids", s)
	case f > l:
		return 0, 0, fmt.Errorf("id range %q: FIRST is above LAST", s)
	case f < 1000:
		return 0, 0, fmt.Errorf("id range %q: ids below 1000 belong to the system's own accounts", s)
	case f <= 65535 && l >= 65534:
		return 0, 0, fmt.Errorf("id range %q: holds 65534 or 65535 (nobody and the 16-bit -1)", s)
	case l == 1<<32-1:
		return 0, 0, fmt.Errorf("id range %q: holds 4294967295 (-1)", s)
	case l-f >= 1<<24:
		return 0, 0, fmt.Errorf("id range %q: more than %d ids", s, 1<<24)
	}
	return uint32(f), uint32(l), nil
}

// Lease is one id taken from the pool.
type Lease struct {
	ID   uint32
	path string
}

// Holder is a lease file's content: the vlctl process that took the id
// (pid and start time) and the run record it wrote, if any.
type Holder struct {
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`
	// Record is the run's record file: while it exists, the run's
	// clean-up is not done (vlctl gc retries it) and the id stays leased.
	Record string `json:"record,omitempty"`
}

// alive reports whether the holding process still runs.
func (h Holder) alive(procRoot string) bool {
	if h.PID <= 0 {
		return false
	}
	st, err := procfs.ReadStat(procRoot, h.PID)
	return err == nil && st.StartTime == h.PIDStart
}

// recorded reports whether the holder's record still exists.
func (h Holder) recorded() bool {
	if h.Record == "" {
		return false
	}
	_, err := os.Lstat(h.Record)
	return err == nil
}

// Allocate takes a free id for the calling process: one with no lease, no
// passwd or group entry, no process holding it as a user or group id and
// outside every delegated sub-id range. The search starts at a random
// point so that an id freed a moment ago is not the next one handed out.
func (p *Pool) Allocate() (*Lease, error) {
	d, err := p.open()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	st, err := procfs.ReadStat(p.ProcRoot, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("uid lease: %w", err)
	}
	content, _ := json.Marshal(Holder{PID: os.Getpid(), PIDStart: st.StartTime})
	delegated, err := p.delegated()
	if err != nil {
		return nil, err
	}
	n := uint64(p.Last) - uint64(p.First) + 1
	start := rand.Uint64N(n)
	var skipped []string
	for i := uint64(0); i < n; i++ {
		id := uint32(uint64(p.First) + (start+i)%n)
		if delegated.holds(id) {
			continue
		}
		name := strconv.FormatUint(uint64(id), 10)
		if _, err := os.Lstat(d.Join(name)); err == nil {
			continue
		}
		if why := p.taken(id); why != "" {
			if len(skipped) < 3 {
				skipped = append(skipped, fmt.Sprintf("%d (%s)", id, why))
			}
			continue
		}
		err := create(d, name, content)
		if errors.Is(err, os.ErrExist) {
			continue // another run took it a moment ago
		}
		if err != nil {
			return nil, err
		}
		return &Lease{ID: id, path: d.Join(name)}, nil
	}
	msg := fmt.Sprintf("no free id in %d-%d", p.First, p.Last)
	if len(skipped) > 0 {
		msg += "; in use, for example: " + strings.Join(skipped, ", ")
	}
	return nil, fmt.Errorf("%s (--uids picks another range)", msg)
}

// open opens the lease directory, made when missing: root's alone, 0700,
// below directories only root can change (safefs.OpenTrusted).
func (p *Pool) open() (*safefs.Dir, error) {
	d, err := safefs.OpenTrusted(p.Dir, 0o700)
	if err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	return d, nil
}

// create makes the lease file name in d with content, O_EXCL: an
// existing lease (of any kind, a link too) is os.ErrExist.
func create(d *safefs.Dir, name string, content []byte) error {
	f, err := d.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return err
		}
		return fmt.Errorf("uid lease: %w", err)
	}
	_, werr := f.Write(content)
	if err := errors.Join(werr, f.Close()); err != nil {
		d.Remove(name)
		return fmt.Errorf("uid lease %s: %w", d.Join(name), err)
	}
	return nil
}

// SetRecord notes the run's record file in the lease: the id stays
// leased while that file exists, even once the run is gone, for vlctl gc
// to finish the run's clean-up under it (whatever record directory it
// reads).
func (l *Lease) SetRecord(record string) error {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return fmt.Errorf("uid lease %d: %w", l.ID, err)
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("uid lease %s: %w", l.path, err)
	}
	h.Record = record
	content, _ := json.Marshal(h)
	if err := safefs.WriteFile(l.path, content, 0o600); err != nil {
		return fmt.Errorf("uid lease %d: %w", l.ID, err)
	}
	return nil
}

// Holder reads the lease of id: who holds it, and whether there is one.
func (p *Pool) Holder(id uint32) (Holder, bool, error) {
	d, err := p.open()
	if err != nil {
		return Holder{}, false, err
	}
	defer d.Close()
	name := strconv.FormatUint(uint64(id), 10)
	b, err := d.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("uid lease %d: %w", id, err)
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return Holder{}, true, fmt.Errorf("uid lease %s: %w", d.Join(name), err)
	}
	return h, true, nil
}

// Claim leases id for h, a run that is gone, whose processes vlctl gc is
// about to end: no new run takes the id meanwhile. An existing lease is
// os.ErrExist.
func (p *Pool) Claim(id uint32, h Holder) error {
	d, err := p.open()
	if err != nil {
		return err
	}
	defer d.Close()
	content, _ := json.Marshal(h)
	return create(d, strconv.FormatUint(uint64(id), 10), content)
}

// taken says why id cannot be handed out, or "" when it can (its lease
// aside).
func (p *Pool) taken(id uint32) string {
	s := strconv.FormatUint(uint64(id), 10)
	if _, err := user.LookupId(s); err == nil {
		return "a user has it"
	}
	if _, err := user.LookupGroupId(s); err == nil {
		return "a group has it"
	}
	if pids, err := procfs.Holding(p.ProcRoot, id); err != nil {
		return "processes unreadable: " + err.Error()
	} else if len(pids) > 0 {
		return fmt.Sprintf("process %d runs with it", pids[0])
	}
	return ""
}

// Release gives the id back once nothing runs with it any more; while
// something does, the lease stays (vlctl gc sweeps it later) and the error
// says what.
func (l *Lease) Release(procRoot string) error {
	if l == nil {
		return nil
	}
	pids, err := procfs.Holding(procRoot, l.ID)
	if err != nil {
		return fmt.Errorf("uid %d: %w; its lease is kept", l.ID, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("uid %d: processes %v still run with it; its lease is kept for vlctl gc", l.ID, pids)
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("uid %d: release: %w", l.ID, err)
	}
	return nil
}

// Sweep removes the leases whose holder is gone, unless the holder's
// record still exists or keep says the id is still needed (a run's record
// awaiting clean-up names it), or a process still runs with it. It
// returns the ids it freed.
func (p *Pool) Sweep(keep func(id uint32) bool) ([]uint32, error) {
	if _, err := os.Lstat(p.Dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	d, err := p.open()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := os.ReadDir(d.Path())
	if err != nil {
		return nil, err
	}
	var freed []uint32
	var errs []error
	for _, e := range ents {
		v, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		id := uint32(v)
		path := d.Join(e.Name())
		b, err := d.ReadFile(e.Name())
		var h Holder
		if err == nil && json.Unmarshal(b, &h) == nil && (h.alive(p.ProcRoot) || h.recorded()) {
			continue // its run is alive, or its clean-up is not done
		}
		if keep != nil && keep(id) {
			continue
		}
		if err := (&Lease{ID: id, path: path}).Release(p.ProcRoot); err != nil {
			errs = append(errs, err)
			continue
		}
		freed = append(freed, id)
	}
	return freed, errors.Join(errs...)
}

// ranges are the delegated sub-id ranges, [first, first+count).
type ranges [][2]uint64

func (r ranges) holds(id uint32) bool {
	for _, x := range r {
		if uint64(id) >= x[0] && uint64(id) < x[0]+x[1] {
			return true
		}
	}
	return false
}

// delegated reads the sub-id files (name:first:count per line); a missing
// file delegates nothing.
func (p *Pool) delegated() (ranges, error) {
	var out ranges
	for _, file := range p.SubIDFiles {
		f, err := os.Open(file)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(parts) != 3 {
				continue
			}
			first, err1 := strconv.ParseUint(parts[1], 10, 32)
			count, err2 := strconv.ParseUint(parts[2], 10, 32)
			if err1 == nil && err2 == nil {
				out = append(out, [2]uint64{first, count})
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	return out, nil
}
