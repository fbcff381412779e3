package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/internal/testpki"
)

// socketDir is a directory for Unix sockets: short, as a socket's path
// is at most about 100 bytes, which t.TempDir can pass.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestGRPCOnUnixSocket: with -grpc-addr unix:///path, gRPC is served on
// the socket (calls, health, the healthcheck command), with the
// permissions asked for; a stale socket file left by a killed process is
// replaced; the socket file is removed at shutdown.
func TestGRPCOnUnixSocket(t *testing.T) {
	sock := filepath.Join(socketDir(t), "rls.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // the file stays, as after a SIGKILL

	s := startServe(t, "-config", "../../config", "-grpc-addr", "unix://"+sock, "-grpc-socket-mode", "0660")
	if s.grpcAddr != sock {
		t.Fatalf("listens on %q, want %q", s.grpcAddr, sock)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the socket: %v, %v; want a socket with permissions 0660", fi, err)
	}
	s.grpcAddr = "unix://" + sock
	c := s.client(t)
	if got := code(t, c, rateRequest("api", "user=alice", "action=trade")); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call over the socket: %v", got)
	}
	a, stdout, stderr := testApp(map[string]string{"RLS_GRPC_ADDR": "unix://" + sock})
	if code := a.run(context.Background(), []string{"healthcheck"}); code != exitOK || !strings.Contains(stdout.String(), "SERVING") {
		t.Fatalf("healthcheck over the socket: exit %d, %s%s", code, stdout, stderr)
	}

	s.cancel()
	select {
	case got := <-s.exit:
		s.exit <- got // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file is still there after shutdown: %v", err)
	}
}

// TestUnixSocketNotTaken: a socket another process listens on, or a file
// that is not a socket, is left alone and an error.
func TestUnixSocketNotTaken(t *testing.T) {
	dir := socketDir(t)
	busy := filepath.Join(dir, "busy.sock")
	l, err := net.Listen("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := listenUnix(net.Listen, busy, socketMode{}); err == nil || !strings.Contains(err.Error(), "another process listens") {
		t.Errorf("a socket in use: %v, want an error", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(net.Listen, file, socketMode{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a regular file: %v, want an error", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "data" {
		t.Errorf("the regular file was touched: %q, %v", b, err)
	}
}

// TestGRPCSocketFlags: the socket's flags are checked, and the Unix
// address reads as gRPC writes it.
func TestGRPCSocketFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc-socket-mode", "0660"}, "-grpc-socket-mode: -grpc-addr \":8081\" is not a Unix socket"},
		{[]string{"-grpc-addr", "unix:///run/rls.sock", "-grpc-socket-mode", "0999"}, "want permissions in octal"},
		{[]string{"-grpc-addr", "unix:///run/rls.sock", "-grpc-socket-mode", "01777"}, "want permissions in octal"},
		{[]string{"-grpc-tls-client-san", "envoy"}, "-grpc-tls-client-san checks client certificates: it needs -grpc-tls-client-ca"},
	} {
		if _, err := parseFlags(c.args, lookupIn(nil), io.Discard, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
	for addr, want := range map[string]string{"unix:///run/rls.sock": "/run/rls.sock", "unix:rls.sock": "rls.sock", "unix:/run/rls.sock": "/run/rls.sock", ":8081": ""} {
		if got, _ := unixSocketPath(addr); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
	if got, err := localTarget("unix:///run/rls.sock"); err != nil || got != "unix:/run/rls.sock" {
		t.Errorf("healthcheck's target: %q, %v", got, err)
	}
}

// TestClientSANRequired: with -grpc-tls-client-san, a client whose
// certificate holds the name is served; one whose certificate, signed by
// the same CA, does not is refused at the handshake.
func TestClientSANRequired(t *testing.T) {
	pki := testpki.New(t)
	s := startServe(t, "-config", "../../config", "-grpc-tls-cert", pki.ServerCert, "-grpc-tls-key", pki.ServerKey,
		"-grpc-tls-client-ca", pki.CACert, "-grpc-tls-client-san", "envoy.edge.svc")
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(pki.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(caPEM)
	with := func(certFile, keyFile string) rlsv3.RateLimitServiceClient {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return s.client(t, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})))
	}
	if got := code(t, with(pki.IssueClient(t, "envoy.edge.svc")), rateRequest("api", "user=a")); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a client with the SAN: %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := with(pki.ClientCert, pki.ClientKey).ShouldRateLimit(ctx, rateRequest("api", "user=a")); err == nil {
		t.Fatal("a client certificate without the SAN was served")
	}
	if !strings.Contains(s.stderr.String(), "does not hold the client SAN") {
		t.Errorf("the refusal is not logged:\n%s", s.stderr)
	}
}
