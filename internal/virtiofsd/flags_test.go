package virtiofsd

import (
	"reflect"
	"strings"
	"testing"
)

// kubevirtArgs is the command line KubeVirt v1.9.0's virt-controller
// renders for a configMap's virtiofs container (services/virtiofs.go).
var kubevirtArgs = []string{
	"--socket-path=/var/run/kubevirt/virtiofs-containers/app-config.sock",
	"--shared-dir=/var/run/kubevirt-private/config-map/app-config",
	"--sandbox=none", "--cache=auto",
	"--migration-on-error=guest-error", "--migration-mode=find-paths",
}

func TestTranslate(t *testing.T) {
	const uid, gid = 107, 107
	for _, c := range []struct {
		name   string
		args   []string
		socket string
		shared string
		want   []string // the C daemon's arguments
		info   bool
	}{
		{name: "configMap container, as virt-controller renders it", args: kubevirtArgs,
			socket: "/var/run/kubevirt/virtiofs-containers/app-config.sock", shared: "/var/run/kubevirt-private/config-map/app-config",
			want: []string{"-o", "source=/var/run/kubevirt-private/config-map/app-config", "-o", "sandbox=chroot", "-o", "cache=auto"}},
		{name: "serviceAccount container (v1.9.0 adds --translate-uid)", args: append(append([]string{}, kubevirtArgs...), "--translate-uid=host:107:0:1"),
			socket: "/var/run/kubevirt/virtiofs-containers/app-config.sock", shared: "/var/run/kubevirt-private/config-map/app-config",
			want: []string{"-o", "source=/var/run/kubevirt-private/config-map/app-config", "-o", "sandbox=chroot", "-o", "cache=auto"}},
		{name: "separate values, other switches", args: []string{"--socket-path", "/s.sock", "--shared-dir", "/pvc",
			"--cache", "never", "--sandbox", "namespace", "--xattr", "--posix-acl", "--announce-submounts", "--log-level=trace",
			"--thread-pool-size=4", "--rlimit-nofile", "0", "--syslog", "--translate-gid=host:107:0:1"},
			socket: "/s.sock", shared: "/pvc",
			want: []string{"-o", "source=/pvc", "-o", "sandbox=namespace", "--thread-pool-size=4", "--rlimit-nofile=0", "--syslog",
				"-o", "cache=none", "-o", "xattr", "-o", "posix_acl", "-o", "announce_submounts", "-o", "log_level=debug"}},
		{name: "commas and backslashes in the shared directory are escaped", args: []string{"--socket-path=/s", `--shared-dir=/a,b\c`},
			socket: "/s", shared: `/a,b\c`, want: []string{"-o", `source=/a\,b\\c`, "-o", "sandbox=chroot"}},
		{name: "libvirt's capability probe needs no socket", args: []string{"--print-capabilities"}, info: true, want: []string{"--print-capabilities"}},
		{name: "version", args: []string{"-V"}, info: true, want: []string{"--version"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Translate(c.args, uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			if p.SocketPath != c.socket || p.SharedDir != c.shared || p.Info != c.info {
				t.Errorf("plan %+v, want socket %q, shared dir %q, info %v", p, c.socket, c.shared, c.info)
			}
			if !reflect.DeepEqual(p.Args, c.want) {
				t.Errorf("args\n got %q\nwant %q", p.Args, c.want)
			}
		})
	}
}

// TestTranslateRefuses: what QEMU 7.2's virtiofsd cannot do is refused,
// naming the flag.
func TestTranslateRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--readonly"}, "--readonly: not a flag this virtiofsd translates"},
		{[]string{"--inode-file-handles=mandatory"}, "--inode-file-handles: not a flag"},
		{[]string{"--socket-group=kvm"}, "--socket-group: not a flag"},
		{[]string{"--fd=3"}, "--fd: not a flag"},
		{[]string{"-o", "source=/x"}, "-o: not a flag"},
		{[]string{"--cache=metadata"}, `--cache: "metadata": QEMU 7.2's virtiofsd has no equivalent (translated: always, auto, never)`},
		{[]string{"--sandbox=landlock"}, `--sandbox: "landlock"`},
		{[]string{"--migration-mode=telepathy"}, `--migration-mode: "telepathy"`},
		{[]string{"--translate-uid=host:1000:0:1"}, `--translate-uid: "host:1000:0:1": only "host:107:0:1"`},
		{[]string{"--translate-uid=squash-guest:0:107:4294967295"}, "--translate-uid: "},
		{[]string{"--thread-pool-size=many"}, `--thread-pool-size: "many" is not a number`},
		{[]string{"--xattr=yes"}, "--xattr: takes no value"},
		{[]string{"--socket-path"}, "--socket-path: needs a value"},
		{[]string{"--socket-path=rel.sock", "--shared-dir=/d"}, "--socket-path: \"rel.sock\": must be an absolute path"},
		{[]string{"--shared-dir=/d"}, "--socket-path: required"},
		{[]string{"--socket-path=/s"}, "--shared-dir: required"},
	} {
		_, err := Translate(c.args, 107, 107)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
