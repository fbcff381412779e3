package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc/health"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/xdsconfig"
)

// serve runs the service until SIGINT or SIGTERM (or ctx ends), then
// reports NOT_SERVING, stops taking calls and lets the calls in flight
// finish.
func (a *app) serve(ctx context.Context, args []string) (code int) {
	s, err := parseFlags(args, a.lookupEnv, a.stderr, a.name == referenceName)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK // parseArgs printed the flags
	}
	if err != nil {
		return a.usageError("", err)
	}
	log := s.logger(a.stderr)
	for _, w := range s.envWarnings {
		log.Warn("envoyproxy/ratelimit setting without its effect: " + w)
	}
	if a.environ != nil {
		for _, w := range unknownSettings(a.environ(), settingsFlagSet()) {
			log.Warn(w)
		}
	}
	gc := tuneGC(a.lookupEnv, s.storeHeapBound())
	m := metrics.New(s.nearLimitRatio)
	m.BuildInfo(version())
	ref, err := newReferenceStats(s, log)
	if err != nil {
		log.Error("cannot count envoyproxy/ratelimit's stats", "err", err)
		return exitError
	}
	counters := ref.counters(m)

	// With -config-xds, none until the server sends one; with
	// -force-start-without-config, none until the files load.
	var cfg *descriptors.Config
	if s.xds.address == "" {
		switch cfg, err = loadConfig(s.config, s.configOptions(), log); {
		case err != nil && !s.xds.forceStart:
			return exitError
		case err != nil:
			cfg = nil
			counters.ConfigReload(false)
			log.Warn("starting without a config (-force-start-without-config): every request is allowed until the config loads", "config", s.config)
		default:
			m.ConfigLoaded()
			if ref.observer != nil {
				ref.observer.ConfigReload(true)
			}
		}
	}

	st, red, err := openStore(s, m, log)
	if err != nil {
		log.Error("cannot open the store", "store", s.store.String(), "err", err)
		return exitError
	}
	// After the drain, deferred below: a memory store's last snapshot holds
	// every charge, and one not written (logged by the store) fails the
	// exit. (Redis keeps its own counts: its close errors change nothing.)
	defer func() {
		if err := st.Close(); err != nil && s.store.value == memoryStore && code == exitOK {
			code = exitError
		}
	}()
	// Regions: every limit one across them, this region's part decided on
	// its own store under its claims, exchanged in the background.
	var regions *region.Exchange
	if s.region.name != "" {
		x, closeRegions, err := openRegions(s, red, m, log)
		if err != nil {
			log.Error("cannot join the regions", "err", err)
			return exitError
		}
		defer closeRegions()
		regions, st = x, x.Wrap(st)
	}
	reconcile := snapshotReconciler(s, st, log)
	if cfg != nil {
		reconcile(cfg)
	}

	opts := serviceOptions(s, st, cfg, m, log)
	opts.Observer = ref.serviceObserver(m)
	pg := newPage(s, st)
	opts.Observer = pg.observe(opts.Observer)
	if s.xds.address == "" {
		pg.reloadLog().Loaded(errorIfNone(cfg))
	}
	// The Rate Limit Quota Service divides the same limits: the RLS calls
	// on a bucket it divides count as a subscriber's demand.
	usage := &rlqs.Usage{}
	var svc *rls.Service
	quotas, err := quotaService(s, st, red, func() *descriptors.Config { return svc.Config() }, usage, regions, m.RLQS(), log)
	if err != nil {
		log.Error("cannot start the rate limit quota service", "err", err)
		return exitError
	}
	m.WatchRLQS(quotas.Streams, quotas.Buckets)
	opts.Demand, opts.Quotas = usage, quotas
	if regions != nil {
		opts.Demand, opts.Regions = demands{usage, regions}, regions
		pg.showRegions(regions.Statuses)
	}
	var stopTracing func()
	if opts.Tracing, stopTracing, err = startTracing(ctx, s, log); err != nil {
		log.Error("cannot trace", "err", err)
		return exitError
	}
	defer stopTracing()
	svc, err = rls.New(opts)
	if err != nil {
		log.Error("cannot start the service", "err", err)
		return exitError
	}
	m.WatchLimits(svc.Config)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if regions != nil {
		go regions.Run(ctx)
	}
	hs := health.NewServer()
	rls.SetServing(hs, false)
	srv, err := a.startServers(ctx, s, svc, quotas, hs, m.Handler(), ref.handler, pg, log)
	if err != nil {
		log.Error("cannot serve", "err", err)
		return exitError
	}

	var ready rls.Checker = st
	if s.xds.address != "" {
		x, err := xdsClient(s, svc, counters, pg.reloadLog(), func(u xdsconfig.UnknownField) { m.XDSUnknownField(u.Message, u.Number) }, reconcile, log)
		if err != nil {
			log.Error("cannot take the config from the xDS server", "err", err)
			return exitError
		}
		xdsDone := make(chan struct{})
		go func() { defer close(xdsDone); x.Run(ctx) }()
		defer func() { <-xdsDone }()
		if !s.xds.forceStart {
			ready = configGate{Checker: st, svc: svc}
		}
	} else {
		r := &reloader{path: s.config, opts: s.configOptions(), svc: svc, metrics: counters, loads: pg.reloadLog(), log: log}
		r.watch(ctx, s.watchConfig)
	}
	watching := rls.WatchStore(ctx, ready, hs, log, s.failureMode.value.answersWhileDown())
	defer func() { <-watching }()
	resets := watchResets(ctx, st, svc)
	defer func() { <-resets }()
	flushing := ref.run(ctx, s.statsd.interval)
	defer func() { <-flushing }()
	attrs := []any{"version", version(), "mode", s.mode(), "grpc", srv.addrs.grpc.String(), "http", srv.addrs.http.String(),
		"admin", srv.addrs.adminString(), "tls", s.grpcTLSCert != "", "http_json", srv.json, "store", s.store.String(),
		"failure_mode", s.failureMode.String(), "config", configSource(s), "domains", domainCount(svc.Config()),
		"gogc", gc.describePercent(), "gomemlimit", gc.describeLimit()}
	if d := s.dropIn(); d != "" {
		attrs = append(attrs, "drop_in", d)
	}
	log.Info("envoy-rls serving", attrs...)
	if a.ready != nil {
		a.ready(srv.addrs)
	}

	code = exitOK
	select {
	case <-ctx.Done():
	case err := <-srv.failed:
		log.Error("server failed", "err", err)
		code = exitError
	}
	// Ends the store and config watchers (waited for on return), and gives
	// signals their default effect back: a second SIGTERM kills at once.
	stop()
	delay := s.shutdownDelay
	if code != exitOK {
		delay = 0 // a broken server has nothing to drain
	}
	srv.drain(hs, delay, s.shutdownTimeout, log)
	return code
}

