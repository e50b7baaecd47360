package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/virtlauncher/virtlauncher/internal/repo"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// Who may reach the cluster's etcd and image registry while it runs: the
// machine's other users must not, or they own the cluster (a privileged
// hostPID pod written into etcd, virt-handler's image replaced in the
// registry). Each starts its part as Up does, without a cluster.

// testCluster is a Cluster whose directories are the test's own, to start
// single parts of the cluster in; they are stopped when the test ends.
func testCluster(t *testing.T, bin string) *Cluster {
	dir := t.TempDir()
	c := &Cluster{
		cfg:      Config{Bin: bin},
		stateDir: dir,
		runDir:   filepath.Join(dir, "run"),
		pkiDir:   filepath.Join(dir, "pki"),
		logDir:   filepath.Join(dir, "logs"),
		nodes:    nodes(Config{}),
	}
	for _, d := range []string{c.runDir, c.pkiDir, c.logDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.stopDaemons(context.Background()) })
	return c
}

// buildEtcd builds etcd as `make e2e-build` does (Go's build cache makes
// it a relink once that has run) and returns the directory it is in.
func buildEtcd(t *testing.T) string {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(bin, "etcd"), "go.etcd.io/etcd/server/v3")
	cmd.Dir = filepath.Join(root, "e2e", "build", "k8s")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build etcd: %v\n%s", err, out)
	}
	return bin
}

// flagValue is the value of flag in args (flag value pairs), or "".
func flagValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// tlsClient is an HTTP client over TLS with the client certificate
// certFile/keyFile (none when empty), trusting caFile (any server when
// empty: what someone probing the port would do).
func tlsClient(t *testing.T, caFile, certFile, keyFile string) *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		cfg.InsecureSkipVerify = true
	} else {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			t.Fatalf("%s holds no certificate", caFile)
		}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		// Offered whatever CAs the server names: Go's client would
		// otherwise keep back a certificate of another CA.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// etcdPut writes key through etcd's HTTP gateway of its v3 API, as
// anything holding a connection to etcd could.
func etcdPut(ctx context.Context, client *http.Client, baseURL, key, value string) error {
	body, err := json.Marshal(map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString([]byte(value)),
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v3/kv/put", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("put %s: %s: %s", key, resp.Status, msg)
	}
	return nil
}

