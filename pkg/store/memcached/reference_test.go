package memcached

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/internal/memcachedtest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// at is the instant of the reference's tests: Unix second 1234.
var at = time.Unix(1234, 0)

func applyAt(t *testing.T, s *Store, now time.Time, buckets ...limit.Bucket) []limit.Result {
	t.Helper()
	res := make([]limit.Result, len(buckets))
	if err := s.Apply(context.Background(), now, buckets, res); err != nil {
		t.Fatal(err)
	}
	return res
}

func counterAt(t *testing.T, c *memcache.Client, key string) string {
	t.Helper()
	it, err := c.Get(key)
	if err != nil {
		t.Fatalf("the reference's key %q: %v", key, err)
	}
	return string(it.Value)
}

// TestReferenceKeyLayout: a fixed window of a reference unit is counted
// where the reference counts it (the keys of its own memcached tests), in
// decimal, and what the reference adds there counts here.
func TestReferenceKeyLayout(t *testing.T) {
	srv := memcachedtest.Start(t)
	c := srv.Client(t)
	s := newStore(t, srv, Options{Prefix: "p:"})
	sec := limit.Bucket{Key: "domain|key=value|#fw1s", Limit: storetest.Fixed(10, time.Second), Hits: 1, Always: true}
	applyAt(t, s, at, sec)
	if got := counterAt(t, c, "p:domain_key_value_1234"); got != "1" {
		t.Fatalf("after one hit the counter is %q, want 1", got)
	}
	// A reference replica's increment, then this store's: both count.
	if _, err := c.Increment("p:domain_key_value_1234", 3); err != nil {
		t.Fatal(err)
	}
	if r := applyAt(t, s, at, sec); r[0].Remaining != 5 {
		t.Fatalf("after 1 + 3 (the reference's) + 1 hits of 10: remaining %d, want 5", r[0].Remaining)
	}
	if got := counterAt(t, c, "p:domain_key_value_1234"); got != "5" {
		t.Fatalf("the counter is %q, want 5", got)
	}

	// A minute's window of two entries starts at 1200; an Envoy-sent limit
	// of an hour with a wildcard's pattern counts where the reference does.
	minute := limit.Bucket{Key: "domain|key2=value2|subkey2=subvalue2|#fw1m", Limit: storetest.Fixed(10, time.Minute), Hits: 2}
	hour := limit.Bucket{Key: "domain|key3=value3*|#7/hour/fw", Limit: storetest.Fixed(7, time.Hour), Hits: 1}
	applyAt(t, s, time.Unix(1234, 5e8), minute, hour)
	if got := counterAt(t, c, "p:domain_key2_value2_subkey2_subvalue2_1200"); got != "2" {
		t.Fatalf("minute counter %q, want 2", got)
	}
	if got := counterAt(t, c, "p:domain_key3_value3*_0"); got != "1" {
		t.Fatalf("hour counter %q, want 1", got)
	}
	// Escaped bytes are the request's own in the reference's key.
	esc := limit.Bucket{Key: "d%7Cx|a%3Db=c%25d|#fw1d", Limit: storetest.Fixed(1, 24*time.Hour), Hits: 1}
	applyAt(t, s, at, esc)
	if got := counterAt(t, c, "p:d|x_a=b_c%d_0"); got != "1" {
		t.Fatalf("day counter %q, want 1", got)
	}
}

// TestReferenceExpiration: the reference adds a counter to expire after
// its unit's seconds (plus its jitter); so does this store.
func TestReferenceExpiration(t *testing.T) {
	srv := memcachedtest.Start(t)
	s := newStore(t, srv, Options{Prefix: "e:"})
	now := time.Now()
	b := limit.Bucket{Key: "d|k=v|#fw1m", Limit: storetest.Fixed(5, time.Minute), Hits: 1}
	applyAt(t, s, now, b)
	key := fmt.Sprintf("e:d_k_v_%d", windowStart(now, time.Minute))
	ttl, ok := metaTTL(t, srv.Addr(), key)
	if !ok {
		t.Skip("this memcached has no meta commands to read a key's expiration")
	}
	if ttl < 58 || ttl > 61 {
		t.Fatalf("a minute's counter expires in %ds, want about 60", ttl)
	}
}

