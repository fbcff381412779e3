package integration

import (
	"context"
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
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/leaky/redis"
	"github.com/envoy-rls/envoy-rls/test/integration/redistest"
)

// limitsApply checks through a replica that buckets are kept: a bucket of
// size 1 admits once, then rejects.
func limitsApply(t *testing.T, r *replica, value string) {
	t.Helper()
	req := request([]string{"v=" + value})
	if got := r.call(t, req).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v", got)
	}
	if got := r.call(t, req).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call: %v", got)
	}
}

func unavailable(t *testing.T, r *replica) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.client.ShouldRateLimit(ctx, request([]string{"v=refused"}))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	return err
}

func TestRedisAuthFromURL(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	ok := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: "redis://:s3cret@" + srv.Addr() + "/0"}})[0]
	limitsApply(t, ok, "auth")
	wrong := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: "redis://:guess@" + srv.Addr() + "/0"}})[0]
	if err := unavailable(t, wrong); strings.Contains(err.Error(), "guess") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

func TestRedisTLS(t *testing.T) {
	pki := newPKI(t)
	srv := redistest.StartTLS(t, pki.serverCert, pki.serverKey, pki.caCert, "yes")
	mtls := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: srv.URL(), CAFile: pki.caCert, CertFile: pki.clientCert, KeyFile: pki.clientKey,
	}})[0]
	limitsApply(t, mtls, "tls")
	// The server wants a client certificate.
	noCert := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL(), CAFile: pki.caCert}})[0]
	unavailable(t, noCert)
	// A client that does not trust the server's CA refuses it.
	untrusted := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: srv.URL(), CertFile: pki.clientCert, KeyFile: pki.clientKey,
	}})[0]
	unavailable(t, untrusted)
}

func TestRedisSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "mymaster")
	r := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: "redis://localhost/0", SentinelMaster: "mymaster", SentinelAddrs: []string{sentinel},
	}})[0]
	limitsApply(t, r, "sentinel")
	keys, err := master.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the master holds %v (%v), want the one bucket written through Sentinel", keys, err)
	}
}

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files.
type pki struct {
	caCert, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
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
	ca, _ := x509.ParseCertificate(caDER)
	p := pki{caCert: writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)}
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
