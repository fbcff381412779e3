package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky/memory"
	"github.com/envoy-rls/envoy-rls/pkg/leaky/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// serve runs the service until SIGINT or SIGTERM (or ctx ends), then stops
// taking calls and lets the calls in flight finish.
func (a *app) serve(ctx context.Context, args []string) int {
	s, err := parseFlags(args, a.lookupEnv, a.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK // the flag package printed the flags
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls: %v\nRun 'envoy-rls help' for the flags.\n", err)
		return exitUsage
	}
	log := s.logger(a.stderr)

	cfg, warnings, err := descriptors.Load(s.config)
	for _, w := range warnings {
		log.Warn("config: " + w.String())
	}
	if err != nil {
		logConfigError(log, err)
		return exitError
	}

	store, err := openStore(s, log)
	if err != nil {
		log.Error("cannot open the store", "store", s.store, "err", err)
		return exitError
	}
	defer store.Close()

	headers := rls.LeakyHeaders
	if s.responseHeaders == "none" {
		headers = rls.NoHeaders
	}
	svc, err := rls.New(rls.Options{Store: store, Config: cfg, Logger: log, Headers: headers})
	if err != nil {
		log.Error("cannot start the service", "err", err)
		return exitError
	}
	hs := health.NewServer()
	grpcServer := rls.NewGRPCServer(svc, hs, log)
	httpServer := &http.Server{Handler: rls.HealthHandler(hs), ReadHeaderTimeout: 5 * time.Second}

	grpcLis, err := net.Listen("tcp", s.grpcAddr)
	if err != nil {
		log.Error("cannot listen for gRPC", "addr", s.grpcAddr, "err", err)
		return exitError
	}
	httpLis, err := net.Listen("tcp", s.httpAddr)
	if err != nil {
		grpcLis.Close()
		log.Error("cannot listen for HTTP", "addr", s.httpAddr, "err", err)
		return exitError
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	failed := make(chan error, 2)
	go func() { failed <- grpcServer.Serve(grpcLis) }()
	go func() { failed <- httpServer.Serve(httpLis) }()
	rls.SetServing(hs, false)
	watching := make(chan struct{})
	go func() { defer close(watching); rls.WatchStore(ctx, store, hs, log) }()
	defer func() { <-watching }()
	log.Info("envoy-rls serving", "version", version(), "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"store", s.store, "config", s.config, "domains", len(cfg.Domains()))
	if a.ready != nil {
		a.ready(grpcLis.Addr(), httpLis.Addr())
	}

	code := exitOK
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new calls, finishing those in flight", "timeout", s.shutdownTimeout)
	case err := <-failed:
		log.Error("server failed", "err", err)
		code = exitError
	}
	hs.Shutdown() // NOT_SERVING from now on
	shutdown(grpcServer, httpServer, s.shutdownTimeout, log)
	return code
}

// shutdown stops both servers gracefully, and for good once timeout passes.
func shutdown(g *grpc.Server, h *http.Server, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	h.Shutdown(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("calls still in flight at the shutdown timeout: stopping anyway")
		g.Stop()
	}
}

// store is what serve needs of a store.
type store interface {
	rls.Store
	// Check reports whether the store answers.
	Check(ctx context.Context) error
	Close() error
}

func openStore(s *settings, log *slog.Logger) (store, error) {
	if s.store == "memory" {
		return memory.New(memory.Options{MaxBuckets: s.memoryMaxBuckets})
	}
	goredis.SetLogger(redisLog{log})
	mode, err := redis.ParseMode(s.redisMode)
	if err != nil {
		return nil, err
	}
	return redis.New(redis.Options{Mode: mode, Logger: log, Connect: &redis.ClientOptions{
		URL:              s.redisURL,
		Cluster:          s.redisCluster,
		SentinelMaster:   s.sentinelMaster,
		SentinelAddrs:    splitList(s.sentinelAddrs),
		SentinelPassword: s.sentinelPassword,
		CAFile:           s.redisTLSCA,
		CertFile:         s.redisTLSCert,
		KeyFile:          s.redisTLSKey,
		PoolSize:         s.redisPoolSize,
		DialTimeout:      s.redisDialTimeout,
		ReadTimeout:      s.redisReadTimeout,
		WriteTimeout:     s.redisWriteTimeout,
	}})
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// redisLog sends go-redis's own messages (a connection pool that cannot
// dial, say) to the debug log: the service reports store failures itself.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug("redis: " + fmt.Sprintf(format, v...))
}

func logConfigError(log *slog.Logger, err error) {
	var cfgErr *descriptors.Error
	if !errors.As(err, &cfgErr) {
		log.Error("cannot load the config", "err", err)
		return
	}
	for _, p := range cfgErr.Problems {
		log.Error("invalid config: " + p.String())
	}
}
