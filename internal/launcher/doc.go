// Package launcher is virt-launcher: it starts the private libvirt daemon,
// serves KubeVirt's command protocol, keeps the domain in line with the VMI
// and ends when QEMU is gone (kubevirt-wire.md section 5).
//
// Start-up, in order: create the directories (owner-only); wait up to
// --qemu-timeout for the --hook-sidecars hook sidecars (internal/hooks);
// start virtlogd and the libvirt daemon (session mode as an ordinary user,
// system mode as root in a container); connect and subscribe to lifecycle
// events; serve gRPC on <share>/sockets/launcher-init-sock; check it with
// Info and Ping; rename it to launcher-sock (the readiness signal); sync
// STANDALONE_VMI if set; wait up to --qemu-timeout for a domain. Then run
// until QEMU is gone: on SIGTERM mark the domain for graceful shutdown,
// press the ACPI power button (again every 5 s) and destroy it when
// --grace-period-seconds run out. At the end tell the hook sidecars (Shutdown), send
// the final "domain gone" event (waiting up to 15 s for virt-handler's
// Delete when a notify pipe exists), stop the daemons, remove the sockets
// and exit 0, or 1 when QEMU ended abnormally (2 for a fatal start-up
// error).
//
// Outside a cluster, every directory comes from the flags, so a launcher
// runs in any working directory W as an unprivileged user:
//
//	STANDALONE_VMI="$(cat vmi.yaml)" virt-launcher --allow-emulation \
//	  --kubevirt-share-dir W/share --container-disk-dir W/share/container-disks \
//	  --hotplug-disk-dir W/share/hotplug-disks --ephemeral-disk-dir W/ephemeral \
//	  --private-dir W/private --libvirt-run-dir W/libvirt-run
//
// (vlctl run does this, and more, for a manifest.)
package launcher
