package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The configuration files of the daemons, written into the state
// directory. Every path a daemon would otherwise take from its defaults
// (/var/lib/containerd, /etc/cni/net.d, /var/lib/cni, /opt/containerd,
// /run/containerd/runc, /var/run/netns) is pointed into our own
// directories, so a cluster run leaves the machine's own ones alone.

func (c *Cluster) writeKubeconfig(name, user string) (string, error) {
	path := filepath.Join(c.stateDir, name+".kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vl-e2e
  cluster:
    certificate-authority: %[1]s/ca.crt
    server: https://%[2]s:%[3]d
users:
- name: %[4]s
  user:
    client-certificate: %[1]s/%[4]s.crt
    client-key: %[1]s/%[4]s.key
contexts:
- name: vl-e2e
  context:
    cluster: vl-e2e
    user: %[4]s
current-context: vl-e2e
`, c.pkiDir, NodeIP, APIPort, user)
	return path, os.WriteFile(path, []byte(data), 0o600)
}

func (c *Cluster) writeContainerdConfig(n *node) (string, error) {
	path := filepath.Join(n.dir, "containerd.toml")
	data := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[6]q

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = false
  # Kubelet asks for negative OOM score adjustments (-998 for sandboxes);
  # lowering one needs CAP_SYS_RESOURCE, which machines here may lack.
  # This clamps them at containerd's own (see RestrictOOM).
  restrict_oom_score_adj = %[11]t
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
    use_internal_loopback = true
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = %[9]q
      Root = %[10]q
      SystemdCgroup = false
`, filepath.Join(n.dir, "containerd"), filepath.Join(n.runDir, "containerd"), n.containerdSock(),
		filepath.Join(n.dir, "containerd-opt"), c.PauseImage(), c.registryHostsDir,
		c.cfg.CNIBin, n.cniConfDir(), c.cfg.Runc, filepath.Join(n.runDir, "runc"), c.restrictOOM)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		return "", err
	}
	// The registry is ours, on loopback, and speaks plain HTTP.
	hostDir := filepath.Join(c.registryHostsDir, c.Registry())
	if err := os.MkdirAll(hostDir, 0o700); err != nil {
		return "", err
	}
	hosts := fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", c.Registry())
	return path, os.WriteFile(filepath.Join(hostDir, "hosts.toml"), []byte(hosts), 0o600)
}

// writeCNIConfig is a node's pod network: one bridge on the host,
// addresses from its pod range kept in our state directory, no masquerade
// (pods need no way out: images are pulled by containerd on the host; the
// other node's pods are a route away on the host).
func (c *Cluster) writeCNIConfig(n *node) error {
	data := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, n.name, n.bridge, n.ipamDir(), n.podCIDR, n.ip)
	return os.WriteFile(filepath.Join(n.cniConfDir(), "10-vl-e2e.conflist"), []byte(data), 0o600)
}

func (c *Cluster) writeKubeletConfig(n *node) (string, error) {
	path := filepath.Join(n.dir, "kubelet.yaml")
	extra := "" // node 2's own settings
	if n.cgroupRoot != "" {
		extra = "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	if n.staticCPUs {
		extra += staticCPUManager
	}
	data := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: %[7]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]s/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[3]s
failSwapOn: false
failCgroupV1: false
clusterDomain: cluster.local
podCIDR: %[4]s
resolvConf: %[5]s
serializeImagePulls: false
featureGates: {%[6]s}
# This machine is shared and its disk is not ours to fill up, but the
# cluster lives for one run: evict only when truly short.
evictionHard: {memory.available: "200Mi", nodefs.available: "2%%", imagefs.available: "2%%", nodefs.inodesFree: "2%%"}
imageGCHighThresholdPercent: 98
imageGCLowThresholdPercent: 95
%[8]s`, n.ip, c.pkiDir, n.containerdSock(), n.podCIDR, filepath.Join(c.stateDir, "resolv.conf"), c.featureGatesYAML(), n.healthzPort, extra)
	if err := os.WriteFile(filepath.Join(c.stateDir, "resolv.conf"), []byte("nameserver "+NodeIP+"\n"), 0o644); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(data), 0o600)
}

// staticCPUManager is the kubelet setting of a node whose Guaranteed
// pods' integer-CPU containers get CPUs of their own (KubeVirt's
// dedicatedCpuPlacement needs it: its virt-handler labels such a node
// cpumanager=true from the policy in the kubelet's cpu_manager_state).
// The static policy needs CPUs reserved for the system; it reserves
// whole CPUs, ceil(kube- plus system-reserved), the lowest-numbered
// first. A 100m reservation keeps CPU 0 out of exclusive use, so on a
// 2-CPU machine CPU 1 is the one a pod can have, while the node's
// allocatable CPU drops by only 100m (1900m). reservedSystemCPUs: "0"
// would reserve the same CPU but take the whole of it from allocatable,
// and a launcher pod with one dedicated CPU asks for more than the 1000m
// left: its compute container's 1 CPU plus its other containers' share.
const staticCPUManager = `cpuManagerPolicy: static
kubeReserved: {cpu: 100m}
`

func (c *Cluster) writeKubeProxyConfig(kubeconfig string) (string, error) {
	path := filepath.Join(c.stateDir, "kube-proxy.yaml")
	// conntrack zeros: leave the machine's conntrack sysctls as they are.
	data := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]s}
mode: nftables
clusterCIDR: %[2]s
hostnameOverride: %[3]s
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [%[4]s/32]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, ClusterCIDR, NodeName, NodeIP)
	return path, os.WriteFile(path, []byte(data), 0o600)
}

func (c *Cluster) featureGates() string {
	return strings.Join(c.cfg.FeatureGates, ",")
}

func (c *Cluster) featureGatesYAML() string {
	var parts []string
	for _, g := range c.cfg.FeatureGates {
		name, val, _ := strings.Cut(g, "=")
		parts = append(parts, name+": "+val)
	}
	return strings.Join(parts, ", ")
}