// TestEtcdOnlyForTheAPIServer starts etcd as the cluster does and writes
// a key into it as the machine's other users could: over plain HTTP, over
// TLS without a certificate, and with a certificate of the cluster's own
// CA that is not the API server's (the admin's: kubelets, kube-proxy and
// the controller manager's signer have that CA too). All are refused; the
// client certificate the API server's flags name is let in. Its peer port
// is refused without a certificate too.
func TestEtcdOnlyForTheAPIServer(t *testing.T) {
	testenv.Slow(t, "a go build of etcd (e2e/build/k8s), run on loopback")
	noCluster(t)
	c := testCluster(t, buildEtcd(t))
	if err := c.writePKI(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.startEtcd(ctx); err != nil {
		t.Fatal(err)
	}

	const key = "/registry/pods/kube-system/not-the-apiservers"
	client := "127.0.0.1:" + strconv.Itoa(etcdPort)
	peer := "127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	plain := &http.Client{Timeout: 10 * time.Second}
	pki := func(n string) string { return filepath.Join(c.pkiDir, n) }
	for _, s := range []struct {
		who    string
		client *http.Client
		url    string
	}{
		{"plain HTTP", plain, "http://" + client},
		{"TLS without a client certificate", tlsClient(t, "", "", ""), "https://" + client},
		{"the admin's certificate (the cluster's CA)", tlsClient(t, "", pki("admin.crt"), pki("admin.key")), "https://" + client},
	} {
		if err := etcdPut(ctx, s.client, s.url, key, "x"); err == nil {
			t.Errorf("etcd took a write from %s", s.who)
		} else {
			t.Logf("%s refused: %v", s.who, err)
		}
	}
	for _, s := range []struct {
		who    string
		client *http.Client
		url    string
	}{
		{"plain HTTP", plain, "http://" + peer},
		{"TLS without a client certificate", tlsClient(t, "", "", ""), "https://" + peer},
	} {
		if err := getJSON(ctx, s.client, s.url+"/members", nil); err == nil {
			t.Errorf("etcd's peer port answered %s", s.who)
		} else {
			t.Logf("peer port, %s refused: %v", s.who, err)
		}
	}

	args := c.etcdClientArgs()
	servers, ca, cert, key2 := flagValue(args, "--etcd-servers"), flagValue(args, "--etcd-cafile"), flagValue(args, "--etcd-certfile"), flagValue(args, "--etcd-keyfile")
	if ca == "" || cert == "" || key2 == "" || !strings.HasPrefix(servers, "https://") {
		t.Fatalf("the API server's etcd flags %q: want https etcd servers, --etcd-cafile, --etcd-certfile and --etcd-keyfile", args)
	}
	if err := etcdPut(ctx, tlsClient(t, ca, cert, key2), servers, key, "x"); err != nil {
		t.Errorf("the API server's certificate: %v", err)
	}

	// Only root reads the keys; the etcd CA's key is not kept at all, so
	// no one mints another certificate etcd takes.
	keys, err := filepath.Glob(pki("*.key"))
	if err != nil || len(keys) == 0 {
		t.Fatalf("no keys in %s (%v)", c.pkiDir, err)
	}
	for _, k := range keys {
		fi, err := os.Stat(k)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", k, fi.Mode().Perm())
		}
	}
	if _, err := os.Stat(pki("etcd-ca.key")); err == nil {
		t.Errorf("the etcd CA's key is kept (%s)", pki("etcd-ca.key"))
	}
}

// TestRegistryRefusesPushes starts the registry as the cluster does, fills
// it as the suite does, and checks that over the network it serves pulls
// (containerd's GETs) and refuses every write: a push with
// go-containerregistry, a manifest PUT over the suite's tag, a blob upload,
// a DELETE. The tag still names the suite's image afterwards.
func TestRegistryRefusesPushes(t *testing.T) {
	noCluster(t)
	c := testCluster(t, "")
	if err := c.startRegistry(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ours, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := c.PauseImage()
	if err := c.Images().PushImage(ctx, ours, ref); err != nil {
		t.Fatalf("the suite's push: %v", err)
	}
	theirs, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	// What the cluster's containerds pull.
	tcp, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tcp, theirs, remote.WithContext(ctx)); err == nil {
		t.Errorf("an anonymous push of %s over the network was taken", ref)
	} else {
		t.Logf("anonymous push refused: %v", err)
	}
	manifest, err := theirs.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mt, err := theirs.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + c.Registry() + "/v2/vl-e2e/pause"
	for _, r := range []struct {
		method, url, contentType string
		body                     []byte
	}{
		{http.MethodPut, base + "/manifests/1", string(mt), manifest},
		{http.MethodPost, base + "/blobs/uploads/", "", nil},
		{http.MethodDelete, base + "/manifests/1", "", nil},
	} {
		req, err := http.NewRequestWithContext(ctx, r.method, r.url, bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if r.contentType != "" {
			req.Header.Set("Content-Type", r.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("anonymous %s %s: %s, want it refused", r.method, r.url, resp.Status)
		}
	}
	pulled, err := remote.Image(tcp, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull %s over the network: %v", ref, err)
	}
	got, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	want, err := ours.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s is %s after the anonymous writes, want the suite's %s", ref, got, want)
	}
	if err := c.Images().PushImage(ctx, ours, "registry.example:5000/x:1"); err == nil || !strings.Contains(err.Error(), c.Registry()) {
		t.Errorf("a push naming another registry: %v, want a refusal naming %s", err, c.Registry())
	}
}
