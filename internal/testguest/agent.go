package testguest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed files/os-release
var osRelease []byte

// shutdownScript is the guest's /sbin/shutdown, which the agent's
// guest-shutdown runs (OptAgentShutdown).
//
//go:embed files/shutdown
var shutdownScript []byte

// chpasswdScript is the guest's chpasswd, which the agent's
// guest-set-user-password runs.
//
//go:embed files/chpasswd
var chpasswdScript []byte

// GuestUser is the guest's user besides root (uid 1000, home
// /home/vluser), for access credentials: the agent sets its authorized
// SSH keys and its password.
const GuestUser = "vluser"

// accounts are the guest's /etc/passwd, /etc/group and /etc/shadow: root
// and GuestUser, both without a password.
var accounts = []struct {
	name string
	mode uint32
	data string
}{
	{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\n" + GuestUser + ":x:1000:1000:test user:/home/" + GuestUser + ":/bin/sh\n"},
	{"etc/group", 0o644, "root:x:0:\n" + GuestUser + ":x:1000:\n"},
	{"etc/shadow", 0o600, "root:*:20000:0:99999:7:::\n" + GuestUser + ":!:20000:0:99999:7:::\n"},
}

// What the guest's /etc/os-release says, and so what the guest agent's
// guest-get-osinfo reports.
const (
	OSName      = "virtlauncher test guest"
	OSID        = "vltestguest"
	OSVersionID = "1"
)

// AgentPath is where the guest agent is in the guest (run as /bin/qemu-ga).
const AgentPath = "/bin/qemu-ga"

// agentFiles returns the agent binary followed by the shared libraries
// and the dynamic loader it needs, as the host's dynamic linker resolves
// them (ldd): the guest is the host's Debian userland, in miniature.
func agentFiles(ctx context.Context, agent string) ([]string, error) {
	if _, err := os.Stat(agent); err != nil {
		return nil, fmt.Errorf("test guest agent: %w (install qemu-guest-agent)", err)
	}
	cmd := exec.CommandContext(ctx, "ldd", agent)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", agent, err)
	}
	libs, err := parseLdd(out)
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", agent, err)
	}
	return append([]string{agent}, libs...), nil
}

// parseLdd reads ldd's output: "name => /path (addr)" for a library,
// "/path (addr)" for the loader, and no path for the vDSO. A library ldd
// could not find is an error.
func parseLdd(out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("missing library: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "/") {
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("no library in %q", out)
	}
	return libs, nil
}

// addAgent writes the agent as bin/qemu-ga and each library at the path
// the host's loader found it, with its directories; symbolic links are
// followed (the initramfs holds the files themselves).
func addAgent(c *cpioWriter, files []string) error {
	c.File("bin/shutdown", 0o755, shutdownScript)
	c.File("bin/chpasswd", 0o755, chpasswdScript)
	for _, a := range accounts {
		c.File(a.name, a.mode, []byte(a.data))
	}
	c.Dir("home", 0o755)
	c.Dir("home/"+GuestUser, 0o755)
	c.Dir("root", 0o700)
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if i == 0 {
			c.File(strings.TrimPrefix(AgentPath, "/"), 0o755, data)
			continue
		}
		rel := strings.TrimPrefix(filepath.Clean(f), "/")
		c.Parents(rel)
		c.File(rel, 0o755, data)
	}
	return nil
}
