// Package virtiofsd runs QEMU 7.2's virtiofsd (Debian 12's, written in C)
// with the command line of the Rust virtiofsd that KubeVirt's
// virt-controller renders for a VMI's virtiofs containers
// (/usr/libexec/virtiofsd --socket-path=... --shared-dir=... --sandbox=none
// --cache=auto ...). Translate maps those flags to the C daemon's `-o
// name=value` form, refusing by name what it cannot map; Run creates the
// socket and starts the daemon the way an unprivileged container allows
// (see run.go).
package virtiofsd

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Plan is a translated command line.
type Plan struct {
	// SocketPath is where the vhost-user socket is made (the Rust daemon's
	// --socket-path); Run listens there and hands the C daemon the
	// listening socket (--fd), empty for an informational run.
	SocketPath string
	// SharedDir is the directory served (--shared-dir).
	SharedDir string
	// Args are the C daemon's arguments, without the socket's --fd.
	Args []string
	// Info is set for --print-capabilities, --version and --help: the C
	// daemon answers them itself, with no socket and no shared directory.
	Info bool
}

// Translate maps the Rust virtiofsd's arguments to the C one's. uid is the
// id the daemon runs as: the only --translate-uid/--translate-gid mapping it
// accepts is that id to the guest's root (host:<uid>:0:1), which is the
// mapping Run's user namespace makes anyway.
func Translate(args []string, uid, gid int) (*Plan, error) {
	p := &Plan{}
	sandbox := "chroot"
	var opts []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		f, ok := flagTable[name]
		if !ok {
			return nil, fmt.Errorf("%s: not a flag this virtiofsd translates for QEMU 7.2's virtiofsd", name)
		}
		if f.takesValue && !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("%s: needs a value", name)
			}
			i++
			value = args[i]
		} else if !f.takesValue && hasValue {
			return nil, fmt.Errorf("%s: takes no value", name)
		}
		if err := f.apply(p, &state{opts: &opts, sandbox: &sandbox, uid: uid, gid: gid}, value); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if p.Info {
		return p, nil
	}
	switch {
	case p.SocketPath == "":
		return nil, fmt.Errorf("--socket-path: required")
	case p.SharedDir == "":
		return nil, fmt.Errorf("--shared-dir: required")
	}
	p.Args = append([]string{"-o", "source=" + escapeOpt(p.SharedDir), "-o", "sandbox=" + sandbox}, p.Args...)
	for _, o := range opts {
		p.Args = append(p.Args, "-o", o)
	}
	return p, nil
}

// state is what a flag's translation may change besides the Plan.
type state struct {
	opts    *[]string
	sandbox *string
	uid     int
	gid     int
}

func (s *state) opt(o string) { *s.opts = append(*s.opts, o) }

type flag struct {
	takesValue bool
	apply      func(p *Plan, s *state, value string) error
}

// oneOf maps a flag's value through m, refusing values m lacks.
func oneOf(m map[string]string, set func(p *Plan, s *state, v string)) func(*Plan, *state, string) error {
	return func(p *Plan, s *state, v string) error {
		c, ok := m[v]
		if !ok {
			return fmt.Errorf("%q: QEMU 7.2's virtiofsd has no equivalent (translated: %s)", v, strings.Join(slices.Sorted(maps.Keys(m)), ", "))
		}
		set(p, s, c)
		return nil
	}
}

// option is a switch of the Rust daemon that is `-o name` in the C one.
func option(name string) flag {
	return flag{apply: func(_ *Plan, s *state, _ string) error { s.opt(name); return nil }}
}

// accepted is a flag with no effect on QEMU 7.2's virtiofsd, its values
// still checked.
func accepted(values ...string) flag {
	m := map[string]string{}
	for _, v := range values {
		m[v] = v
	}
	return flag{takesValue: true, apply: oneOf(m, func(*Plan, *state, string) {})}
}

