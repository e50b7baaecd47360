#!/bin/sh
# node-labeller.sh in the virtlauncher image.
#
# KubeVirt's virt-handler DaemonSet runs the launcher image as its
# `virt-launcher` init container, privileged, with
# `/bin/sh -c node-labeller.sh`, PREFERRED_VIRTTYPE and HYPERVISOR_DEVICE set
# (kvm, kvm) and the host's /var/lib/kubevirt-node-labeller mounted. It must
# leave three files there, which virt-handler parses at start-up (it does not
# start without them) to label the node with CPU models, features and
# machine types:
#
#   virsh_domcapabilities.xml  `virsh domcapabilities` for the q35 machine
#   supported_features.xml     `virsh hypervisor-cpu-baseline --features` of it
#   capabilities.xml           `virsh capabilities`
#
# The libvirt daemon is the image's own, started here for the purpose: the
# modular virtqemud where the image has it, else the monolithic libvirtd
# (Debian 12). The virtualization type is PREFERRED_VIRTTYPE when its device
# is there and libvirt can use it, else qemu (TCG): a node where /dev/kvm
# exists but KVM does not work (nested virtualization off) still gets
# truthful data.
#
# NODE_LABELLER_DIR overrides the output directory (tests).
set -eu

out=${NODE_LABELLER_DIR:-/var/lib/kubevirt-node-labeller}
virttype=${PREFERRED_VIRTTYPE:-kvm}
device=/dev/${HYPERVISOR_DEVICE:-kvm}

case "$(uname -m)" in
  x86_64) arch=x86_64 machine=q35 ;;
  *) echo "node-labeller.sh: $(uname -m): this image has QEMU for x86_64 only" >&2; exit 1 ;;
esac

log() { echo "node-labeller.sh: $*" >&2; }

if command -v virtqemud >/dev/null 2>&1; then
  daemon=virtqemud
else
  daemon=libvirtd
fi
log "starting $daemon"
# In the background rather than -d: its warnings and errors go to this
# container's log (a daemonized libvirtd writes to /var/log/libvirt, which
# the image does not have). It ends with the container.
LIBVIRT_LOG_OUTPUTS="3:stderr" "$daemon" &

# Wait for its socket (15 s at most).
tries=0
until virsh -c qemu:///system version >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -gt 75 ]; then
    log "$daemon did not answer in 15 s"
    exit 1
  fi
  sleep 0.2
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

domcaps() {
  virsh -c qemu:///system domcapabilities --machine "$machine" --arch "$arch" --virttype "$1" > "$tmp/domcaps.xml"
}

if [ "$virttype" != qemu ] && [ -e "$device" ] && domcaps "$virttype" 2>"$tmp/err"; then
  log "virtualization type $virttype"
else
  if [ "$virttype" != qemu ]; then
    log "$virttype not usable here ($device: $( [ -e "$device" ] && echo "present, but libvirt says: $(tr '\n' ' ' < "$tmp/err" 2>/dev/null)" || echo absent)); using qemu (TCG)"
  fi
  virttype=qemu
  domcaps qemu
fi

virsh -c qemu:///system hypervisor-cpu-baseline --features "$tmp/domcaps.xml" \
  --machine "$machine" --arch "$arch" --virttype "$virttype" > "$tmp/features.xml"
virsh -c qemu:///system capabilities > "$tmp/caps.xml"

# Each file appears whole or not at all.
for f in domcaps:virsh_domcapabilities features:supported_features caps:capabilities; do
  src=$tmp/${f%%:*}.xml dst=$out/${f#*:}.xml
  if [ ! -s "$src" ]; then
    log "libvirt gave an empty ${f#*:}.xml"
    exit 1
  fi
  cp "$src" "$dst.tmp"
  mv "$dst.tmp" "$dst"
done
log "wrote virsh_domcapabilities.xml, supported_features.xml, capabilities.xml to $out"
