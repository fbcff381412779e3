package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/filewatch"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/ui"
)

// reloader loads the config again and puts it in force if it is valid;
// an invalid one is logged and counted, and the one in force stays.
type reloader struct {
	path    string
	opts    descriptors.Options
	svc     *rls.Service
	metrics configCounter
	loads   *ui.Reloads // nil: not told
	log     *slog.Logger

	mu          sync.Mutex // one reload at a time
	lastFailure string     // while polling for a first config: its last error
}

// firstConfigPoll is how often a service started without a config
// (-force-start-without-config) loads it until one is in force.
const firstConfigPoll = time.Second

// watch reloads on SIGHUP and, if files is set, when the config's files
// change, until ctx ends. Started without a config, it loads the config
// every firstConfigPoll until one is in force, then watches: the files, or
// the directory that holds them, may not exist yet, and a watch set on
// what is there would miss them.
func (r *reloader) watch(ctx context.Context, files bool) {
	if r.svc.Config() == nil {
		go func() {
			if r.awaitFirst(ctx) && files {
				r.watchFiles(ctx)
				r.reload("watching its files") // a change before the watch was set
			}
		}()
	} else if files {
		r.watchFiles(ctx)
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

// watchFiles reloads when the config's files change, until ctx ends.
func (r *reloader) watchFiles(ctx context.Context) {
	// Only the config's own files count, so that a log written next to
	// them (at debug, one line per change seen) is no change.
	err := filewatch.Watch(ctx, []string{r.path}, 200*time.Millisecond, func() { r.reload("files changed") }, r.log,
		filewatch.Filter(r.opts.IsConfigFile))
	if err != nil {
		r.log.Warn("the config will not be reloaded when its files change (SIGHUP still reloads it)", "err", err)
	}
}

// awaitFirst loads the config every firstConfigPoll until one is in
// force; it reports false if ctx ended first.
func (r *reloader) awaitFirst(ctx context.Context) bool {
	t := time.NewTicker(firstConfigPoll)
	defer t.Stop()
	for r.svc.Config() == nil {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			r.load("waiting for the config", true)
		}
	}
	return true
}

func (r *reloader) reload(reason string) { r.load(reason, false) }

// load loads the config and puts it in force if it is valid. polling is
// set while the service waits for a first config: a failure the same as
// the last is neither logged nor counted again.
func (r *reloader) load(reason string, polling bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer collectSooner()()
	cfg, warnings, err := r.opts.Load(r.path)
	if err != nil {
		if polling && err.Error() == r.lastFailure {
			return
		}
		r.lastFailure = err.Error()
		r.loads.Loaded(err)
		logConfigError(r.log, err)
		if r.svc.Config() == nil {
			r.log.Error("config load failed: every request is still allowed, without a config", "reason", reason)
		} else {
			r.log.Error("config reload failed: the previous config stays in force", "reason", reason)
		}
		r.metrics.ConfigReload(false)
		return
	}
	r.lastFailure = ""
	r.metrics.ConfigReload(true)
	r.loads.Loaded(nil)
	old := r.svc.Config() // nil when the service started without one
	if old != nil && cfg.Digest() == old.Digest() {
		r.log.Debug("config unchanged", "reason", reason)
		return
	}
	for _, w := range warnings {
		r.log.Warn("config: " + w.String())
	}
	added, removed := domainChanges(old, cfg)
	r.svc.SetConfig(cfg)
	r.log.Info("config reloaded", "reason", reason, "domains", len(cfg.Domains()), "files", len(cfg.Files()))
	// Legitimate (a file removed, a domain renamed), but calls for these
	// domains are no longer limited at all: say so where it is seen.
	if len(removed) > 0 {
		r.log.Warn("config reloaded without some domains: calls for them are no longer limited", "removed", strings.Join(removed, ","))
	}
	if len(added) > 0 {
		r.log.Info("config reloaded with new domains", "added", strings.Join(added, ","))
	}
}

// domainChanges returns the names of the domains in cfg but not in old,
// and of those in old but not in cfg, sorted.
func domainChanges(old, cfg *descriptors.Config) (added, removed []string) {
	for _, d := range cfg.Domains() {
		if old == nil || old.Domain(d.Name) == nil {
			added = append(added, d.Name)
		}
	}
	if old != nil {
		for _, d := range old.Domains() {
			if cfg.Domain(d.Name) == nil {
				removed = append(removed, d.Name)
			}
		}
	}
	return added, removed
}

// reloadGCPercent is the GOGC a reload runs with. Loading allocates about
// 35 bytes per byte of YAML, nearly all of it (yaml.v3's node trees) dead
// once its file is read. At the GOGC the service runs with (400, for a
// small live heap under request traffic) that garbage would pile up to
// five times the live heap before a collection: a 16 MB config took
// 600 MB more for a moment. At 50 it is collected as it is made, for
// about twice the collections during the reload. (debug.FreeOSMemory
// afterwards gave memory back too, but stalled calls for up to 300 ms
// while it held the heap.)
const reloadGCPercent = 50

// collectSooner lowers GOGC to reloadGCPercent, unless it is lower (or
// off), and returns what puts it back.
func collectSooner() (restore func()) {
	gogc := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(gogc)
	if gogc[0].Value.Kind() != rtmetrics.KindUint64 || int64(gogc[0].Value.Uint64()) <= reloadGCPercent { // off reads as -1
		return func() {}
	}
	prev := debug.SetGCPercent(reloadGCPercent)
	return func() {
		// Unless something else set it meanwhile.
		if now := debug.SetGCPercent(prev); now != reloadGCPercent {
			debug.SetGCPercent(now)
		}
	}
}
