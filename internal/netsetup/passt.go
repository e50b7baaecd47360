package netsetup

import "strconv"

// setupPasst prepares the pod network namespace for a passt interface as
// virt-handler does: the pod interface stays as it is (passt, started by
// libvirt as the VM's user, serves the guest from sockets of the pod), so
// only two sysctls of the namespace change. The VM's group may open ICMP
// echo sockets (passt forwards the guest's pings with them), and every
// port may be bound without privilege (passt listens on the forwarded
// ports, low ones included). Both belong to the pod's namespace, which
// goes with the pod, so nothing is undone.
func setupPasst(cfg PrivilegedConfig) error {
	gid := strconv.Itoa(cfg.QemuGID)
	for _, s := range [][2]string{
		{"net/ipv4/ping_group_range", gid + " " + gid},
		{"net/ipv4/ip_unprivileged_port_start", "0"},
	} {
		if err := writeSysctl(s[0], s[1]); err != nil {
			return err
		}
	}
	return nil
}
