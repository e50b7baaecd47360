package pod

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// ImagePod runs a process of a launcher image (an unpacked root file
// system) the way a container runtime runs a pod's container, for the
// tests of our image (deploy/imagetest) and the bench's side-by-side runs
// of KubeVirt's launcher and ours: a mount and PID namespace of its own
// (unshare), the pod's volumes at the image's /run (so at /var/run/kubevirt
// and the rest of KubeVirt's paths, through the image's /var/run link;
// layout.Rooted names them from outside), host directories bound
// read-only at their own paths (stand-ins for virt-handler's bind mounts
// of container images), a /proc of the new PID namespace, /sys and the
// cgroup file systems read-only, a minimal /dev without /dev/kvm, /dev/shm
// and /tmp; then Argv as PID 1 as UID:GID with GID as the supplementary
// group (fsGroup), chrooted into the image. Everything is mounted in the
// pod's mount namespace; nothing on the host changes but the mount points
// made inside Root.
type ImagePod struct {
	Root     string   // the unpacked image
	Run      string   // the pod's volumes, mounted at <Root>/run
	ReadOnly []string // absolute host directories bound read-only at the same path
	UID, GID int
	Argv     []string
	Env      []string
	// Net gives the pod a network namespace of its own (with only a
	// loopback device, down); otherwise it shares the host's.
	Net bool
}

// imageShell does the mounts described at ImagePod and execs the command
// in the image; $4 holds the read-only directories, separated by newlines.
const imageShell = `set -e
R=$1; P=$2; U=$3; RO=$4; shift 4
mount --bind "$P" "$R/run"
echo "$RO" | while IFS= read -r c; do
  [ -n "$c" ] || continue
  mkdir -p "$R$c"; mount --bind "$c" "$R$c"; mount -o remount,bind,ro "$R$c"
done
mount -t proc proc "$R/proc"
mount -t sysfs -o ro sysfs "$R/sys"
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
  mount --bind /sys/fs/cgroup "$R/sys/fs/cgroup"; mount -o remount,bind,ro "$R/sys/fs/cgroup"
else
  mount -t tmpfs -o mode=0755 cgroup "$R/sys/fs/cgroup"
  for c in /sys/fs/cgroup/*; do
    mountpoint -q "$c" || continue
    mkdir "$R$c"; mount --bind "$c" "$R$c"; mount -o remount,bind,ro "$R$c"
  done
fi
mount -t tmpfs -o mode=0755 dev "$R/dev"
for d in null zero full random urandom tty; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mkdir "$R/dev/shm" "$R/dev/pts"
mount -t tmpfs -o mode=1777 shm "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777 tmp "$R/tmp"
exec chroot --userspec="$U" --groups="${U#*:}" "$R" "$@"
`

// Command is the pod's exec.Cmd: unshare, in a process group of its own,
// killed when the thread that started it ends or when ctx is done (the
// whole group). The caller sets its output. Killing the process whose
// parent is unshare (the pod's PID 1) ends the whole pod.
func (p ImagePod) Command(ctx context.Context) (*exec.Cmd, error) {
	for _, d := range p.ReadOnly {
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\n") {
			return nil, fmt.Errorf("read-only directory %q: not an absolute path of one line", d)
		}
	}
	args := []string{"--mount", "--pid", "--fork", "--propagation", "private"}
	if p.Net {
		args = append(args, "--net")
	}
	args = append(args, "/bin/sh", "-c", imageShell, "sh", p.Root, p.Run, fmt.Sprintf("%d:%d", p.UID, p.GID), strings.Join(p.ReadOnly, "\n"))
	cmd := exec.CommandContext(ctx, "unshare", append(args, p.Argv...)...)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = p.Env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}
