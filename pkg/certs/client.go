package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Client returns base (cloned) with the CA that signs the server's
// certificate, if caFile is set, and a client certificate for mutual TLS,
// if certFile is set: the TLS of a client of Redis or of an xDS server.
func Client(base *tls.Config, caFile, certFile, keyFile string) (*tls.Config, error) {
	c := base.Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA %s: no PEM certificate in it", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
