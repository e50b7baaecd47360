#!/bin/bash
# daemon-trim.sh VARIANT — a one-off experiment behind bench/README.md's
# suggestions (not part of the suite): start a private libvirtd in session
# mode as user virtlauncher, the way internal/libvirtd does, define and
# start the test guest with virsh, and print the daemon's start time and the
# daemons' memory.
#   VARIANT=all       every driver module Debian installs, virtlogd running
#                     (stdio_handler = "logd"): what the launcher does today
#   VARIANT=qemuonly  LIBVIRT_DRIVER_DIR with only libvirt_driver_qemu.so,
#                     stdio_handler = "file" and no virtlogd
# Env: SEED=<dir with a capability cache *.xml> keeps the probe out of the
# define; GUEST=<testguest cache dir> (default: the first one built).
# Run as root; everything lives in a fresh /run/vlb/x.* and is removed.
set -eu
variant=${1:?all or qemuonly}
G=${GUEST:-$(ls -d /var/tmp/virtlauncher-testguest/*/ | head -1)}
mkdir -p /run/vlb
D=$(mktemp -d /run/vlb/x.XXXX)
LVD= LOGD=
cleanup() {
	[ -n "$LVD" ] && kill "$LVD" 2>/dev/null
	[ -n "$LOGD" ] && kill "$LOGD" 2>/dev/null
	wait 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT
U="setpriv --reuid=virtlauncher --regid=virtlauncher --clear-groups"
mkdir -p $D/c/libvirt $D/r $D/k/libvirt/qemu/cache/capabilities $D/h $D/drv
printf 'log_level = 3\nlog_outputs = "3:stderr"\nmax_clients = 16\nmax_queued_clients = 16\nmax_anonymous_clients = 16\nmin_workers = 1\nmax_workers = 4\nprio_workers = 2\nmax_client_requests = 8\nadmin_min_workers = 1\nadmin_max_workers = 1\nadmin_max_clients = 2\nkeepalive_interval = -1\n' > $D/c/libvirt/libvirtd.conf
printf 'log_level = 3\nlog_outputs = "3:stderr"\nmax_size = 1048576\nmax_backups = 1\n' > $D/c/libvirt/virtlogd.conf
ENV="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=$D/c XDG_RUNTIME_DIR=$D/r XDG_CONFIG_HOME=$D/c XDG_CACHE_HOME=$D/k"
if [ "$variant" = qemuonly ]; then
	ln -s /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so $D/drv/
	printf 'stdio_handler = "file"\nmax_core = 0\n' > $D/c/libvirt/qemu.conf
	ENV="$ENV LIBVIRT_DRIVER_DIR=$D/drv"
else
	printf 'stdio_handler = "logd"\nmax_core = 0\n' > $D/c/libvirt/qemu.conf
fi
[ -n "${SEED:-}" ] && cp "$SEED"/*.xml $D/k/libvirt/qemu/cache/capabilities/
chown -R virtlauncher:virtlauncher $D
ms() { echo $(( ($2 - $1) / 1000000 )); }
t0=$(date +%s%N)
if [ "$variant" = all ]; then
	$U $ENV /usr/sbin/virtlogd -f $D/c/libvirt/virtlogd.conf 2>$D/virtlogd.err & LOGD=$!
	for i in $(seq 5000); do [ -e $D/r/libvirt/virtlogd-sock ] && break; sleep 0.001; done
fi
$U $ENV /usr/sbin/libvirtd --config $D/c/libvirt/libvirtd.conf 2>$D/libvirtd.err & LVD=$!
for i in $(seq 5000); do [ -e $D/r/libvirt/libvirt-sock ] && break; sleep 0.001; done
t1=$(date +%s%N)
echo "$variant: exec -> libvirt socket $(ms $t0 $t1) ms"
cat > $D/dom.xml <<X
<domain type='qemu'><name>t</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type><kernel>${G}vmlinuz</kernel><initrd>${G}initrd.img</initrd>
<cmdline>console=ttyS0 quiet panic=-1 vl.nodhcp=1 vl.noshell=1</cmdline></os>
<devices><serial type='unix'><source mode='bind' path='$D/ser'/><log file='$D/serial.log'/><target port='0'/></serial></devices></domain>
X
chown virtlauncher $D/dom.xml
V="$U env -i HOME=$D/h LC_ALL=C virsh -q -c qemu+unix:///session?socket=$D/r/libvirt/libvirt-sock"
s=$(date +%s%N); $V define $D/dom.xml >/dev/null; m=$(date +%s%N); $V start t >/dev/null; e=$(date +%s%N)
echo "$variant: virsh define $(ms $s $m) ms, start $(ms $m $e) ms"
sleep "${WAIT:-12}"
echo "$variant: VL- marker lines in the serial log (written without virtlogd in qemuonly): $(grep -c VL- $D/serial.log || true)"
for p in $LVD $LOGD; do
	awk -v c="$(basename "$(readlink /proc/$p/exe)")" '/^Rss|^Pss:|^Anonymous/ {s = s " " $1 " " $2 " kB"} END {print c ":" s}' /proc/$p/smaps_rollup
done
$V destroy t >/dev/null 2>&1 || true
