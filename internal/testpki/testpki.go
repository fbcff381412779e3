// Package testpki makes a throwaway certificate authority for tests: a
// server certificate for 127.0.0.1 and localhost, and a client certificate,
// as PEM files.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the paths of the PEM files.
type Files struct {
	CACert, CAKey         string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// New writes a CA, a server and a client certificate into a temporary
// directory of t.
func New(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CACert: writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER), CAKey: writePEM(t, dir, "ca-key.pem", "EC PRIVATE KEY", caKeyDER)}
	f.ServerCert, f.ServerKey = Issue(t, dir, ca, caKey, "server", x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = Issue(t, dir, ca, caKey, "client", x509.ExtKeyUsageClientAuth)
	return f
}

var serial int64 = 100

// Issue writes a certificate for 127.0.0.1 and localhost signed by ca, and
// its key, as name.pem and name-key.pem in dir.
func Issue(t testing.TB, dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) (cert, key string) {
	t.Helper()
	k := newKey(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// IssueClient writes a client certificate signed by f's CA whose only
// SANs are dnsNames, and its key, into a new temporary directory of t.
func (f Files) IssueClient(t testing.TB, dnsNames ...string) (cert, key string) {
	t.Helper()
	ca, caKey := f.loadCA(t)
	k := newKey(t)
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return writePEM(t, dir, "client.pem", "CERTIFICATE", der), writePEM(t, dir, "client-key.pem", "EC PRIVATE KEY", keyDER)
}

// loadCA reads f's CA certificate and key back.
func (f Files) loadCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s: no PEM block", path)
		}
		return block.Bytes
	}
	ca, err := x509.ParseCertificate(read(f.CACert))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParseECPrivateKey(read(f.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	return ca, caKey
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
