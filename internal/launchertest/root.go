package launchertest

import (
	"os/exec"
	"syscall"
)

// RootShell gives a root launcher what a root container has: its own
// /run, /var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt,
// /etc/libvirt and swtpm's /var/lib/swtpm-localca (tmpfs or a private
// directory, in a private mount namespace), a libvirt-qemu user (system
// mode resolves it before reading qemu.conf) in a private /etc/passwd, and
// a network namespace of its own (libvirt's system-mode drivers would
// otherwise touch the host's firewall). Nothing of the host is changed.
// Its arguments are the pod's directory and the command to run.
const RootShell = `set -e
D=$1; shift
mkdir -p $D/etc-libvirt
cp /etc/passwd $D/passwd; cp /etc/group $D/group
grep -q '^libvirt-qemu:' $D/passwd || echo 'libvirt-qemu:x:64055:64055::/nonexistent:/usr/sbin/nologin' >>$D/passwd
grep -q '^libvirt-qemu:' $D/group || echo 'libvirt-qemu:x:64055:' >>$D/group
mount --bind $D/passwd /etc/passwd
mount --bind $D/group /etc/group
mount -t tmpfs vl-run /run
for p in /var/lib/libvirt /var/cache/libvirt /var/log/libvirt; do mkdir -p $p; mount -t tmpfs vl-lib $p; done
[ ! -d /var/lib/swtpm-localca ] || mount -t tmpfs -o mode=0750,uid=$(id -u tss 2>/dev/null || echo 0) vl-ca /var/lib/swtpm-localca
mount --bind $D/etc-libvirt /etc/libvirt
exec "$@"
`

// AsRootContainer makes the pod's command (before Start) the program bin
// with args run as uid 0 "in a container" (RootShell under unshare), with
// the environment env plus "container" set, as a container runtime sets
// it. The program is the process the test starts (unshare and the shell
// exec it), so the pod's descendants are found under it as usual.
func (p *Pod) AsRootContainer(bin string, args, env []string) {
	all := append([]string{"--mount", "--net", "--propagation", "private", "/bin/sh", "-c", RootShell, "sh", p.Dir, bin}, args...)
	p.Cmd = exec.Command("unshare", all...)
	p.Cmd.Dir = p.Dir
	p.Cmd.Env = append(env, "container=virtlauncher-test")
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
