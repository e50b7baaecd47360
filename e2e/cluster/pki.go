package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ca is a certificate authority made for one cluster: its key never
// leaves the cluster's state directory, and it lives as long as the run.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// cert is what a leaf certificate says about its holder.
type cert struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool
	client bool
}

func newCA(cn string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", cn, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: c, key: key}, nil
}

// issue writes NAME.crt and NAME.key into dir.
func (a *ca) issue(dir, name string, c cert) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: c.cn, Organization: c.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     c.dns,
		IPAddresses:  c.ips,
	}
	if c.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if c.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return fmt.Errorf("issue certificate %s: %w", name, err)
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

// write writes NAME.crt and NAME.key (the CA's key, to sign with later)
// into dir.
func (a *ca) write(dir, name string) error {
	if err := a.writeCert(dir, name); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), a.key)
}

// writeCert writes only NAME.crt, for those who trust the CA; its key
// stays in memory and goes with the process.
func (a *ca) writeCert(dir, name string) error {
	return writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", a.cert.Raw)
}

// writeServiceAccountKey writes the key pair that signs service account
// tokens (sa.key for the controller manager and the API server's signer,
// sa.pub for the API server's verifier).
func writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		// crypto/rand does not fail on Linux (getrandom); if it ever
		// did, a certificate with a zero serial is still usable here.
		return big.NewInt(1)
	}
	return n
}
