package rls

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// demandCounter is a Demand that adds up the hits asked of each bucket.
type demandCounter struct {
	mu   sync.Mutex
	hits map[string]int64
}

func (d *demandCounter) Asked(buckets []limit.Bucket) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range buckets {
		d.hits[b.Key] += b.Hits
	}
}

func (d *demandCounter) of(key string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits[key]
}

// downStore fails every call, as a Redis that is down.
type downStore struct{}

func (downStore) Apply(context.Context, time.Time, []limit.Bucket, []limit.Result) error {
	return errors.New("connection refused")
}

// TestDemandCountsEveryCall: every call that reaches a bucket tells the
// Demand its hits, whatever answers it: the store, the over-limit cache,
// the failure mode, a shadow or a quota-mode limit. (RLQS divides a limit
// by what RLS calls ask of it: a call the cache refuses, uncounted, would
// never be given room.)
func TestDemandCountsEveryCall(t *testing.T) {
	const calls = 25
	for _, c := range []struct {
		name string
		opts Options
		desc []string
		key  string
	}{
		{"store and over-limit cache", Options{OverLimitCacheSize: 100}, []string{"user=alice"}, "api|user=alice"},
		{"failure mode allow", Options{Store: downStore{}, FailureMode: FailAllow}, []string{"user=alice"}, "api|user=alice"},
		{"failure mode deny", Options{Store: downStore{}, FailureMode: FailDeny}, []string{"user=alice"}, "api|user=alice"},
		{"failure mode unavailable", Options{Store: downStore{}}, []string{"user=alice"}, "api|user=alice"},
		{"shadow", Options{}, []string{"plan=free"}, "api|plan=free"},
		{"quota mode", Options{QuotaMode: true, OverLimitCacheSize: 100}, []string{"user=alice"}, "api|user=alice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &demandCounter{hits: map[string]int64{}}
			c.opts.Demand = d
			svc, _ := newService(t, c.opts)
			for range calls {
				svc.ShouldRateLimit(context.Background(), request("api", withHits(desc(c.desc...), 2, false)))
			}
			if got := d.of(c.key); got != 2*calls {
				t.Fatalf("%d hits asked of %s, want %d (%v)", got, c.key, 2*calls, d.hits)
			}
		})
	}
}
