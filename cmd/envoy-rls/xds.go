package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/pkg/certs"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/ui"
	"github.com/envoy-rls/envoy-rls/pkg/xdsconfig"
)

// xdsClient is the subscription -config-xds asks for: each accepted
// config replaces the service's, once before has seen it.
func xdsClient(s *settings, svc *rls.Service, m configCounter, loads *ui.Reloads, unknown func(xdsconfig.UnknownField), before func(*descriptors.Config), log *slog.Logger) (*xdsconfig.Client, error) {
	creds, err := s.xds.credentials()
	if err != nil {
		return nil, err
	}
	c := &xdsconfig.Client{
		Address: s.xds.address, NodeID: s.xds.nodeID, Credentials: creds, Options: s.configOptions(), Log: log,
		OnConfig: func(cfg *descriptors.Config) {
			before(cfg)
			svc.SetConfig(cfg)
			m.ConfigReload(true)
			loads.Loaded(nil)
			log.Info("config from the xDS server", "domains", len(cfg.Domains()))
		},
		OnRejected: func(err error) {
			m.ConfigReload(false)
			loads.Loaded(err)
		},
		OnUnknownField: unknown,
	}
	s.xds.client.apply(c)
	return c, nil
}

// credentials are TLS to the xDS server when a CA or a client certificate
// is given, else none.
func (x xdsSettings) credentials() (credentials.TransportCredentials, error) {
	if x.tlsCA == "" && x.tlsCert == "" {
		return insecure.NewCredentials(), nil
	}
	cfg, err := certs.Client(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.tlsSAN}, x.tlsCA, x.tlsCert, x.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("-config-xds-tls-*: %w", err)
	}
	return credentials.NewTLS(cfg), nil
}

// configGate is ready once the service has a config: with -config-xds it
// starts without one, and until the first arrives it answers OK to every
// request, so it should not be sent any.
type configGate struct {
	rls.Checker
	svc *rls.Service
}

var errNoConfigYet = errors.New("no config yet from the xDS server")

func (g configGate) Check(ctx context.Context) error {
	if g.svc.Config() == nil {
		return errNoConfigYet
	}
	return g.Checker.Check(ctx)
}
