// Package cluster brings up a real single-node Kubernetes on this machine
// for the e2e suite (e2e/README.md) and takes it down again: etcd, the API
// server, controller manager, scheduler, containerd, kubelet and
// kube-proxy, built from their Go modules at exact versions
// (e2e/build/*), with an image registry of our own on loopback.
//
// It writes only to its own directories (StateDir, RunDir), to
// /var/lib/kubelet (KubeVirt's virt-handler mounts that exact path; it is
// refused when it exists and is not ours), to host paths KubeVirt's
// DaemonSet mounts (recorded and removed when they were not there before),
// and it makes a link (Bridge), kube-proxy's nftables
// tables, and the kubepods cgroups. Everything is removed by Down, or by
// the next Up when a run was killed.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/images"
	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// The cluster's fixed addresses. The node's address is on the pod bridge,
// a link of our own, so nothing listens on the machine's real interfaces.
const (
	NodeName     = "vl-e2e"
	Bridge       = "vle2ecni0"
	PodCIDR      = "10.244.0.0/24"
	PodGateway   = "10.244.0.1"
	NodeIP       = PodGateway // the bridge plugin wants the bridge to have only the gateway address
	ServiceCIDR  = "10.96.0.0/16"
	APIServiceIP = "10.96.0.1"
	APIPort      = 6443
	etcdPort     = 12379
	etcdPeerPort = 12380
	registryPort = 15000

	StateDir   = "/var/lib/virtlauncher-e2e"
	RunDir     = "/run/virtlauncher-e2e"
	KubeletDir = "/var/lib/kubelet"
)

// Config is what Up needs from outside.
type Config struct {
	Bin          string   // the built binaries: kube-apiserver, kubelet, containerd, etcd, pause... (bin/e2e)
	CNIBin       string   // the CNI plugins (Debian's containernetworking-plugins: /usr/lib/cni)
	Runc         string   // the OCI runtime (Debian's runc: /usr/sbin/runc)
	FeatureGates []string // Kubernetes feature gates, NAME=true|false
	// HostPaths are host directories the workload creates (KubeVirt's
	// /var/lib/kubevirt-node-labeller and friends): removed by Down when
	// they were not there before Up.
	HostPaths []string
	// SharedDirs are host directories a pod mounts with Bidirectional
	// propagation (KubeVirt's /var/run/kubevirt), which needs a shared
	// mount. Up refuses them when they exist, makes each a shared bind
	// mount of itself (the machine's own / stays as it is), and Down
	// removes them. KubeletDir is always one.
	SharedDirs []string
	// Nodes is how many nodes: 1 (also when 0) or 2 (node.go).
	Nodes int
	// StaticCPUManager runs node 2's kubelet with the static CPU manager
	// policy (node.go: staticCPUManager), so a Guaranteed pod's
	// integer-CPU container gets CPUs of its own there. Node 1 keeps the
	// default policy: the control plane's pods share both CPUs.
	StaticCPUManager bool
	Logf             func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	cfg              Config
	stateDir, runDir string
	pkiDir, logDir   string
	registryHostsDir string
	nodes            []*node
	procs            []*proc
	restrictOOM      bool // we may not lower OOM score adjustments (no CAP_SYS_RESOURCE)
	registry         *images.Registry
	// Kubeconfig is the cluster admin's (system:masters) kubeconfig.
	Kubeconfig string
	st         state
}

// state is what a killed run leaves for the next one to clean up.
type state struct {
	Owner       int       `json:"owner"`
	Started     time.Time `json:"started"`
	Pids        []int     `json:"pids"`
	IPForward   string    `json:"ipForward"`   // net.ipv4.ip_forward before Up
	CreatedDirs []string  `json:"createdDirs"` // host paths that were not there before Up
	// TablesBefore are the nftables tables ("FAMILY NAME") there were before Up.
	TablesBefore []string `json:"tablesBefore"`
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// Registry is the host:port of the cluster's image registry, as image
// references in the cluster name it.
func (c *Cluster) Registry() string { return "localhost:" + strconv.Itoa(registryPort) }

// Images is the cluster's image registry, to push images into.
func (c *Cluster) Images() *images.Registry { return c.registry }

// PauseImage is the pod sandbox image (e2e/pause), which Up pushes.
func (c *Cluster) PauseImage() string { return c.Registry() + "/vl-e2e/pause:1" }

// Nodes are the names of the cluster's nodes.
func (c *Cluster) Nodes() []string {
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.name)
	}
	return names
}

