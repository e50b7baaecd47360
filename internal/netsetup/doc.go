// Package netsetup wires a VMI's masquerade and bridge interfaces to the pod
// network, split the way KubeVirt splits it:
//
//   - the privileged phase (virt-handler in a cluster, vlctl standalone) runs
//     as root inside the pod's network namespace: bridge, tap, addresses,
//     forwarding, nftables NAT, and a vif cache file per interface;
//   - the unprivileged phase (the launcher) only reads that cache and serves
//     DHCP on the bridge, so the guest learns its address, routes and DNS.
//
// This package is the privileged phase. The plan and the vif cache, which
// both phases read, live in internal/netsetup/plan; the unprivileged phase
// lives in internal/netsetup/dhcp. Callers import those directly.
package netsetup
