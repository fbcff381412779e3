package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// snapshotFlags are the -memory-snapshot flags: the memory store's
// buckets kept in a file across restarts.
type snapshotFlags struct {
	path       string
	interval   time.Duration
	startEmpty bool
	// intervalGiven says -memory-snapshot-interval was given (or set by
	// its RLS_ variable), whatever its value.
	intervalGiven bool
}

func newSnapshotFlags(fs *flag.FlagSet) *snapshotFlags {
	f := &snapshotFlags{}
	fs.StringVar(&f.path, "memory-snapshot", "", "`file` the memory store keeps its buckets in across restarts: read at start, written every -memory-snapshot-interval and at shutdown after the last call; its directory must be writable. Empty: none")
	fs.DurationVar(&f.interval, "memory-snapshot-interval", memory.DefaultSnapshotInterval, "how often -memory-snapshot is written: the charges a crash may lose")
	fs.BoolVar(&f.startEmpty, "memory-snapshot-start-empty", false, "when -memory-snapshot cannot be read (damaged, another format version, not a snapshot), start with an empty store and move the file aside to FILE.corrupt-TIME, instead of refusing to start")
	return f
}

// check refuses settings that would have no effect.
func (f *snapshotFlags) check(store storeKind) error {
	switch {
	case f.interval <= 0:
		return fmt.Errorf("-memory-snapshot-interval: must be positive, got %s", f.interval)
	case f.path == "" && (f.startEmpty || f.intervalGiven):
		return fmt.Errorf("-memory-snapshot-interval and -memory-snapshot-start-empty need -memory-snapshot")
	case f.path != "" && store == memcachedStore:
		return fmt.Errorf("-memory-snapshot keeps the memory store's buckets across restarts: with -store memcached they live in memcached")
	case f.path != "" && store == redisStore:
		return fmt.Errorf("-memory-snapshot keeps the memory store's buckets across restarts: with -store redis they live in Redis, which keeps them itself (its RDB or AOF persistence), and the -failure-mode local store holds only an outage's counts")
	}
	return nil
}

// options are the memory store's snapshot options; none without a path.
func (f *snapshotFlags) options(log *slog.Logger) memory.SnapshotOptions {
	if f.path == "" {
		return memory.SnapshotOptions{}
	}
	return memory.SnapshotOptions{Path: f.path, Interval: f.interval, StartEmpty: f.startEmpty, Logger: log}
}

// snapshotHint adds to an unreadable snapshot's error how to start anyway.
func snapshotHint(err error) error {
	var se *memory.SnapshotError
	if errors.As(err, &se) {
		return fmt.Errorf("%w; -memory-snapshot-start-empty starts with an empty store and moves the file aside", err)
	}
	return err
}

// snapshotReconciler returns what matches, once, the buckets a memory
// store's snapshot brought back with the first config in force: the file's
// at start, or the xDS server's first (no call charges before it). Doing
// it eagerly, from the config, rather than when a call next brings a
// bucket's limit, drops the buckets no call will bring again (their limit
// left the config) and counts what it dropped in the log at start.
func snapshotReconciler(s *settings, st store, log *slog.Logger) func(*descriptors.Config) {
	ms, ok := st.(*memory.Store)
	if !ok || s.snapshot.path == "" {
		return func(*descriptors.Config) {}
	}
	var once sync.Once
	return func(cfg *descriptors.Config) {
		once.Do(func() {
			start := time.Now()
			r := ms.Reconcile(func(key string) (*limit.Limit, bool) {
				rule, ok := cfg.KeyRule(key)
				if rule == nil {
					return nil, ok
				}
				return &rule.Limit, true
			})
			if r == (memory.Reconciled{}) {
				return // nothing was read back
			}
			log.Info("memory snapshot matched with the config", "kept", r.Kept, "kept_with_new_limit", r.Resized,
				"dropped_left_config", r.Gone, "dropped_limit_changed", r.Changed, "took", time.Since(start).Round(time.Millisecond))
		})
	}
}