// Log is the path of a daemon's log.
func (c *Cluster) Log(name string) string { return filepath.Join(c.logDir, name+".log") }

// Up brings the cluster up and waits until its nodes are Ready. On error it
// has taken down whatever it started.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	c := &Cluster{
		cfg:              cfg,
		stateDir:         StateDir,
		runDir:           RunDir,
		pkiDir:           filepath.Join(StateDir, "pki"),
		logDir:           filepath.Join(StateDir, "logs"),
		registryHostsDir: filepath.Join(StateDir, "certs.d"),
		nodes:            nodes(cfg),
	}
	if cfg.Nodes != 0 && cfg.Nodes != 1 && cfg.Nodes != 2 {
		return nil, fmt.Errorf("Config.Nodes is %d: a cluster here has one node or two", cfg.Nodes)
	}
	if err := c.preflight(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.logf("bring-up failed, taking down what was started: %v", err)
			if derr := c.Down(context.WithoutCancel(ctx)); derr != nil {
				err = fmt.Errorf("%w (and taking it down: %v)", err, derr)
			}
		}
	}()
	c.st = state{Owner: os.Getpid(), Started: time.Now().UTC()}
	for _, d := range []string{c.stateDir, c.runDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	if c.st.TablesBefore, err = nftTables(ctx, cfg.Bin); err != nil {
		return nil, err
	}
	// containerd's shim makes /run/containerd whatever its configuration,
	// and kubelet the pod log directories.
	for _, p := range nodeHostPaths(cfg) {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			c.st.CreatedDirs = append(c.st.CreatedDirs, p)
		}
	}
	if err := c.recordState(); err != nil {
		return nil, err
	}
	for _, d := range []string{c.pkiDir, c.logDir, c.nodes[0].cniConfDir(), c.registryHostsDir, c.nodes[0].ipamDir(), c.Home()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if c.nodes[0].initPid, err = c.startInit(ctx, "init"); err != nil {
		return nil, err
	}
	for _, d := range append([]string{KubeletDir}, cfg.SharedDirs...) {
		if err := c.makeShared(ctx, d); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(KubeletDir, kubeletMarker), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := c.writePKI(); err != nil {
		return nil, err
	}
	if err := c.setupNetwork(); err != nil {
		return nil, err
	}
	if err := c.startRegistry(); err != nil {
		return nil, err
	}
	if err := c.pushPause(ctx); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx, c.nodes[0]); err != nil {
		return nil, err
	}
	for _, n := range c.nodes[1:] {
		if err := c.startSecondNode(ctx, n); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	return c, nil
}

// preflight refuses what would give a half cluster: missing parts, a
// cluster of someone else's, a run still going, a port already taken.
// A leftover of a killed run of ours is cleaned up first.
func (c *Cluster) preflight(ctx context.Context) error {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "pause"} {
		if _, err := os.Stat(filepath.Join(c.cfg.Bin, b)); err != nil {
			return fmt.Errorf("%s: %w (build the cluster's parts with `make e2e-build`)", filepath.Join(c.cfg.Bin, b), err)
		}
	}
	for _, f := range []struct{ path, pkg string }{
		{c.cfg.Runc, "runc"},
		{filepath.Join(c.cfg.CNIBin, "bridge"), "containernetworking-plugins"},
		{filepath.Join(c.cfg.CNIBin, "host-local"), "containernetworking-plugins"},
		{"/usr/sbin/nft", "nftables"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s is missing: install the Debian package %s (scripts/install-e2e-deps)", f.path, f.pkg)
		}
	}
	if err := cleanLeftovers(ctx, c.cfg, c.logf); err != nil {
		return err
	}
	c.restrictOOM = !hasCapability(capSysResource)
	if c.restrictOOM {
		c.logf("no CAP_SYS_RESOURCE: pods' negative OOM score adjustments are clamped at 0 (containerd's restrict_oom_score_adj)")
	}
	if _, err := os.Lstat(KubeletDir); err == nil {
		return fmt.Errorf("%s exists and is not this suite's (no %s in it): another kubelet may use this machine; refusing to share it", KubeletDir, kubeletMarker)
	}
	for _, d := range c.cfg.SharedDirs {
		if _, err := os.Lstat(d); err == nil {
			return fmt.Errorf("%s exists and is not this suite's: another KubeVirt may use this machine; refusing to share it", d)
		}
	}
	for _, a := range []string{
		"127.0.0.1:" + strconv.Itoa(etcdPort), "127.0.0.1:" + strconv.Itoa(etcdPeerPort),
		"127.0.0.1:" + strconv.Itoa(registryPort),
		"127.0.0.1:10248", "127.0.0.1:10249", "127.0.0.1:10256", "127.0.0.1:10257", "127.0.0.1:10259",
		"0.0.0.0:" + strconv.Itoa(APIPort), "0.0.0.0:10250", "127.0.0.1:" + strconv.Itoa(node2Healthz),
	} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("port %s is taken (%v): the cluster needs it; stop what listens there (ss -ltnp)", a, err)
		}
		l.Close()
	}
	return nil
}

