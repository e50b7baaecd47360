#!/bin/sh
# node-labeller.sh in the virtlauncher image: NOT SUPPORTED.
#
# KubeVirt's virt-handler DaemonSet runs the launcher image as an init
# container with `/bin/sh -c node-labeller.sh` to write the host's CPU models,
# features and machine types (virsh domcapabilities, capabilities, cpu_map)
# to /var/lib/kubevirt-node-labeller. virtlauncher does not implement that.
#
# It fails on purpose rather than exit 0 with no files: a virt-handler with
# silently empty CPU data would mislabel the node. Keep virt-handler on
# KubeVirt's own launcher image: replace only virt-controller's
# --launcher-image (see deploy/README.md), which is the image of VMI pods.
echo "node-labeller.sh: not supported by the virtlauncher image;" \
     "keep virt-handler's init container on KubeVirt's virt-launcher image" \
     "(see deploy/README.md in virtlauncher)" >&2
exit 1
