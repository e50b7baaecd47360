package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// A second node on the same machine (Config.Nodes = 2), for what needs
// two (a live migration's target pod is kept off its source's node):
// docs/two-node-e2e.md. It has what a node has to itself: a PID and mount
// namespace with its own PID 1, its own containerd, kubelet, pod bridge
// and cgroup root; it shares the machine's network namespace, the control
// plane, node 1's kube-proxy and the registry. KubeVirt's virt-handler
// finds the node's files at fixed host paths (/var/lib/kubelet,
// /run/kubevirt...): in node 2's mount namespace, directories of its own
// are bind-mounted over them, so the two handlers never see each
// other's sockets, checkpoints or pods.
const (
	Node2Name   = "vl-e2e-2"
	node2Bridge = "vle2ecni1"
	node2CIDR   = "10.244.1.0/24"
	Node2IP     = "10.244.1.1"
	// ClusterCIDR holds both nodes' pod ranges: kube-proxy tells pod
	// traffic from outside traffic by it.
	ClusterCIDR = "10.244.0.0/16"
	// node2Cgroup is node 2's cgroup root (kubelet's cgroupRoot): its
	// kubelet removes pod cgroups below its own root that it does not
	// know, so the two must not share one.
	node2Cgroup = "vl-e2e-2"
	// node2Healthz is node 2's kubelet health port (node 1's is 10248).
	node2Healthz = 10348
)

// node is one kubelet and everything it has to itself.
type node struct {
	name, bridge, podCIDR, ip string
	dir, runDir               string // its configuration and state; its sockets
	cgroupRoot                string // kubelet's cgroupRoot; "" is the machine's root
	healthzPort               int
	suffix                    string // of its daemons' log names: "" for node 1
	initPid                   int    // PID 1 of its namespaces (node 1's hold the control plane too); 0 before startInit
	staticCPUs                bool   // its kubelet runs the static CPU manager policy (Config.StaticCPUManager)
}

func (n *node) containerdSock() string {
	return filepath.Join(n.runDir, "containerd", "containerd.sock")
}
func (n *node) cniConfDir() string { return filepath.Join(n.dir, "cni") }
func (n *node) ipamDir() string    { return filepath.Join(n.dir, "cni-ipam") }

// nodes are the cluster's nodes for cfg: node 1 keeps the paths a
// one-node cluster always had.
func nodes(cfg Config) []*node {
	ns := []*node{{name: NodeName, bridge: Bridge, podCIDR: PodCIDR, ip: NodeIP, dir: StateDir, runDir: RunDir, healthzPort: 10248}}
	if cfg.Nodes == 2 {
		ns = append(ns, &node{name: Node2Name, bridge: node2Bridge, podCIDR: node2CIDR, ip: Node2IP,
			dir: filepath.Join(StateDir, "nodes", Node2Name), runDir: filepath.Join(RunDir, "nodes", Node2Name),
			cgroupRoot: "/" + node2Cgroup, healthzPort: node2Healthz, suffix: "-" + Node2Name, staticCPUs: cfg.StaticCPUManager})
	}
	return ns
}

// setupNetwork makes the node's pod bridge before the CNI plugin would
// (it uses a bridge of that name as it finds it) and gives the node its
// address on it. The bridge rather than a dummy link: not every kernel
// here has the dummy driver.
func (n *node) setupNetwork() error {
	link := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.bridge}}
	if err := netlink.LinkAdd(link); err != nil {
		return fmt.Errorf("add bridge %s: %w", n.bridge, err)
	}
	addr, err := netlink.ParseAddr(n.ip + "/24")
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", n.ip, n.bridge, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", n.bridge, err)
	}
	return nil
}

// nodeHostPaths are the host paths a second node gets directories of its
// own for, in its mount namespace: the kubelet's root, containerd's shim
// directory, the pod logs, and cfg's (KubeVirt's) host paths.
func nodeHostPaths(cfg Config) []string {
	return append(append([]string{KubeletDir, "/run/containerd", "/var/log/pods", "/var/log/containers"}, cfg.SharedDirs...), cfg.HostPaths...)
}

// ownPath is the directory of the node's own that ownPaths mounts over
// host path p.
func (n *node) ownPath(p string) string {
	return filepath.Join(n.dir, "host", strings.ReplaceAll(strings.Trim(p, "/"), "/", "_"))
}

// Node2HostPath is where, on the machine, node 2 keeps its own copy of
// host path p (one of the paths it has to itself, such as KubeletDir):
// what its daemons and pods see at p.
func Node2HostPath(p string) string {
	return nodes(Config{Nodes: 2})[1].ownPath(p)
}

