// Package certs serves TLS from certificate files that may change: the
// current key pair (and client CA) is read again whenever its files change,
// and a new handshake uses it; a broken set of files is logged and the one
// in use is kept.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/filewatch"
)

// Server is the TLS of a server: a key pair and, for mutual TLS, the CA
// that signs its clients' certificates.
type Server struct {
	certFile, keyFile, clientCAFile string
	clientSAN                       string // "": any name
	current                         atomic.Pointer[tls.Config]
	log                             *slog.Logger
}

// ServerOption changes what a Server accepts.
type ServerOption func(*Server)

// ClientSAN accepts only client certificates that hold name among their
// subject alternative names: a DNS name (a certificate's wildcard
// matches), or an IP address when name is one. It is how the reference
// checks GRPC_CLIENT_TLS_SAN; URI and email SANs and the common name do
// not count.
func ClientSAN(name string) ServerOption {
	return func(s *Server) { s.clientSAN = name }
}

// NewServer reads the files. clientCAFile may be empty: clients are then
// not asked for certificates; else they must present one it signed.
func NewServer(certFile, keyFile, clientCAFile string, log *slog.Logger, opts ...ServerOption) (*Server, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS: a certificate and a key file are both needed")
	}
	s := &Server{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile, log: log}
	for _, o := range opts {
		o(s)
	}
	if s.clientSAN != "" && clientCAFile == "" {
		return nil, errors.New("TLS: a client SAN to check needs a client CA, which asks clients for certificates")
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again; on error the config in use stays.
func (s *Server) Reload() error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", s.certFile, s.keyFile, err)
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // gRPC: per-handshake configs must say it themselves
	}
	if s.clientCAFile != "" {
		pem, err := os.ReadFile(s.clientCAFile)
		if err != nil {
			return fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS client CA %s: no PEM certificate in it", s.clientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if s.clientSAN != "" {
			c.VerifyConnection = s.checkClientSAN
		}
	}
	s.current.Store(c)
	return nil
}

// checkClientSAN refuses a handshake whose client certificate, verified
// against the client CA, does not hold the SAN asked for. (VerifyConnection
// runs on resumed sessions too.)
func (s *Server) checkClientSAN(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return errors.New("no verified client certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	if err := leaf.VerifyHostname(s.clientSAN); err != nil {
		s.log.Warn("TLS client refused: its certificate does not hold the client SAN required", "san", s.clientSAN,
			"subject", leaf.Subject.String(), "dns", leaf.DNSNames, "ip", leaf.IPAddresses)
		return fmt.Errorf("client certificate without the SAN %s", s.clientSAN)
	}
	return nil
}

// Config returns the TLS config for a server: each handshake takes the
// files' current contents.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load(), nil
		},
	}
}

// Watch reloads the files when they change, until ctx ends.
func (s *Server) Watch(ctx context.Context) error {
	files := []string{s.certFile, s.keyFile}
	if s.clientCAFile != "" {
		files = append(files, s.clientCAFile)
	}
	return filewatch.Watch(ctx, files, 200*time.Millisecond, func() {
		if err := s.Reload(); err != nil {
			s.log.Error("TLS files changed but cannot be used: keeping the certificate in use", "err", err)
			return
		}
		s.log.Info("TLS certificate reloaded", "cert", s.certFile)
	}, s.log)
}
