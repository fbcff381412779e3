package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"

	"github.com/envoy-rls/envoy-rls/pkg/certs"
	"github.com/envoy-rls/envoy-rls/pkg/grpcconn"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// HTTP limits. A client that sends half a request, or sits on an idle
// connection, is cut off within seconds instead of holding a file
// descriptor forever.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 10 * time.Second
	httpIdleTimeout       = 60 * time.Second
	httpMaxHeaderBytes    = 16 << 10
	// adminWriteTimeout lets a CPU profile run its default 30 seconds and
	// up to a minute more.
	adminWriteTimeout = 90 * time.Second
)

// listenAddrs are the addresses the service listens on; admin is nil when
// the admin server is off.
type listenAddrs struct {
	grpc, http, admin net.Addr
}

func (l listenAddrs) adminString() string {
	if l.admin == nil {
		return "off"
	}
	return l.admin.String()
}

// servers are the gRPC, HTTP and admin servers of a running service.
type servers struct {
	grpc   *grpc.Server
	quotas *rlqs.Service // its streams end after the drain
	http   []*http.Server
	addrs  listenAddrs
	json   bool       // POST /json is served
	failed chan error // a server that stopped on its own
}

// streamWorkers is how many calls the gRPC server runs on its workers at
// once; a few hundred idle goroutines cost a few MiB.
const streamWorkers = 256

// startServers listens on every address of s and serves there until
// shutdown. Nothing listens if one address cannot be had.
func (a *app) startServers(ctx context.Context, s *settings, svc *rls.Service, quotas *rlqs.Service, hs *health.Server, metrics, refMetrics http.Handler, pg *page, log *slog.Logger) (*servers, error) {
	// Calls run on long-lived workers, whose stacks have grown to what a
	// call needs: a goroutine per call would start small and grow its stack
	// on every call that reaches Redis (copying it, up to an eighth of the
	// CPU under load). Calls beyond the workers get a goroutine each.
	grpcOpts := []grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers)}
	if s.grpcMaxConnAge > 0 {
		// Envoy keeps its connections to the replicas it first found; an
		// age makes it reconnect now and then, so new replicas get calls.
		grpcOpts = append(grpcOpts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: s.grpcMaxConnAge, MaxConnectionAgeGrace: s.grpcMaxConnAgeGrace}))
	}
	var creds credentials.TransportCredentials // plaintext unless TLS
	if s.grpcTLSCert != "" {
		var tlsOpts []certs.ServerOption
		if s.grpcTLSClientSAN != "" {
			tlsOpts = append(tlsOpts, certs.ClientSAN(s.grpcTLSClientSAN))
		}
		tlsFiles, err := certs.NewServer(s.grpcTLSCert, s.grpcTLSKey, s.grpcTLSClientCA, log, tlsOpts...)
		if err != nil {
			return nil, fmt.Errorf("gRPC TLS: %w", err)
		}
		if err := tlsFiles.Watch(ctx); err != nil {
			log.Warn("TLS files will not be reloaded when they change", "err", err)
		}
		creds = credentials.NewTLS(tlsFiles.Config())
	}
	// A stream whose client stops reading its answers is ended with its
	// connection (rlqs.Options.CloseConn): the credentials let it be found.
	grpcOpts = append(grpcOpts, grpc.Creds(grpcconn.Credentials(creds)))
	// /json has no client certificates to check: where gRPC requires them,
	// it would be a way around them, so it is off unless asked for.
	jsonOn := s.httpJSON.or(s.grpcTLSClientCA == "")

	var listeners []net.Listener
	listen := func(what, addr string) (net.Listener, error) {
		l, err := a.listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("cannot listen for %s on %s: %w", what, addr, err)
		}
		listeners = append(listeners, l)
		return l, nil
	}
	// gRPC listens first: nothing else to close if it cannot.
	grpcLis, err := a.listenGRPC(s)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for gRPC on %s: %w", s.grpcAddr, err)
	}
	listeners = append(listeners, grpcLis)
	httpLis, err := listen("HTTP", s.httpAddr)
	if err != nil {
		return nil, err
	}
	var adminLis net.Listener
	var admin http.Handler
	if s.adminAddr != "" {
		if adminLis, err = listen("admin HTTP", s.adminAddr); err != nil {
			return nil, err
		}
		// Like /json, the buckets' endpoints check no client certificate.
		buckets := s.adminBuckets.or(s.grpcTLSClientCA == "")
		if admin, err = pg.handler(ctx, rls.AdminHandler(svc, s.pprof, buckets), adminLis.Addr(), svc, quotas); err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("the operator's page: %w", err)
		}
	}

	var refLis net.Listener
	if refMetrics != nil {
		if refLis, err = listen("envoyproxy/ratelimit's metrics", s.refMetrics.addr); err != nil {
			return nil, err
		}
	}

	srv := &servers{
		grpc:   rls.NewGRPCServer(svc, quotas, hs, log, grpcOpts...),
		quotas: quotas,
		addrs:  listenAddrs{grpc: grpcLis.Addr(), http: httpLis.Addr()},
		json:   jsonOn,
		failed: make(chan error, 4),
	}
	go func() { srv.failed <- srv.grpc.Serve(grpcLis) }()
	srv.serveHTTP(httpLis, rls.HTTPHandler(svc, hs, metrics, jsonOn), httpWriteTimeout, log)
	if refLis != nil {
		srv.serveHTTP(refLis, refMetrics, httpWriteTimeout, log)
	}
	if adminLis != nil {
		srv.addrs.admin = adminLis.Addr()
		srv.serveHTTP(adminLis, admin, adminWriteTimeout, log)
	}
	return srv, nil
}

// listenGRPC listens on -grpc-addr: a TCP address, or a Unix socket
// ("unix:///path"). Either way the same server serves there, with the
// same TLS, keepalive and limits.
func (a *app) listenGRPC(s *settings) (net.Listener, error) {
	if path, ok := unixSocketPath(s.grpcAddr); ok {
		return listenUnix(a.listen, path, s.grpcSocketMode)
	}
	return a.listen("tcp", s.grpcAddr)
}

func (srv *servers) serveHTTP(l net.Listener, h http.Handler, writeTimeout time.Duration, log *slog.Logger) {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		// Malformed requests and cut connections are the clients' doing:
		// at debug level, so that nobody can flood the log.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	srv.http = append(srv.http, hs)
	go func() { srv.failed <- hs.Serve(l) }()
}

// drain reports NOT_SERVING in hs, goes on serving for delay so that load
// balancers see it and send calls elsewhere, then shuts down.
func (srv *servers) drain(hs *health.Server, delay, timeout time.Duration, log *slog.Logger) {
	hs.Shutdown() // NOT_SERVING from now on
	if delay > 0 {
		log.Info("shutting down: NOT_SERVING, still serving while load balancers drain", "delay", delay)
		time.Sleep(delay)
	}
	log.Info("shutting down: no new calls, finishing those in flight", "timeout", timeout)
	if srv.quotas != nil {
		// RLQS streams last as long as their Envoys: ended now, each Envoy
		// keeps its assignments until their TTL while it reconnects.
		srv.quotas.Close()
	}
	srv.shutdown(timeout, log)
}

// shutdown stops every server gracefully, and for good once timeout passes.
func (srv *servers) shutdown(timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		srv.grpc.GracefulStop()
		close(done)
	}()
	for _, h := range srv.http {
		h.Shutdown(ctx)
	}
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("calls still in flight at the shutdown timeout: stopping anyway")
		srv.grpc.Stop()
	}
}
