package pod

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestStart(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != 3 {
		t.Errorf("Err() = %v, want exit status 3", p.Err())
	}
	// An enter step that fails: nothing is started.
	marker := t.TempDir() + "/ran"
	boom := errors.New("boom")
	_, err = Start(exec.Command("touch", marker), nil, func() error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Start with a failing enter: %v, want boom", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although entering failed")
	}
}

func TestGroupMembers(t *testing.T) {
	in := []byte("root:x:0:\nkvm:x:104:alice\nvideo:x:44:\nbad line\n")
	got := string(addMember(in, []uint32{104, 44}, "vl-7"))
	want := "root:x:0:\nkvm:x:104:alice,vl-7\nvideo:x:44:vl-7\nbad line\n"
	if got != want {
		t.Errorf("addMember:\n got %q\nwant %q", got, want)
	}
	if got := string(withLine([]byte("a\nb"), "c")); got != "a\nb\nc\n" {
		t.Errorf("withLine = %q", got)
	}
}

// TestIdentity: a process started after Enter sees a passwd and group
// naming its id; the host's files are untouched.
func TestIdentity(t *testing.T) {
	testenv.Root(t, "mount namespaces and bind mounts need root")
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	d, err := safefs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const id = 1879300001
	ident, err := WriteIdentity(d, "identity", id, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ident.Close()
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "cat /etc/passwd /etc/group; echo x >>/etc/passwd && echo WROTE")
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := Start(cmd, ident.Enter)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	for _, want := range []string{"vl-1879300001:x:1879300001:1879300001:", "\nvl-1879300001:x:1879300001:\n", "root:x:0:0:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the process's passwd and group lack %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "WROTE") {
		t.Error("the bind-mounted passwd was writable")
	}
	if now, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(now, hostPasswd) {
		t.Error("the host's /etc/passwd changed")
	}
	if strings.Contains(string(hostPasswd), "vl-1879300001") {
		t.Error("the host's /etc/passwd names the id")
	}
}

// TestEnterRestores: the namespaces the enter steps put a thread in (a
// new network namespace, the identity's mount namespace) are left again by
// restore, so a thread that outlives its child (the main thread, which the
// runtime never ends) holds none of the pod's alive.
func TestEnterRestores(t *testing.T) {
	testenv.Root(t, "namespaces need root")
	d, err := safefs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ident, err := WriteIdentity(d, "identity", 1879300002, 1879300002, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ident.Close()
	ns := func(kind string) string {
		l, err := os.Readlink("/proc/thread-self/ns/" + kind)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread changes namespaces
		net0, mnt0 := ns("net"), ns("mnt")
		restore, err := Enter(func() error { return unix.Unshare(unix.CLONE_NEWNET) }, ident.Enter)
		if err != nil {
			t.Error(err)
			return
		}
		if ns("net") == net0 || ns("mnt") == mnt0 {
			t.Error("the enter steps did not change the thread's namespaces")
		}
		restore()
		if ns("net") != net0 || ns("mnt") != mnt0 {
			t.Errorf("after restore: net %s mnt %s, want %s %s", ns("net"), ns("mnt"), net0, mnt0)
		}
	}()
	<-done
}