func number(cflag string) flag {
	return flag{takesValue: true, apply: func(p *Plan, _ *state, v string) error {
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		p.Args = append(p.Args, cflag+"="+v)
		return nil
	}}
}

func info(cflag string) flag {
	return flag{apply: func(p *Plan, _ *state, _ string) error {
		p.Info = true
		p.Args = append(p.Args, cflag)
		return nil
	}}
}

// idMap accepts host:<own id>:0:1, the one mapping the user namespace Run
// starts the daemon in gives (the caller's id is the guest's root).
func idMap(own func(s *state) int) flag {
	return flag{takesValue: true, apply: func(_ *Plan, s *state, v string) error {
		if want := fmt.Sprintf("host:%d:0:1", own(s)); v != want {
			return fmt.Errorf("%q: only %q (this daemon's own id as the guest's root) can be translated: QEMU 7.2's virtiofsd runs in a user namespace mapping exactly that", v, want)
		}
		return nil
	}}
}

// flagTable holds every flag of the Rust virtiofsd this wrapper accepts.
// Flags it lacks (--readonly, --inode-file-handles, --socket-group, --fd,
// the compatibility -o form...) are refused by name.
var flagTable = map[string]flag{
	"--socket-path": {takesValue: true, apply: func(p *Plan, _ *state, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("%q: must be an absolute path", v)
		}
		p.SocketPath = v
		return nil
	}},
	"--shared-dir": {takesValue: true, apply: func(p *Plan, _ *state, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("%q: must be an absolute path", v)
		}
		p.SharedDir = v
		return nil
	}},
	// The Rust daemon's "none" runs without a sandbox as an unprivileged
	// user; the C one has no such mode, and its chroot sandbox works in
	// the user namespace Run makes, so none becomes chroot.
	"--sandbox": {takesValue: true, apply: oneOf(map[string]string{"none": "chroot", "chroot": "chroot", "namespace": "namespace"},
		func(_ *Plan, s *state, v string) { *s.sandbox = v })},
	"--cache": {takesValue: true, apply: oneOf(map[string]string{"auto": "auto", "always": "always", "never": "none"},
		func(_ *Plan, s *state, v string) { s.opt("cache=" + v) })},
	"--log-level": {takesValue: true, apply: oneOf(map[string]string{"error": "err", "warn": "warn", "info": "info", "debug": "debug", "trace": "debug"},
		func(_ *Plan, s *state, v string) { s.opt("log_level=" + v) })},
	// QEMU 7.2 cannot migrate a vhost-user-fs device at all (it blocks
	// the migration), so how the daemon would migrate its state is moot.
	"--migration-on-error": accepted("abort", "guest-error"),
	"--migration-mode":     accepted("find-paths", "file-handles"),
	"--translate-uid":      idMap(func(s *state) int { return s.uid }),
	"--translate-gid":      idMap(func(s *state) int { return s.gid }),
	"--thread-pool-size":   number("--thread-pool-size"),
	"--rlimit-nofile":      number("--rlimit-nofile"),
	"--xattr":              option("xattr"),
	"--posix-acl":          option("posix_acl"),
	"--security-label":     option("security_label"),
	"--announce-submounts": option("announce_submounts"),
	"--allow-direct-io":    option("allow_direct_io"),
	"--writeback":          option("writeback"),
	"--no-readdirplus":     option("no_readdirplus"),
	"--no-killpriv-v2":     option("no_killpriv_v2"),
	"--killpriv-v2":        option("killpriv_v2"),
	"--syslog":             {apply: func(p *Plan, _ *state, _ string) error { p.Args = append(p.Args, "--syslog"); return nil }},
	"--print-capabilities": info("--print-capabilities"),
	"--version":            info("--version"),
	"-V":                   info("--version"),
	"--help":               info("--help"),
	"-h":                   info("--help"),
}

// escapeOpt protects a value inside `-o name=value`: the C daemon splits
// options at commas and takes a backslash as an escape.
func escapeOpt(v string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`).Replace(v)
}