func (c *Cluster) writePKI() error {
	root, err := newCA("vl-e2e-ca")
	if err != nil {
		return err
	}
	if err := root.write(c.pkiDir, "ca"); err != nil {
		return err
	}
	front, err := newCA("vl-e2e-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := front.write(c.pkiDir, "front-proxy-ca"); err != nil {
		return err
	}
	if err := front.issue(c.pkiDir, "front-proxy-client", cert{cn: "front-proxy-client", client: true}); err != nil {
		return err
	}
	certs := map[string]cert{
		"apiserver": {cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			ips: []net.IP{net.ParseIP(NodeIP), net.ParseIP(APIServiceIP), net.ParseIP("127.0.0.1")}},
		"apiserver-kubelet-client": {cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true},
		"admin":                    {cn: "vl-e2e-admin", orgs: []string{"system:masters"}, client: true},
		"controller-manager":       {cn: "system:kube-controller-manager", client: true},
		"scheduler":                {cn: "system:kube-scheduler", client: true},
		"kube-proxy":               {cn: "system:kube-proxy", client: true},
	}
	for _, n := range c.nodes {
		certs["kubelet"+n.suffix] = cert{cn: "system:node:" + n.name, orgs: []string{"system:nodes"}, client: true}
	}
	for name, ct := range certs {
		if err := root.issue(c.pkiDir, name, ct); err != nil {
			return err
		}
	}
	if err := writeEtcdPKI(c.pkiDir); err != nil {
		return err
	}
	return writeServiceAccountKey(c.pkiDir)
}

// writeEtcdPKI gives etcd a CA of its own, as kubeadm does: etcd lets in
// every certificate its trusted CA signed, and the cluster's CA signs those
// of the admin, the kubelets, kube-proxy and whatever certificate signing
// request the controller manager signs. The etcd CA signs two: etcd's own
// (serving clients and its peer port) and the API server's, the one client
// etcd has. Its key is not kept: no one can sign a third.
func writeEtcdPKI(dir string) error {
	etcdCA, err := newCA("vl-e2e-etcd-ca")
	if err != nil {
		return err
	}
	if err := etcdCA.writeCert(dir, "etcd-ca"); err != nil {
		return err
	}
	if err := etcdCA.issue(dir, "etcd-server", cert{cn: "vl-e2e-etcd", server: true, client: true,
		dns: []string{"localhost"}, ips: []net.IP{net.ParseIP("127.0.0.1")}}); err != nil {
		return err
	}
	return etcdCA.issue(dir, "apiserver-etcd-client", cert{cn: "kube-apiserver-etcd-client", client: true})
}

