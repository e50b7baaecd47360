package cluster

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// These run in `make test`, without a cluster: the refusals before one is
// started, and the clean-up of what a killed run left.

func TestOnlyKubeletChains(t *testing.T) {
	kubelet := `table ip filter {
	chain KUBE-FIREWALL {
		ip saddr != 127.0.0.0/8 ip daddr 127.0.0.0/8  ct status dnat counter packets 0 bytes 0 drop
	}

	chain OUTPUT {
		type filter hook output priority filter; policy accept;
		counter packets 3562 bytes 2212528 jump KUBE-FIREWALL
	}

	chain KUBE-KUBELET-CANARY {
	}
}`
	for _, c := range []struct {
		name, listing string
		want          bool
	}{
		{"kubelet's own", kubelet, true},
		{"someone's rule in a base chain", strings.Replace(kubelet, "jump KUBE-FIREWALL", "jump KUBE-FIREWALL\n\t\ttcp dport 22 accept", 1), false},
		{"someone's chain", kubelet + "\n\tchain DOCKER {\n\t}", false},
		{"someone's jump", strings.Replace(kubelet, "jump KUBE-FIREWALL", "jump DOCKER", 1), false},
	} {
		if got := onlyKubeletChains(c.listing); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// fakeParts makes the files preflight looks for (it only checks they exist).
func fakeParts(t *testing.T) Config {
	dir := t.TempDir()
	cfg := Config{Bin: filepath.Join(dir, "bin"), CNIBin: filepath.Join(dir, "cni"), Runc: filepath.Join(dir, "runc")}
	for _, d := range []string{cfg.Bin, cfg.CNIBin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "pause"} {
		touch(t, filepath.Join(cfg.Bin, f))
	}
	touch(t, filepath.Join(cfg.CNIBin, "bridge"))
	touch(t, filepath.Join(cfg.CNIBin, "host-local"))
	touch(t, cfg.Runc)
	return cfg
}

func touch(t *testing.T, p string) {
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
}

// noCluster fails the test when a cluster of this suite runs on the
// machine: these tests would see its state.
func noCluster(t *testing.T) {
	if _, err := os.Stat(StateDir); err == nil {
		t.Fatalf("%s exists: an e2e cluster runs on this machine (make e2e); these tests need it gone", StateDir)
	}
}

func TestPreflightRefuses(t *testing.T) {
	noCluster(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, cfg *Config)
		want  string
	}{
		{"a missing part", func(t *testing.T, cfg *Config) { os.Remove(filepath.Join(cfg.Bin, "kubelet")) }, "make e2e-build"},
		{"a missing package", func(t *testing.T, cfg *Config) { os.Remove(filepath.Join(cfg.CNIBin, "bridge")) }, "Debian package containernetworking-plugins"},
		{"a port taken", func(t *testing.T, cfg *Config) {
			// Every part is there, so the preflight goes on to nft's
			// leftover check before the ports.
			testenv.Programs(t, "nft")
			l, err := net.Listen("tcp", "127.0.0.1:12379")
			if err != nil {
				t.Fatalf("the test needs port 12379 free: %v", err)
			}
			t.Cleanup(func() { l.Close() })
		}, "port 127.0.0.1:12379 is taken"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fakeParts(t)
			c.setup(t, &cfg)
			_, err := Up(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Up: %v, want an error saying %q", err, c.want)
			}
			if _, err := os.Stat(StateDir); err == nil {
				t.Errorf("a refused Up left %s", StateDir)
			}
		})
	}
}