// ownPaths bind-mounts a directory of the node's own over each of
// nodeHostPaths in its mount namespace (the host keeps an empty mount
// point, recorded in CreatedDirs when Up made it), shared where node 1's
// is (KubeletDir, SharedDirs).
func (c *Cluster) ownPaths(ctx context.Context, n *node) error {
	shared := map[string]bool{KubeletDir: true}
	for _, d := range c.cfg.SharedDirs {
		shared[d] = true
	}
	for _, p := range nodeHostPaths(c.cfg) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		own := n.ownPath(p)
		if err := os.MkdirAll(own, 0o755); err != nil {
			return err
		}
		if err := c.inNamespace(ctx, n.initPid, "/usr/bin/mount", "--bind", own, p); err != nil {
			return fmt.Errorf("node %s: bind mount its own %s: %w", n.name, p, err)
		}
		if shared[p] {
			if err := c.inNamespace(ctx, n.initPid, "/usr/bin/mount", "--make-shared", p); err != nil {
				return fmt.Errorf("node %s: make %s a shared mount: %w", n.name, p, err)
			}
		}
	}
	return nil
}

// makeCgroupRoot creates the node's cgroup root in every hierarchy
// (kubelet refuses a root that does not exist), with cpuset's CPUs and
// memory nodes copied from the machine's root (an empty cpuset takes no
// task). removeCgroups takes it away.
func makeCgroupRoot(name string) error {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	for _, h := range hier {
		base := filepath.Join(cgroupRoot, h.Name())
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(base, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// startSecondNode gives node n its namespaces, directories, cgroup root
// and bridge, then its daemons (startNode).
func (c *Cluster) startSecondNode(ctx context.Context, n *node) error {
	for _, d := range []string{n.dir, n.runDir, n.cniConfDir(), n.ipamDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	pid, err := c.startInit(ctx, "init"+n.suffix)
	if err != nil {
		return err
	}
	n.initPid = pid
	if err := c.ownPaths(ctx, n); err != nil {
		return err
	}
	if err := makeCgroupRoot(strings.TrimPrefix(n.cgroupRoot, "/")); err != nil {
		return err
	}
	if err := n.setupNetwork(); err != nil {
		return err
	}
	return c.startNode(ctx, n)
}

func (c *Cluster) startNode(ctx context.Context, n *node) error {
	bin := func(name string) string { return filepath.Join(c.cfg.Bin, name) }
	if err := c.writeCNIConfig(n); err != nil {
		return err
	}
	ctrdConf, err := c.writeContainerdConfig(n)
	if err != nil {
		return err
	}
	if _, err := c.startIn(n.initPid, "containerd"+n.suffix, bin("containerd"), "--config", ctrdConf); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd"+n.suffix, time.Minute, func(context.Context) error {
		conn, err := net.Dial("unix", n.containerdSock())
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		return err
	}
	kubeletConf, err := c.writeKubeletConfig(n)
	if err != nil {
		return err
	}
	kubeconfig, err := c.writeKubeconfig("kubelet"+n.suffix, "kubelet"+n.suffix)
	if err != nil {
		return err
	}
	if _, err := c.startIn(n.initPid, "kubelet"+n.suffix, bin("kubelet"), "--config", kubeletConf, "--kubeconfig", kubeconfig,
		"--hostname-override", n.name, "--node-ip", n.ip, "--root-dir", KubeletDir,
		"--cert-dir", filepath.Join(n.dir, "kubelet-pki")); err != nil {
		return err
	}
	// One kube-proxy for the machine's one network namespace (two would
	// fight over its table), on node 1, for both nodes' pods.
	if n.name == NodeName {
		proxyKubeconfig, err := c.writeKubeconfig("kube-proxy", "kube-proxy")
		if err != nil {
			return err
		}
		proxyConf, err := c.writeKubeProxyConfig(proxyKubeconfig)
		if err != nil {
			return err
		}
		if _, err := c.start("kube-proxy", bin("kube-proxy"), "--config", proxyConf); err != nil {
			return err
		}
	}
	client, err := c.adminHTTP()
	if err != nil {
		return err
	}
	api := "https://" + NodeIP + ":" + strconv.Itoa(APIPort)
	return c.waitFor(ctx, "node "+n.name+" Ready", 3*time.Minute, func(ctx context.Context) error {
		var node struct {
			Status struct {
				Conditions []struct{ Type, Status, Message string }
			}
		}
		if err := getJSON(ctx, client, api+"/api/v1/nodes/"+n.name, &node); err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" {
				if cond.Status == "True" {
					return nil
				}
				//lint:ignore ST1005 "Ready" is the condition's name.
				return fmt.Errorf("Ready is %s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}
