package testguest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// getentScript is the guest's getent (busybox has none), which KubeVirt's
// file-based SSH key fallback runs through the agent.
//
//go:embed files/getent
var getentScript []byte

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

// SSHDPath is where the guest's SSH server (Debian's dropbear) is: init
// starts it on port 22 once the network is up, with host keys made at the
// first connection.
const SSHDPath = "/bin/dropbear"

// hostPrograms are the dynamically linked host programs the guest
// carries, with the shared libraries and the dynamic loader they need as
// the host's dynamic linker resolves them (ldd): the guest is the host's
// Debian userland, in miniature.
type hostPrograms struct {
	bins map[string]string // path in the guest -> host path
	libs []string          // host paths, at the same path in the guest
}

// files returns every host file the programs are made of, in a stable
// order (for the cache key).
func (h hostPrograms) files() []string {
	var out []string
	for _, dst := range slices.Sorted(maps.Keys(h.bins)) {
		out = append(out, h.bins[dst])
	}
	return append(out, h.libs...)
}

// findPrograms resolves bins (path in the guest -> host path) and their
// libraries.
func findPrograms(ctx context.Context, bins map[string]string) (hostPrograms, error) {
	h := hostPrograms{bins: bins}
	seen := map[string]bool{}
	for _, dst := range slices.Sorted(maps.Keys(bins)) {
		src := bins[dst]
		if _, err := os.Stat(src); err != nil {
			return hostPrograms{}, fmt.Errorf("test guest program %s: %w (run scripts/install-deps)", dst, err)
		}
		cmd := exec.CommandContext(ctx, "ldd", src)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		out, err := cmd.Output()
		if err != nil {
			return hostPrograms{}, fmt.Errorf("ldd %s: %w", src, err)
		}
		libs, err := parseLdd(out)
		if err != nil {
			return hostPrograms{}, fmt.Errorf("ldd %s: %w", src, err)
		}
		for _, l := range libs {
			if !seen[l] {
				seen[l] = true
				h.libs = append(h.libs, l)
			}
		}
	}
	return h, nil
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

// addPrograms writes the guest's accounts and helper scripts, each
// program at its guest path and each library at the path the host's
// loader found it, with its directories; symbolic links are followed (the
// initramfs holds the files themselves).
func addPrograms(c *cpioWriter, h hostPrograms) error {
	c.File("bin/shutdown", 0o755, shutdownScript)
	c.File("bin/chpasswd", 0o755, chpasswdScript)
	c.File("bin/getent", 0o755, getentScript)
	for _, a := range accounts {
		c.File(a.name, a.mode, []byte(a.data))
	}
	c.Dir("home", 0o755)
	c.Dir("home/"+GuestUser, 0o755)
	c.Dir("root", 0o700)
	for _, dst := range slices.Sorted(maps.Keys(h.bins)) {
		data, err := os.ReadFile(h.bins[dst])
		if err != nil {
			return err
		}
		c.File(strings.TrimPrefix(dst, "/"), 0o755, data)
	}
	for _, f := range h.libs {
		if err := addLib(c, f); err != nil {
			return err
		}
	}
	return nil
}

// addLib writes the library at host path f at the same path, with its
// directories.
func addLib(c *cpioWriter, f string) error {
	data, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	rel := strings.TrimPrefix(filepath.Clean(f), "/")
	c.Parents(rel)
	c.File(rel, 0o755, data)
	return nil
}
