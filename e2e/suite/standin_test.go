//go:build e2e

package suite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
	"github.com/virtlauncher/virtlauncher/internal/repo"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestVMKillerStandIn builds the vm-killer stand-in's root filesystem as
// `make e2e-functest` does (deploy/mkrootfs --flavour=vm-killer) and runs
// in it, chrooted in namespaces of its own, what KubeVirt's functional
// suite runs in its helper pods: the network Jobs' clients as the image's
// user 1001 (tests/libnet/job: nmap-ncat's flags, curl --silent, bash's
// process substitution), the privileged pods' commands as root (pkill,
// ps, dd/chown, mount, dmsetup, ping). Then it checks the image the suite
// pushes: KubeVirt's config (user 1001, no entry point) and the tree.
func TestVMKillerStandIn(t *testing.T) {
	testenv.Programs(t, "mmdebstrap", "unshare", "chroot", "ip", "tar")
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	tarball := filepath.Join(t.TempDir(), "vm-killer-rootfs.tar")
	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(root, "deploy", "mkrootfs"), "--flavour=vm-killer", tarball)
	build.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1735689600")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("mkrootfs --flavour=vm-killer: %v\n%s", err, out)
	}
	t.Logf("root filesystem built in %s", time.Since(start).Round(time.Second))

	tree := t.TempDir()
	if out, err := exec.CommandContext(ctx, "tar", "--xattrs", "--xattrs-include=*", "-xpf", tarball, "-C", tree).CombinedOutput(); err != nil {
		t.Fatalf("unpack: %v\n%s", err, out)
	}

	// As the image's user (RenderPod: runAsNonRoot, no user of its own):
	// the TCP, UDP and HTTP clients of tests/libnet/job against servers of
	// the same ncat, and a refused connection failing the Job's check.
	const asPodUser = `
set -euo pipefail
test "$(id -u)" = 1001
nc -l -k 127.0.0.1 1500 --sh-exec 'echo "Hello World!"' &
nc -u -l -k 127.0.0.1 1501 --sh-exec 'echo "Hello UDP World!"' &
nc -l -k 127.0.0.1 8080 --sh-exec 'head -n 1 >/dev/null; printf "HTTP/1.0 200 OK\r\nContent-Length: 13\r\n\r\nHello World!\n"' &
for p in 1500 8080; do
  for i in $(seq 50); do nc -z 127.0.0.1 $p && break; sleep 0.1; done
done

tcp="$(head -n 1 < <(nc 127.0.0.1 1500 -i 3 -w 3 --no-shutdown))"
echo "tcp: $tcp"
test "$tcp" = "Hello World!"

udp=$(cat <(echo) <(sleep 1) | nc -u 127.0.0.1 1501 -i 1 -w 1 | head -n 1)
echo "udp: $udp"
test "$udp" = "Hello UDP World!"

http="$(head -n 1 < <(curl --silent 127.0.0.1:8080))"
echo "http: $http"
test "$http" = "Hello World!"

if nc 127.0.0.1 1599 -i 3 -w 3 --no-shutdown </dev/null; then echo "nc to a closed port succeeded"; exit 1; fi

/bin/sh -c "sleep 0.1"
sleep 100 &
victim=$!
ps aux | grep -q "[s]leep 100"
pkill -9 -f "sleep 100"
rc=0; wait $victim || rc=$?
test $rc = 137
touch /tmp/migrated
echo pod user done
`
	if out, err := runInTree(ctx, tree, "1001:1001", asPodUser); err != nil {
		t.Fatalf("as the pod's user 1001: %v\n%s", err, out)
	} else {
		t.Logf("as 1001:\n%s", out)
		if !strings.Contains(out, "pod user done") {
			t.Fatalf("the script did not finish:\n%s", out)
		}
	}

	// As root, as the suite's privileged pods run (RenderPrivilegedPod,
	// RenderHostPathPod, the device-mapper pod).
	const asRoot = `
set -euo pipefail
test "$(id -u)" = 0
sleep 100 &
victim=$!
pkill -9 sleep
rc=0; wait $victim || rc=$?
test $rc = 137
ping -c 1 -W 2 127.0.0.1
mkdir -p /var/provision/disk
dd if=/dev/zero of=/var/provision/disk/disk.img bs=1 count=0 seek=1G && ls -l /var/provision/disk && chown 107:107 /var/provision/disk/disk.img
test "$(stat -c '%s %u:%g' /var/provision/disk/disk.img)" = "1073741824 107:107"
mkdir -p /tmp/src /tmp/mount && mount --bind /tmp/src /tmp/mount && touch /tmp/src/x && test -e /tmp/mount/x && umount /tmp/mount
# No device-mapper here: dmsetup runs and says so, after its version.
dm=$(dmsetup version 2>&1 || true)
grep "Library version" <<<"$dm"
tail -f /dev/null &
kill $!
echo root done
`
	if out, err := runInTree(ctx, tree, "", asRoot); err != nil {
		t.Fatalf("as root: %v\n%s", err, out)
	} else {
		t.Logf("as root:\n%s", out)
		if !strings.Contains(out, "root done") {
			t.Fatalf("the script did not finish:\n%s", out)
		}
	}

	// The image the suite pushes under <prefix>/vm-killer:<tag>.
	img, err := ociimage.Image(vmKillerSpec(tarball), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "1001" || len(cf.Config.Entrypoint) != 0 || len(cf.Config.Cmd) != 0 {
		t.Errorf("image config: user %q, entry point %q, cmd %q; want user 1001 and neither, as KubeVirt's vm-killer", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if !slices.ContainsFunc(cf.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		t.Errorf("image config: no PATH in %q", cf.Config.Env)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) == 0 {
		t.Fatal("image has no layers")
	}
}

// runInTree runs script with bash in the root file system at tree, as
// user (chroot's --userspec; "" for root), in new network (loopback up),
// mount and PID namespaces with their own /proc and a /dev of null, zero,
// the random devices and the fd links (bash's process substitution), as a
// container runtime gives a pod.
func runInTree(ctx context.Context, tree, user, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	const setup = `set -e
ip link set lo up
r=$1; shift
mount -t tmpfs -o mode=0755 dev "$r/dev"
for d in null zero random urandom; do touch "$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; done
ln -s /proc/self/fd "$r/dev/fd"
ln -s /proc/self/fd/0 "$r/dev/stdin"; ln -s /proc/self/fd/1 "$r/dev/stdout"; ln -s /proc/self/fd/2 "$r/dev/stderr"
exec chroot "$@"`
	args := []string{"--net", "--mount", "--pid", "--fork", "--mount-proc=" + filepath.Join(tree, "proc"), "sh", "-c", setup, "sh", tree}
	if user != "" {
		args = append(args, "--userspec="+user)
	}
	args = append(args, tree, "/bin/bash", "-c", script)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
