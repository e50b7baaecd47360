package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAgent answers commands from a table of replies and counts them: an
// in-memory agent, the part libvirt and the guest play in a pod.
type fakeAgent struct {
	mu      sync.Mutex
	replies map[string]string
	calls   map[string]int
}

func (a *fakeAgent) run(ctx context.Context, command string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	name := strings.TrimSuffix(strings.TrimPrefix(command, `{"execute":"`), `"}`)
	a.calls[name]++
	if r, ok := a.replies[name]; ok {
		return r, nil
	}
	return "", errors.New("agent not available")
}

func (a *fakeAgent) count(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[name]
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPollerRunsEveryGroupAtOnce: switched on, the poller runs every
// command right away (the first round fills the store), fails softly on a
// command the agent does not answer, and signals the Domain data.
func TestPollerRunsEveryGroupAtOnce(t *testing.T) {
	a := &fakeAgent{calls: map[string]int{}, replies: map[string]string{
		CmdInfo: replyInfo, CmdOSInfo: replyOSInfo, CmdHostName: replyHostName,
		CmdUsers: replyUsers, CmdFSInfo: replyFSInfo, CmdInterfaces: replyIfaces, CmdFSFreezeState: replyFrozen,
		CmdLoad: `{"return":{"load1m":0.5,"load5m":0.25,"load15m":0.125}}`,
		// guest-get-timezone is not answered.
	}}
	s := NewStore()
	p := NewPoller(a.run, s, Intervals{}, quiet())
	p.Set(context.Background(), true)
	defer p.Stop()
	waitFor(t, "every command once", func() bool {
		for _, c := range []string{CmdInfo, CmdOSInfo, CmdHostName, CmdTimezone, CmdUsers, CmdFSInfo, CmdInterfaces, CmdFSFreezeState, CmdLoad} {
			if a.count(c) == 0 {
				return false
			}
		}
		return s.Version() != ""
	})
	waitFor(t, "the store's data", func() bool {
		g := s.GuestInfo()
		return g.Hostname == "vm1" && g.FSFreezeStatus == "frozen" && len(g.FSInfo.Filesystems) == 1 && len(g.UserList) == 2
	})
	if l, ok := s.Load(); !ok || l != (Load{Load1m: 0.5, Load5m: 0.25, Load15m: 0.125}) {
		t.Errorf("load %+v %v, want the agent's guest-get-load", l, ok)
	}
	if tz := s.GuestInfo().Timezone; tz != ", 0" {
		t.Errorf("timezone without an answer = %q, want KubeVirt's %q", tz, ", 0")
	}
	select {
	case <-s.Changed():
	case <-time.After(time.Second):
		t.Error("no change signalled for the Domain data")
	}
}

// TestPollerSwitch: Set(false) stops every group; on again starts a new
// first round; Set with the same state does nothing.
func TestPollerSwitch(t *testing.T) {
	a := &fakeAgent{calls: map[string]int{}, replies: map[string]string{CmdInfo: replyInfo}}
	s := NewStore()
	iv := Intervals{Sys: time.Hour, File: time.Hour, User: time.Hour, Version: time.Hour, FSFreezeStatus: time.Hour}
	p := NewPoller(a.run, s, iv, quiet())
	ctx := context.Background()
	p.Set(ctx, true)
	waitFor(t, "the first round", func() bool { return a.count(CmdUsers) == 1 })
	p.Set(ctx, true) // already on: no second round
	time.Sleep(50 * time.Millisecond)
	if n := a.count(CmdUsers); n != 1 {
		t.Errorf("Set(true) while on ran the commands again (%d rounds)", n)
	}
	p.Set(ctx, false)
	p.Set(ctx, true)
	waitFor(t, "a new first round", func() bool { return a.count(CmdUsers) == 2 })
	p.Stop()
	n := a.count(CmdUsers)
	time.Sleep(50 * time.Millisecond)
	if a.count(CmdUsers) != n {
		t.Error("commands ran after Stop")
	}
}

// TestPollerPeriods: a group repeats at its interval (here the fsfreeze
// group, 20 ms, shorter than the 10 s initial period).
func TestPollerPeriods(t *testing.T) {
	a := &fakeAgent{calls: map[string]int{}, replies: map[string]string{CmdFSFreezeState: `{"return":"thawed"}`}}
	iv := Intervals{Sys: time.Hour, File: time.Hour, User: time.Hour, Version: time.Hour, FSFreezeStatus: 20 * time.Millisecond}
	p := NewPoller(a.run, NewStore(), iv, quiet())
	p.Set(context.Background(), true)
	defer p.Stop()
	waitFor(t, "five rounds of the fsfreeze group", func() bool { return a.count(CmdFSFreezeState) >= 5 })
	if n := a.count(CmdUsers); n != 1 {
		t.Errorf("the user group (1 h) ran %d times, want 1", n)
	}
}

func TestDefaultIntervals(t *testing.T) {
	p := NewPoller(nil, NewStore(), Intervals{User: time.Minute}, quiet())
	want := DefaultIntervals()
	want.User = time.Minute
	if p.iv != want {
		t.Errorf("intervals %+v, want %+v", p.iv, want)
	}
}