func (c *Cluster) startRegistry() error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(registryPort))
	if err != nil {
		return fmt.Errorf("image registry: %w", err)
	}
	c.registry = images.NewRegistry(c.Registry())
	c.registry.Serve(l)
	c.logf("image registry on %s", c.Registry())
	return nil
}

// etcdURL is where etcd serves its clients (the API server alone): TLS on
// loopback, a client certificate of the etcd CA required.
func etcdURL() string { return "https://127.0.0.1:" + strconv.Itoa(etcdPort) }

// etcdClientArgs are the API server's flags for reaching etcd.
func (c *Cluster) etcdClientArgs() []string {
	return []string{"--etcd-servers", etcdURL(),
		"--etcd-cafile", filepath.Join(c.pkiDir, "etcd-ca.crt"),
		"--etcd-certfile", filepath.Join(c.pkiDir, "apiserver-etcd-client.crt"),
		"--etcd-keyfile", filepath.Join(c.pkiDir, "apiserver-etcd-client.key")}
}

// startEtcd starts etcd and waits until it answers. Both its ports are on
// loopback, where every user of the machine reaches them, so both want a
// client certificate of the etcd CA (writeEtcdPKI): whoever writes to etcd
// owns the cluster and, through a privileged pod, the machine.
func (c *Cluster) startEtcd(ctx context.Context) error {
	pki := func(n string) string { return filepath.Join(c.pkiDir, n) }
	peerURL := "https://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	// The cluster lives for one run: no fsync, so a shared disk's
	// latency does not make the API server time out.
	if _, err := c.start("etcd", filepath.Join(c.cfg.Bin, "etcd"), "--name", NodeName, "--data-dir", filepath.Join(c.stateDir, "etcd"),
		"--listen-client-urls", etcdURL(), "--advertise-client-urls", etcdURL(),
		"--cert-file", pki("etcd-server.crt"), "--key-file", pki("etcd-server.key"),
		"--client-cert-auth", "--trusted-ca-file", pki("etcd-ca.crt"),
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--peer-cert-file", pki("etcd-server.crt"), "--peer-key-file", pki("etcd-server.key"),
		"--peer-client-cert-auth", "--peer-trusted-ca-file", pki("etcd-ca.crt"),
		"--initial-cluster", NodeName+"="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	client, err := c.certHTTP("etcd-ca", "apiserver-etcd-client")
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "etcd", time.Minute, httpOK(client, etcdURL()+"/health"))
}

