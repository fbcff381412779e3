package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/metrics"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/fallback"
	"github.com/envoy-rls/envoy-rls/pkg/store/localfirst"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// storeKind is the -store flag.
type storeKind int

const (
	memoryStore storeKind = iota
	redisStore
	memcachedStore
)

// store is what serve needs of a store.
type store interface {
	rls.Store
	// Check reports whether the store answers.
	Check(ctx context.Context) error
	Close() error
}

// openStore opens the store -store asks for, and returns with it the Redis
// store underneath, if any (what RLQS replicas share subscribers through).
func openStore(s *settings, m *metrics.Metrics, log *slog.Logger) (store, *redis.Store, error) {
	memOpts := memory.Options{MaxBuckets: s.memoryMaxBuckets, MaxBytes: int64(s.memoryMaxBytes)}
	if s.store.value == memoryStore {
		memOpts.Snapshot = s.snapshot.options(log) // not the fallback store's: it holds an outage's counts
		st, err := memory.New(memOpts)
		if err != nil {
			return nil, nil, snapshotHint(err)
		}
		m.WatchBuckets(st.Len, st.Bytes, st.Evictions)
		return st, nil, nil
	}
	if s.store.value == memcachedStore {
		return openMemcachedStore(s, memOpts, m, log)
	}
	goredis.SetLogger(redisLog{log})
	first, err := s.redis.server()
	if err != nil {
		return nil, nil, err
	}
	perSecond, err := s.perSecond.server()
	if err != nil {
		return nil, nil, err
	}
	st, err := redis.New(redis.Options{Mode: s.redisMode.value, Logger: log, Prefix: s.redisKeyPrefix, Pipeline: first.Pipeline, Batch: s.redisBatch, BatchWait: s.redisBatchWait, BatchPace: s.batchPace(),
		PerSecond: perSecond, Breaker: redis.Breaker{Trip: s.breakerTrip, Cool: s.breakerCool}, Connect: first.Connect})
	if err != nil {
		return nil, nil, err
	}
	m.WatchBreakers(func() int { return len(st.BreakersOpen()) })
	// The over-limit cache takes its share of the bytes (serviceOptions);
	// the local table or store the rest.
	memOpts.MaxBytes -= cacheBytes(s)
	var primary fallback.Primary = st
	if s.syncInterval > 0 {
		tableBytes := memOpts.MaxBytes
		if s.failureMode.value == failLocal {
			// The outage's local store has the other half.
			tableBytes /= 2
			memOpts.MaxBytes -= tableBytes
		}
		lf, err := localfirst.New(st, localfirst.Options{Interval: s.syncInterval, MaxBytes: tableBytes, Logger: log})
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		if s.failureMode.value != failLocal {
			m.WatchBuckets(lf.Len, lf.Bytes, nil)
			return lf, st, nil
		}
		primary = lf
	}
	if s.failureMode.value != failLocal {
		return st, st, nil
	}
	fb := fallback.New(primary, fallback.Options{Local: memOpts, Timeout: s.storeTimeout, OnSwitch: m.StoreSwitch, Logger: log})
	m.WatchBuckets(fb.Len, fb.Bytes, nil) // a local store lives for one outage: no running count
	return fb, st, nil
}

// cacheBytes is the share of -memory-max-bytes the local over-limit cache
// may hold: an eighth, as it holds only buckets found over their limit.
func cacheBytes(s *settings) int64 { return int64(s.memoryMaxBytes) / 8 }

// readSecret returns the content of a file holding a secret, without the
// trailing newline editors and "echo" add; "" for no file.
func readSecret(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err // names the file, never its content
	}
	secret := strings.TrimRight(string(data), "\r\n")
	if secret == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return secret, nil
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
