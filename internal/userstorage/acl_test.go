package userstorage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestACLEntries: the entry is added with a mask that passes it, and the
// owning group's own entry is not widened.
func TestACLEntries(t *testing.T) {
	got := withUser(nil, 0o640, 1234, 6)
	want := []aclEntry{{aclUserObj, 6, aclNoID}, {aclUser, 6, 1234}, {aclGroupObj, 4, aclNoID}, {aclMask, 6, aclNoID}, {aclOther, 0, aclNoID}}
	dec, err := decodeACL(encodeACL(got))
	if err != nil {
		t.Fatal(err)
	}
	if len(dec) != len(want) {
		t.Fatalf("ACL %v, want %v", dec, want)
	}
	for i := range want {
		if dec[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, dec[i], want[i])
		}
	}
	// An existing ACL keeps its entries; an existing mask grows.
	prev := []aclEntry{{aclUserObj, 7, aclNoID}, {aclUser, 4, 1234}, {aclUser, 7, 99}, {aclGroupObj, 0, aclNoID}, {aclMask, 4, aclNoID}, {aclOther, 0, aclNoID}}
	dec, _ = decodeACL(encodeACL(withUser(prev, 0, 1234, 6)))
	for _, e := range dec {
		switch {
		case e.tag == aclUser && e.id == 1234 && e.perm != 6,
			e.tag == aclUser && e.id == 99 && e.perm != 7,
			e.tag == aclMask && e.perm != 6,
			e.tag == aclGroupObj && e.perm != 0:
			t.Errorf("entry %+v in %v", e, dec)
		}
	}
	if _, err := decodeACL([]byte{1, 0, 0, 0}); err == nil {
		t.Error("version 1 decoded")
	}
}

// TestGrantUndoTwoRuns: two runs grant their uids access to one file (a
// read-only base image two VMs share, or a migration's source and target);
// whichever ends first takes out its own entry and leaves the other's, and
// once both ended the file is as it was: no ACL, its permission bits. The
// undo used to put the whole ACL from before its grant back, which took the
// later run's entry away while it ran and, at that run's end, left the
// first run's entry for good.
func TestGrantUndoTwoRuns(t *testing.T) {
	testenv.Root(t, "sets ACLs on a file of root's")
	for _, firstEnds := range []bool{true, false} {
		p := filepath.Join(testenv.OpenDir(t), "disk.img")
		if err := os.WriteFile(p, nil, 0o640); err != nil {
			t.Fatal(err)
		}
		open := func() *os.File {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}
		g1, err := GrantAccess(open(), 4001, 6)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := GrantAccess(open(), 4002, 6)
		if err != nil {
			t.Fatal(err)
		}
		users := func() map[uint32]uint16 {
			b, err := ACL(g1.f)
			if err != nil || b == nil {
				return nil
			}
			es, _ := decodeACL(b)
			out := map[uint32]uint16{}
			for _, e := range es {
				if e.tag == aclUser {
					out[e.id] = e.perm
				}
			}
			return out
		}
		first, second, keep := g1, g2, uint32(4002)
		if !firstEnds {
			first, second, keep = g2, g1, 4001
		}
		if ok, err := first.Undo(); !ok || err != nil {
			t.Fatalf("undo: %v, %v", ok, err)
		}
		if u := users(); len(u) != 1 || u[keep] != 6 {
			t.Errorf("after one run's undo the named entries are %v, want the other run's (%d) alone", u, keep)
		}
		if ok, err := second.Undo(); !ok || err != nil {
			t.Fatalf("undo: %v, %v", ok, err)
		}
		if b, _ := ACL(g1.f); b != nil {
			es, _ := decodeACL(b)
			t.Errorf("an ACL is left after both runs: %+v", es)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
			t.Errorf("mode %v after both runs, want 0640", st.Mode().Perm())
		}
	}
}

// TestWithoutGrant: the grant's own entry goes back to what it was (gone,
// or its old permissions), the mask to what it was plus what entries added
// since need; an entry someone changed since is not the grant's any more.
func TestWithoutGrant(t *testing.T) {
	u := func(id uint32, perm uint16) aclEntry { return aclEntry{aclUser, perm, id} }
	base := func(mask uint16, named ...aclEntry) []aclEntry {
		es := []aclEntry{{aclUserObj, 6, aclNoID}, {aclGroupObj, 4, aclNoID}, {aclOther, 0, aclNoID}}
		es = append(es, named...)
		if mask != 0 {
			es = append(es, aclEntry{aclMask, mask, aclNoID})
		}
		return es
	}
	for _, c := range []struct {
		name               string
		now, before, after []aclEntry
		want               []aclEntry
		ok                 bool
	}{
		{"alone", base(6, u(10, 6)), nil, base(6, u(10, 6)), base(4), true},
		{"another run's entry since", base(6, u(10, 6), u(11, 6)), nil, base(6, u(10, 6)), base(6, u(11, 6)), true},
		{"the user's restrictive mask kept", base(4, u(99, 6), u(10, 6)), base(4, u(99, 6)), base(6, u(99, 6), u(10, 6)), base(4, u(99, 6)), true},
		{"a widened entry narrowed back", base(6, u(10, 6)), base(4, u(10, 4)), base(6, u(10, 6)), base(4, u(10, 4)), true},
		{"changed since", base(6, u(10, 4)), nil, base(6, u(10, 6)), nil, false},
		{"gone since", base(0), nil, base(6, u(10, 6)), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := withoutGrant(c.now, c.before, c.after)
			if ok != c.ok {
				t.Fatalf("ok %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			g, _ := decodeACL(encodeACL(got))
			w, _ := decodeACL(encodeACL(c.want))
			if len(g) != len(w) {
				t.Fatalf("got %+v, want %+v", g, w)
			}
			for i := range w {
				if g[i] != w[i] {
					t.Errorf("got %+v, want %+v", g, w)
					break
				}
			}
		})
	}
}

// hostDiskRun is a runner of just enough to open a manifest's hostDisks as
// vlctl run does (Held.Open), as the real launcher user.
