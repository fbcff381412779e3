package certs

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testpki"
)

// TestClientSAN: with a client SAN required, a client certificate signed
// by the client CA is accepted when it holds that name among its DNS SANs
// (a wildcard matching it too), and refused at the handshake otherwise.
func TestClientSAN(t *testing.T) {
	pki := testpki.New(t)
	srv, err := NewServer(pki.ServerCert, pki.ServerKey, pki.CACert, slog.New(slog.DiscardHandler), ClientSAN("envoy.edge.svc"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	answer := func(certFile, keyFile string) (string, error) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		d := &net.Dialer{Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{cert}})
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c) // TLS 1.3: a refusal arrives after the client's side of the handshake
		return string(b), err
	}
	for _, c := range []struct {
		what   string
		sans   []string
		accept bool
	}{
		{"the SAN", []string{"other.example", "envoy.edge.svc"}, true},
		{"a wildcard matching it", []string{"*.edge.svc"}, true},
		{"another name", []string{"envoy.core.svc"}, false},
		{"no SAN", nil, false},
	} {
		certFile, keyFile := pki.IssueClient(t, c.sans...)
		got, err := answer(certFile, keyFile)
		if c.accept && (err != nil || got != "ok") {
			t.Errorf("%s: %q, %v, want accepted", c.what, got, err)
		}
		if !c.accept && (err == nil || got == "ok") {
			t.Errorf("%s: %q, %v, want refused at the handshake", c.what, got, err)
		}
	}
	if _, err := NewServer(pki.ServerCert, pki.ServerKey, "", slog.New(slog.DiscardHandler), ClientSAN("x")); err == nil || !strings.Contains(err.Error(), "client CA") {
		t.Errorf("a client SAN without a client CA: %v, want an error", err)
	}
}
