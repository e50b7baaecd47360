package pod

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestImagePodCommand: the command line unshare gets (deploy/imagetest runs
// it for real on the launcher image), and read-only directories that the
// script could not take are refused.
func TestImagePodCommand(t *testing.T) {
	p := ImagePod{Root: "/r", Run: "/v", ReadOnly: []string{"/a", "/b c"}, UID: 5, GID: 6, Argv: []string{"/bin/x", "-y"}, Env: []string{"A=1"}}
	cmd, err := p.Command(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(cmd.Args, "--net") {
		t.Errorf("--net without Net: %q", cmd.Args)
	}
	i := slices.Index(cmd.Args, "sh")
	if i < 0 || !slices.Equal(cmd.Args[i+1:], []string{"/r", "/v", "5:6", "/a\n/b c", "/bin/x", "-y"}) {
		t.Errorf("args %q", cmd.Args)
	}
	if !slices.Equal(cmd.Env, p.Env) || !cmd.SysProcAttr.Setpgid {
		t.Errorf("env %q, attributes %+v", cmd.Env, cmd.SysProcAttr)
	}
	p.Net = true
	if cmd, _ := p.Command(context.Background()); !slices.Contains(cmd.Args, "--net") {
		t.Errorf("Net: no --net in %q", cmd.Args)
	}
	for _, bad := range []string{"relative", "/two\nlines"} {
		p.ReadOnly = []string{bad}
		if _, err := p.Command(context.Background()); err == nil || !strings.Contains(err.Error(), "read-only directory") {
			t.Errorf("ReadOnly %q: %v, want a refusal", bad, err)
		}
	}
}