// metaTTL reads a key's time to live with memcached's meta get ("mg key
// t"); ok is false when the server does not know the command.
func metaTTL(t *testing.T, addr, key string) (int, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "mg %s t\r\n", key)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ttl int
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "HD t%d", &ttl); err != nil {
		return 0, false
	}
	return ttl, true
}

// TestReferenceIncrementsRace: reference replicas increment the counter
// while this store decides on it: every hit of both is counted, and this
// store never admits past the limit what it saw.
func TestReferenceIncrementsRace(t *testing.T) {
	srv := memcachedtest.Start(t)
	c := srv.Client(t)
	c.MaxIdleConns = 64
	s := newStore(t, srv, Options{Prefix: "r:"})
	if err := c.Add(&memcache.Item{Key: "r:d_k_v_1200", Value: []byte("0"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	b := limit.Bucket{Key: "d|k=v|#fw1m", Limit: storetest.Fixed(1000, time.Minute), Hits: 1}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				if _, err := c.Increment("r:d_k_v_1200", 1); err != nil {
					t.Error(err)
				}
				return
			}
			res := make([]limit.Result, 1)
			if err := s.Apply(context.Background(), at, []limit.Bucket{b}, res); err != nil {
				t.Error(err)
			} else if res[0].Admitted {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := counterAt(t, c, "r:d_k_v_1200"); got != fmt.Sprint(50+admitted.Load()) || admitted.Load() != 50 {
		t.Fatalf("counter %s after 50 increments and %d admitted of 50, want 100", got, admitted.Load())
	}
}

// TestTwoWindowsOneKey: two fixed windows of one descriptor whose windows
// start together would share the reference's key: an error, not a double
// count; in the store's own layout they are two buckets.
func TestTwoWindowsOneKey(t *testing.T) {
	srv := memcachedtest.Start(t)
	minute := limit.Bucket{Key: "d|k=v|#fw1m", Limit: storetest.Fixed(5, time.Minute), Hits: 1}
	hour := limit.Bucket{Key: "d|k=v|#fw1h", Limit: storetest.Fixed(9, time.Hour), Hits: 1}
	res := make([]limit.Result, 2)
	s := newStore(t, srv, Options{})
	if err := s.Apply(context.Background(), time.Unix(3600, 0), []limit.Bucket{minute, hour}, res); err == nil || !strings.Contains(err.Error(), "own layout") {
		t.Fatalf("two windows on one reference key: %v, want an error saying so", err)
	}
	s = newStore(t, srv, Options{OwnKeys: true})
	got := applyAt(t, s, time.Unix(3600, 0), minute, hour)
	if got[0].Remaining != 4 || got[1].Remaining != 8 {
		t.Fatalf("own layout: %+v, want remaining 4 and 8", got)
	}
}

// TestResetEmptiesReferenceCounter: DELETE /buckets of a fixed window
// empties the counter of the window now.
func TestResetEmptiesReferenceCounter(t *testing.T) {
	srv := memcachedtest.Start(t)
	wall := time.Unix(1234, 0)
	s := newStore(t, srv, Options{Prefix: "z:", Clock: func() time.Time { return wall }})
	b := limit.Bucket{Key: "d|k=v|#fw1m", Limit: storetest.Fixed(1, time.Minute), Hits: 1}
	applyAt(t, s, wall, b)
	if r := applyAt(t, s, wall, b); r[0].Admitted {
		t.Fatal("second hit of 1 admitted")
	}
	if err := s.Reset(context.Background(), []string{b.Key}); err != nil {
		t.Fatal(err)
	}
	if r := applyAt(t, s, wall, b); !r[0].Admitted {
		t.Fatal("after a reset the hit is rejected")
	}
}
