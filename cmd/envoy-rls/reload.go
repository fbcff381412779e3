package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/filewatch"
	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// reloader loads the config again and puts it in force if it is valid;
// an invalid one is logged and counted, and the one in force stays.
type reloader struct {
	path    string
	svc     *rls.Service
	metrics *metrics.Metrics
	log     *slog.Logger

	mu sync.Mutex // one reload at a time
}

// watch reloads on SIGHUP and, if files is set, when the config's files
// change, until ctx ends.
func (r *reloader) watch(ctx context.Context, files bool) {
	if files {
		if err := filewatch.Watch(ctx, []string{r.path}, 200*time.Millisecond, func() { r.reload("files changed") }, r.log); err != nil {
			r.log.Warn("the config will not be reloaded when its files change (SIGHUP still reloads it)", "err", err)
		}
	}
	hup := hangups(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				r.reload("SIGHUP")
			}
		}
	}()
}

func (r *reloader) reload(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, warnings, err := descriptors.Load(r.path)
	if err != nil {
		logConfigError(r.log, err)
		r.log.Error("config reload failed: the previous config stays in force", "reason", reason)
		r.metrics.ConfigReload(false)
		return
	}
	r.metrics.ConfigReload(true)
	if cfg.Digest() == r.svc.Config().Digest() {
		r.log.Debug("config unchanged", "reason", reason)
		return
	}
	for _, w := range warnings {
		r.log.Warn("config: " + w.String())
	}
	r.svc.SetConfig(cfg)
	r.log.Info("config reloaded", "reason", reason, "domains", len(cfg.Domains()), "files", len(cfg.Files()))
}
