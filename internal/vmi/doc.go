// Package vmi loads a VirtualMachineInstance the way a KubeVirt cluster
// would have admitted it: strict YAML/JSON decoding (Parse), the defaults
// KubeVirt's mutating webhook applies (SetDefaults), and the checks its
// validating webhook and the launcher rely on (Validate). Load does all
// three. Nothing here touches the system, except LoadFile reading its file.
//
// Where standalone use differs from a cluster, on purpose:
//
//   - The auto-attached pod interface uses the masquerade binding unless
//     Options.DefaultBinding is "bridge" (KubeVirt's cluster default).
//   - An empty firmware UUID becomes UUIDv5(name), the rule KubeVirt's VM
//     controller applies to VM-owned VMIs, for plain VMIs too (KubeVirt draws
//     a random one), so reruns of a manifest see the same SMBIOS UUID.
//   - An empty metadata.uid becomes UUIDv5("uid:namespace/name"): the
//     launcher keys its private directories on the UID.
//   - Inline cloud-init user and network data may be up to 256 KiB each
//     (KubeVirt: 2 KiB, larger data in a Secret, which standalone lacks).
//   - VirtualMachines with spec.instancetype or spec.preference are refused:
//     expanding them needs the cluster's instancetype objects (virt-api).
//   - Only VirtualMachineInstance and VirtualMachine documents are read;
//     pools, replica sets and presets describe many VMs or none.
//
// Interface and network names follow KubeVirt's rule (letters, digits, -
// and _); disk and volume names must be DNS-1123 labels, as KubeVirt
// requires for disks. None of them can hold "/" or "..".
//
// A VMI sent by virt-handler is already defaulted by the cluster: decode it
// with Parse (or ParseLenient, if the handler may be newer than the API
// types here) and do not run SetDefaults on it.
package vmi