// loadConfig loads the config at path, logging its warnings and problems.
func loadConfig(path string, opts descriptors.Options, log *slog.Logger) (*descriptors.Config, error) {
	cfg, warnings, err := opts.Load(path)
	for _, w := range warnings {
		log.Warn("config: " + w.String())
	}
	if err != nil {
		logConfigError(log, err)
	}
	return cfg, err
}

func serviceOptions(s *settings, st store, cfg *descriptors.Config, m *metrics.Metrics, log *slog.Logger) rls.Options {
	o := rls.Options{
		Store:        st,
		Config:       cfg,
		Logger:       log,
		Observer:     m,
		StoreTimeout: s.storeTimeout,
		Shadow:       s.shadowMode,
		Headers:      s.responseHeaders.value,
		FailureMode:  s.failureMode.value.service(),

		MaxDescriptors: s.maxDescriptors,
		MaxEntries:     s.maxEntries,
		MaxEntryBytes:  s.maxEntryBytes,
	}
	s.usage.apply(&o)
	switch {
	case s.store.value == memoryStore:
		o.StoreTimeout = 0 // the memory store never waits
	case s.failureMode.value == failLocal:
		o.StoreTimeout = 0 // the fallback store caps the Redis call itself
		fallthrough
	default:
		o.OverLimitCacheSize = s.localCacheSize // in memory, the store is as fast as a cache
		o.OverLimitCacheBytes = cacheBytes(s)
	}
	return o
}

func logConfigError(log *slog.Logger, err error) {
	var cfgErr *descriptors.Error
	if !errors.As(err, &cfgErr) {
		log.Error("cannot load the config", "err", err)
		return
	}
	for _, p := range cfgErr.Problems {
		if x := p.Excerpt(); x != "" {
			// A syntax error's line and caret, as check-config prints them.
			log.Error("invalid config: "+p.String(), "at", x)
			continue
		}
		log.Error("invalid config: " + p.String())
	}
}

// hangups returns a channel of SIGHUP signals, until ctx ends.
func hangups(ctx context.Context) <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		signal.Stop(ch)
	}()
	return ch
}

// configSource says where the config comes from, for the start-up line.
func configSource(s *settings) string {
	if s.xds.address != "" {
		return "xds://" + s.xds.address
	}
	return s.config
}

// domainCount is the number of domains of cfg; 0 for none.
func domainCount(cfg *descriptors.Config) int {
	if cfg == nil {
		return 0
	}
	return len(cfg.Domains())
}