// TestCleanUpKilledRun leaves state as a run killed mid-way would (its
// owner gone, a host directory it made) and checks that the next run's
// clean-up removes it, and that a live run's state is refused instead.
func TestCleanUpKilledRun(t *testing.T) {
	testenv.Programs(t, "nft") // lists the host's nftables tables
	noCluster(t)
	ctx := context.Background()
	cfg := fakeParts(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	tables, err := nftTables(ctx, cfg.Bin)
	if err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(t.TempDir(), "made-by-the-run")
	if err := os.Mkdir(made, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(owner int) {
		if err := os.MkdirAll(StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(state{Owner: owner, Started: time.Now(), CreatedDirs: []string{made}, TablesBefore: tables})
		if err := os.WriteFile(filepath.Join(StateDir, stateFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(StateDir) })

	// A run still going (this very test binary counts as one) is refused.
	other := exec.Command(os.Args[0], "-test.run=^TestHelperLiveRun$")
	other.Env = append(os.Environ(), "VL_E2E_LIVE_RUN=1")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	write(other.Process.Pid)
	err = CleanUp(ctx, cfg)
	other.Process.Kill()
	other.Wait()
	if err == nil || !strings.Contains(err.Error(), "still going") {
		t.Errorf("CleanUp with a live run: %v, want a refusal", err)
	}

	write(dead.Process.Pid)
	var logged []string
	cfg.Logf = func(f string, a ...any) { logged = append(logged, f) }
	if err := CleanUp(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{StateDir, made} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left after the clean-up", p)
		}
	}
	if len(logged) == 0 || !strings.Contains(logged[0], "killed run") {
		t.Errorf("the clean-up did not say what it cleaned: %q", logged)
	}
}

// TestHelperLiveRun stands for a cluster run still going (TestCleanUpKilledRun
// starts it); on its own it does nothing.
func TestHelperLiveRun(t *testing.T) {
	if os.Getenv("VL_E2E_LIVE_RUN") == "1" {
		time.Sleep(time.Minute)
	}
}

// TestNodeConfigs checks what keeps two nodes on one machine apart in
// their daemons' configuration (node.go): node 2's kubelet has its own
// address, health port, containerd socket and cgroup root, its CNI
// network its own bridge and range; node 1's stays as a one-node
// cluster's was; the one kube-proxy covers both nodes' pods.
func TestNodeConfigs(t *testing.T) {
	ns := nodes(Config{Nodes: 2, StaticCPUManager: true})
	if len(ns) != 2 || ns[0].name != NodeName || ns[1].name != Node2Name {
		t.Fatalf("nodes: %+v", ns)
	}
	if one := nodes(Config{}); len(one) != 1 {
		t.Fatalf("Config.Nodes 0: %d nodes, want 1", len(one))
	}
	// Every directory a writer uses is the test's own (the registry hosts
	// directory too: empty, containerd's writer put it in the package dir).
	c := &Cluster{stateDir: t.TempDir(), registryHostsDir: t.TempDir(), pkiDir: "/pki", cfg: Config{CNIBin: "/cni", Runc: "/runc"}}
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, n := range ns {
		n.dir, n.runDir = t.TempDir(), t.TempDir()
		if err := os.Mkdir(n.cniConfDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		path, err := c.writeKubeletConfig(n)
		if err != nil {
			t.Fatal(err)
		}
		kubelet := read(path)
		if err := c.writeCNIConfig(n); err != nil {
			t.Fatal(err)
		}
		cni := read(filepath.Join(n.cniConfDir(), "10-vl-e2e.conflist"))
		ctrdPath, err := c.writeContainerdConfig(n)
		if err != nil {
			t.Fatal(err)
		}
		ctrd := read(ctrdPath)
		wants := map[string][]string{
			"kubelet":    {"address: " + n.ip, "healthzPort: " + strconv.Itoa(n.healthzPort), "unix://" + n.containerdSock(), "podCIDR: " + n.podCIDR},
			"cni":        {`"bridge": "` + n.bridge + `"`, `"subnet": "` + n.podCIDR + `"`, `"dataDir": "` + n.ipamDir() + `"`},
			"containerd": {`address = "` + n.containerdSock() + `"`, `conf_dir = "` + n.cniConfDir() + `"`, `Root = "` + filepath.Join(n.runDir, "runc") + `"`},
		}
		got := map[string]string{"kubelet": kubelet, "cni": cni, "containerd": ctrd}
		for what, ws := range wants {
			for _, w := range ws {
				if !strings.Contains(got[what], w) {
					t.Errorf("node %s: its %s configuration has no %q:\n%s", n.name, what, w, got[what])
				}
			}
		}
		if hasRoot := strings.Contains(kubelet, "cgroupRoot: /"+node2Cgroup); hasRoot != (n.name == Node2Name) {
			t.Errorf("node %s: cgroupRoot %s in its kubelet configuration: %v", n.name, node2Cgroup, hasRoot)
		}
		if static := strings.Contains(kubelet, "cpuManagerPolicy: static"); static != (n.name == Node2Name) {
			t.Errorf("node %s: the static CPU manager policy in its kubelet configuration: %v (only node 2 has it)", n.name, static)
		}
	}
	if ns[0].containerdSock() == ns[1].containerdSock() || ns[0].ipamDir() == ns[1].ipamDir() {
		t.Errorf("the nodes share a containerd socket or an IPAM directory")
	}
	path, err := c.writeKubeProxyConfig("/kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	if p := read(path); !strings.Contains(p, "clusterCIDR: "+ClusterCIDR) {
		t.Errorf("kube-proxy's configuration does not cover both nodes' pods (%s):\n%s", ClusterCIDR, p)
	}
}
