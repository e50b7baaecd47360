package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
)

// vlctl ssh runs the system's ssh client to the guest. The guest's port is
// reached as a published port reaches it, from the run's outside network
// namespace (standalone.DialGuest), which only root can enter; ssh itself
// runs as the person who ran sudo (their keys, agent, config and
// known_hosts), so the connection comes to it through a unix socket of
// vlctl's, in a directory only that person can enter, and ssh's
// ProxyCommand (vlctl ssh-relay) carries it.

func newSSHCmds() []*cobra.Command {
	var n nameFlags
	var login, identity string
	var port uint16
	var options []string
	cmd := &cobra.Command{
		Use:   "ssh NAME [-l USER] [-i KEY] [-o OPTION]... [-- COMMAND...]",
		Short: "Log into the guest with the system's ssh client (or run COMMAND there)",
		Long: `ssh runs the system's ssh client (OpenSSH) to the guest's SSH server, as virtctl ssh does,
without publishing its port on the host: vlctl connects to the guest's port (22, or --port) as
a --publish port does, through the VM's masquerade binding (a port the interface's declared
ports leave out is refused, naming it), and hands the connection to ssh as its ProxyCommand.
Run with sudo, ssh runs as you: your keys (~/.ssh/id_*), your ssh-agent when sudo keeps
SSH_AUTH_SOCK (sudo --preserve-env=SSH_AUTH_SOCK), your ~/.ssh/config. -i KEY and -l USER go to
ssh; without -l (or -o User=...), the user the manifest names: the first user the VM's
accessCredentials give keys to through the guest agent (propagationMethod.qemuGuestAgent.users),
else the one its cloud-init #cloud-config user-data makes (user:, else the first named entry of
users:); a manifest naming none is refused, asking for -l. -o OPTION (repeatable) goes
to ssh before vlctl's own options, so yours win (ssh takes the first value of an option).
The guest's host key is checked against a known_hosts file of this VM's own, in your vlctl
state (~/.local/state/vlctl/ssh/NAMESPACE_NAME.known_hosts, or below $XDG_STATE_HOME): the first key is recorded
(StrictHostKeyChecking=accept-new), a different one later is refused by ssh, naming the file
(a VM made again under the same name has new keys: remove the file). COMMAND runs in the
guest instead of a login shell; vlctl exits with ssh's status. The vlctl binary must be one
you can run (ssh starts it as you). NAME is NAMESPACE/NAME, or NAME alone when only one
namespace has a VM of that name.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 || (dash < 0 && len(args) > 1) {
				return errors.New("ssh: give NAME, then -- and the command: vlctl ssh NAME -- COMMAND [ARG...]")
			}
			if port == 0 {
				return errors.New("ssh: --port 0: not a port (1-65535)")
			}
			e, err := n.find(args[0])
			if err != nil {
				return err
			}
			r := sshRequest{login: login, identity: identity, port: port, options: options, command: args[1:]}
			if r.login, err = sshLogin(r, e); err != nil {
				return err
			}
			return runSSH(cmd, e, r)
		},
	}
	n.register(cmd)
	cmd.Flags().StringVarP(&login, "login", "l", "", "the guest user to log in as")
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "the private key ssh offers (ssh -i)")
	cmd.Flags().Uint16Var(&port, "port", 22, "the guest's SSH port")
	cmd.Flags().StringArrayVarP(&options, "option", "o", nil, "an ssh option (ssh -o), before vlctl's own (repeatable)")

	relayCmd := &cobra.Command{
		Use:    "ssh-relay SOCKET",
		Short:  "ssh's ProxyCommand for vlctl ssh: copies standard input and output to SOCKET",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return relayStdio(args[0], cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	return []*cobra.Command{cmd, relayCmd}
}

type sshRequest struct {
	login, identity string
	port            uint16
	options         []string
	command         []string
}

// sshUser is who ssh runs as: the person who ran sudo, else vlctl's own
// user.
type sshUser struct {
	uid, gid uint32
	groups   []uint32
	name     string
	home     string
	drop     bool // ssh runs as another user than vlctl
}

func currentSSHUser() (sshUser, error) {
	id := strconv.Itoa(os.Getuid())
	drop := false
	if s := os.Getenv("SUDO_UID"); s != "" && os.Geteuid() == 0 && s != "0" {
		id, drop = s, true
	}
	u, err := user.LookupId(id)
	if err != nil {
		return sshUser{}, fmt.Errorf("ssh: the user ssh runs as (uid %s): %w", id, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	su := sshUser{uid: uint32(uid), gid: uint32(gid), name: u.Username, home: u.HomeDir, drop: drop}
	if drop {
		gids, err := u.GroupIds()
		if err != nil {
			return sshUser{}, fmt.Errorf("ssh: the groups of %s: %w", u.Username, err)
		}
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				su.groups = append(su.groups, uint32(n))
			}
		}
	}
	return su, nil
}

// command runs name with args as u (its own environment: home, user),
// killed when ctx ends.
func (u sshUser) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, name, args...)
	if u.drop {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
		env := []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name}
		for _, k := range []string{"PATH", "TERM", "LANG", "LC_ALL", "SSH_AUTH_SOCK", "DISPLAY", "COLORTERM"} {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		c.Env = env
	}
	return c
}

// runSSH serves the guest's port on a private unix socket and runs ssh
// through it.
func runSSH(cmd *cobra.Command, e *runrecord.Entry, r sshRequest) error {
	u, err := currentSSHUser()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("ssh: vlctl's own path: %w", err)
	}
	dir, err := os.MkdirTemp("", "vlctl-ssh-")
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "guest")
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	// Only ssh's user (and root) may enter the directory: the socket is
	// a way into the guest.
	if u.drop {
		if err := errors.Join(os.Lchown(sock, int(u.uid), int(u.gid)), os.Chown(dir, int(u.uid), int(u.gid))); err != nil {
			l.Close()
			return fmt.Errorf("ssh: %w", err)
		}
	}
	rl := relay.New(func(what string, err error) { fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: %s: %v\n", what, err) })
	defer rl.Close()
	rl.Serve(l, "ssh to "+e.FullName(), func(net.Conn) (net.Conn, error) {
		return standalone.DialGuest(e, r.port)
	})

	// sudo passes XDG_STATE_HOME on only when told to: then it is the
	// user's.
	state := filepath.Join(u.home, ".local", "state", "vlctl", "ssh")
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		state = filepath.Join(x, "vlctl", "ssh")
	}
	// Made as ssh's user: root makes nothing in a user's home.
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	if out, err := u.command(ctx, "mkdir", "-p", "-m", "0700", state).CombinedOutput(); err != nil {
		return fmt.Errorf("ssh: make %s: %v: %s", state, err, strings.TrimSpace(string(out)))
	}
	args := sshArgs(r, e, self, sock, filepath.Join(state, e.Namespace+"_"+e.Name+".known_hosts"))
	// A session lasts as long as its user wants.
	ssh := u.command(context.Background(), "ssh", args...)
	ssh.Stdin, ssh.Stdout, ssh.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	// Ctrl-C is ssh's to act on (it reaches both): vlctl, which carries
	// the connection, stays until ssh ends.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := ssh.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() >= 0 {
			return exitStatus(ee.ExitCode())
		}
		return fmt.Errorf("ssh: %w", err)
	}
	return nil
}

// sshArgs is ssh's command line: the user's options first (ssh takes an
// option's first value), then vlctl's.
func sshArgs(r sshRequest, e *runrecord.Entry, self, sock, knownHosts string) []string {
	var args []string
	for _, o := range r.options {
		args = append(args, "-o", o)
	}
	alias := e.Name + "." + e.Namespace + ".vlctl"
	args = append(args,
		"-o", "ProxyCommand="+sshQuote(self)+" ssh-relay "+sshQuote(sock),
		"-o", "HostKeyAlias="+alias,
		"-o", "UserKnownHostsFile="+sshQuote(knownHosts),
		"-o", "StrictHostKeyChecking=accept-new",
		"-o", "CheckHostIP=no",
	)
	if r.login != "" {
		args = append(args, "-l", r.login)
	}
	if r.identity != "" {
		args = append(args, "-i", r.identity)
	}
	args = append(args, alias)
	if len(r.command) > 0 {
		args = append(append(args, "--"), r.command...)
	}
	return args
}

// sshLogin is the user vlctl ssh logs in as when -l is not given: the
// first user the VM's accessCredentials give keys to through the guest
// agent, else the user its cloud-init user-data makes (user:, else the
// first named entry of users:). "" when ssh is told one by -o User=...;
// an error with a hint when the manifest names none: ssh's default, the
// local user's name, is seldom a guest's.
func sshLogin(r sshRequest, e *runrecord.Entry) (string, error) {
	if r.login != "" {
		return r.login, nil
	}
	for _, o := range r.options {
		if k, _, _ := strings.Cut(strings.TrimSpace(strings.ReplaceAll(o, "=", " ")), " "); strings.EqualFold(k, "User") {
			return "", nil
		}
	}
	if u := agentUser(e); u != "" {
		return u, nil
	}
	u, err := cloudInitUser(e.VMI)
	if u != "" || err != nil {
		return u, err
	}
	return "", fmt.Errorf("ssh: which user to log in as? %s names none (no accessCredentials qemuGuestAgent users, no user: or users: in its cloud-init #cloud-config user-data): give -l USER", e.FullName())
}

// agentUser is the first guest user the VM's accessCredentials give SSH
// keys to through the guest agent, "" when none does.
func agentUser(e *runrecord.Entry) string {
	if e.VMI == nil {
		return ""
	}
	for _, c := range e.VMI.Spec.AccessCredentials {
		if k := c.SSHPublicKey; k != nil && k.PropagationMethod.QemuGuestAgent != nil && len(k.PropagationMethod.QemuGuestAgent.Users) > 0 {
			return k.PropagationMethod.QemuGuestAgent.Users[0]
		}
	}
	return ""
}

// cloudInitUser is the user the VM's cloud-init #cloud-config user-data
// makes: user: (a name, or a map with name:), else the first entry of
// users: that names one ("default", the image's own user, names none);
// "" when there is none or the user-data is not #cloud-config.
func cloudInitUser(v *v1.VirtualMachineInstance) (string, error) {
	if v == nil {
		return "", nil
	}
	for _, vol := range v.Spec.Volumes {
		var data, b64 string
		switch {
		case vol.CloudInitNoCloud != nil:
			data, b64 = vol.CloudInitNoCloud.UserData, vol.CloudInitNoCloud.UserDataBase64
		case vol.CloudInitConfigDrive != nil:
			data, b64 = vol.CloudInitConfigDrive.UserData, vol.CloudInitConfigDrive.UserDataBase64
		default:
			continue
		}
		if data == "" && b64 != "" {
			b, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return "", fmt.Errorf("ssh: volume %s: userDataBase64: %w", vol.Name, err)
			}
			data = string(b)
		}
		if !strings.HasPrefix(data, "#cloud-config") {
			return "", nil
		}
		var cc struct {
			User  json.RawMessage   `json:"user"`
			Users []json.RawMessage `json:"users"`
		}
		if err := yaml.Unmarshal([]byte(data), &cc); err != nil {
			return "", fmt.Errorf("ssh: the user-data of volume %s: %w", vol.Name, err)
		}
		if u := cloudConfigName(cc.User); u != "" {
			return u, nil
		}
		for _, u := range cc.Users {
			if n := cloudConfigName(u); n != "" && n != "default" {
				return n, nil
			}
		}
		return "", nil
	}
	return "", nil
}

// cloudConfigName is the name in a user entry of cloud-config: a string,
// or a map's name.
func cloudConfigName(raw json.RawMessage) string {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		return name
	}
	var m struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &m) == nil {
		return m.Name
	}
	return ""
}

// sshQuote quotes s for the shell that runs ProxyCommand, with ssh's %
// tokens escaped.
func sshQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// relayStdio connects to sock and copies in to it and it to out until the
// socket's side ends: ssh's input ending is carried across (CloseWrite)
// and the guest's answer still read, but a connection vlctl closed (the
// guest's port did not answer) ends relayStdio at once, so ssh says the
// connection was closed instead of waiting on it for ever.
func relayStdio(sock string, in io.Reader, out io.Writer) error {
	c, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return fmt.Errorf("ssh-relay: %w", err)
	}
	defer c.Close()
	go func() {
		if _, err := io.Copy(c, in); err == nil {
			c.(*net.UnixConn).CloseWrite()
		}
	}()
	// A reset is vlctl closing a connection ssh had written to: vlctl
	// said why, ssh says it was closed.
	if _, err := io.Copy(out, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("ssh-relay: %w", err)
	}
	return nil
}