func (c *Cluster) startControlPlane(ctx context.Context) error {
	bin := func(n string) string { return filepath.Join(c.cfg.Bin, n) }
	pki := func(n string) string { return filepath.Join(c.pkiDir, n) }
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	apiserverArgs := append(c.etcdClientArgs(),
		"--advertise-address", NodeIP, "--bind-address", NodeIP, "--secure-port", strconv.Itoa(APIPort),
		"--service-cluster-ip-range", ServiceCIDR,
		"--client-ca-file", pki("ca.crt"),
		"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
		"--kubelet-client-certificate", pki("apiserver-kubelet-client.crt"), "--kubelet-client-key", pki("apiserver-kubelet-client.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pki("sa.pub"), "--service-account-signing-key-file", pki("sa.key"),
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		// The node's name is not in any DNS: logs, exec and port-forward
		// go to its address.
		"--kubelet-preferred-address-types", "InternalIP",
		// The aggregation layer: KubeVirt's virt-api serves
		// subresources.kubevirt.io (console, pause...) behind it.
		"--requestheader-client-ca-file", pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", pki("front-proxy-client.crt"), "--proxy-client-key-file", pki("front-proxy-client.key"),
		"--feature-gates", c.featureGates(),
		"--profiling=false")
	if _, err := c.start("kube-apiserver", bin("kube-apiserver"), apiserverArgs...); err != nil {
		return err
	}
	admin, err := c.writeKubeconfig("admin", "admin")
	if err != nil {
		return err
	}
	c.Kubeconfig = admin
	client, err := c.adminHTTP()
	if err != nil {
		return err
	}
	api := "https://" + NodeIP + ":" + strconv.Itoa(APIPort)
	if err := c.waitFor(ctx, "kube-apiserver", 3*time.Minute, httpOK(client, api+"/readyz")); err != nil {
		return err
	}
	cm, err := c.writeKubeconfig("controller-manager", "controller-manager")
	if err != nil {
		return err
	}
	if _, err := c.start("kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig", cm, "--authentication-kubeconfig", cm, "--authorization-kubeconfig", cm,
		"--bind-address", "127.0.0.1", "--secure-port", "10257",
		"--service-account-private-key-file", pki("sa.key"), "--root-ca-file", pki("ca.crt"),
		"--cluster-signing-cert-file", pki("ca.crt"), "--cluster-signing-key-file", pki("ca.key"),
		"--use-service-account-credentials=true", "--leader-elect=false",
		"--feature-gates", c.featureGates(), "--profiling=false"); err != nil {
		return err
	}
	sched, err := c.writeKubeconfig("scheduler", "scheduler")
	if err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig", sched, "--authentication-kubeconfig", sched, "--authorization-kubeconfig", sched,
		"--bind-address", "127.0.0.1", "--secure-port", "10259", "--leader-elect=false",
		"--feature-gates", c.featureGates(), "--profiling=false"); err != nil {
		return err
	}
	// Pods can run only once the default service account exists.
	return c.waitFor(ctx, "the default service account", 2*time.Minute, httpOK(client, api+"/api/v1/namespaces/default/serviceaccounts/default"))
}

// adminHTTP is an HTTP client with the admin's certificate.
func (c *Cluster) adminHTTP() (*http.Client, error) { return c.certHTTP("ca", "admin") }

// certHTTP is an HTTP client with the certificate NAME.crt/.key of the
// PKI directory, trusting only the CA CA.crt.
func (c *Cluster) certHTTP(ca, name string) (*http.Client, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(c.pkiDir, name+".crt"), filepath.Join(c.pkiDir, name+".key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(c.pkiDir, ca+".crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", filepath.Join(c.pkiDir, ca+".crt"))
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12,
	}}}, nil
}

func httpOK(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error { return getJSON(ctx, client, url, nil) }
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *Cluster) recordState() error {
	c.st.Pids = c.st.Pids[:0]
	for _, p := range c.procs {
		c.st.Pids = append(c.st.Pids, p.cmd.Process.Pid)
	}
	data, err := json.MarshalIndent(c.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.stateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("record cluster state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(c.stateDir, stateFile))
}

// Down takes the cluster down and removes everything Up made. It is safe
// to call on a partly started cluster.
func (c *Cluster) Down(ctx context.Context) error {
	c.stopDaemons(ctx)
	return cleanLeftovers(ctx, c.cfg, c.logf)
}

// stopDaemons stops what Up started, in reverse order: kube-proxy and
// kubelet first, etcd last, then the namespaces' PID 1, which takes the
// pods with it; and the registry.
func (c *Cluster) stopDaemons(ctx context.Context) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	if c.registry != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = c.registry.Close(sctx)
		cancel()
	}
}

// pushPause puts the pod sandbox image (e2e/pause) into the registry
// before containerd needs it.
func (c *Cluster) pushPause(ctx context.Context) error {
	return c.registry.Push(ctx, ociimage.Spec{
		Files:   []ociimage.File{{Dst: "/pause", Src: filepath.Join(c.cfg.Bin, "pause")}},
		Epoch:   time.Unix(0, 0).UTC(),
		Config:  ociimage.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		FilesBy: "e2e/pause",
	}, c.PauseImage())
}

// CleanUp removes what a killed run left behind, if anything.
func CleanUp(ctx context.Context, cfg Config) error { return cleanLeftovers(ctx, cfg, cfg.Logf) }

// Home is a HOME for kubectl and virtctl (their caches), in our state directory.
func (c *Cluster) Home() string { return filepath.Join(c.stateDir, "home") }
