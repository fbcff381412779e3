package memcached

import (
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

func TestPlaceOf(t *testing.T) {
	now := time.Unix(1234, 0)
	minute := storetest.Fixed(3, time.Minute)
	long := strings.Repeat("v", 300)
	for _, tc := range []struct {
		key     string
		l       limit.Limit
		want    string
		counter bool
	}{
		{"domain|key=value|#fw1m", minute, "P:domain_key_value_1200", true},
		{"domain|key=value|#3/minute/fw", minute, "P:domain_key_value_1200", true},
		{"domain|key=value|#fw2m", storetest.Fixed(3, 2*time.Minute), "P:rls:domain|key=value|#fw2m:", false},
		{"domain|key=value|#3/2xminute/fw", storetest.Fixed(3, 2*time.Minute), "P:rls:domain|key=value|#3/2xminute/fw:", false},
		{"domain|key=value|#fw1m~1", minute, "P:rls:domain|key=value|#fw1m~1:", false},
		{"domain|key=value|#fw1m", storetest.Fixed(3, time.Hour), "P:rls:domain|key=value|#fw1m:", false}, // the limit disagrees with the key
		{"domain|key=value", limit.Limit{Size: 3, DripRate: time.Second, DripSize: 1}, "P:rls:domain|key=value:", false},
		{"domain|#fw1m", minute, "P:rls:domain|#fw1m:", false},
		{"k", minute, "P:rls:k:", false},
		{"", minute, "P:rls::", false},
		{"domain|key=%ZZ|#fw1m", minute, "P:rls:domain|key=%ZZ|#fw1m:", false},
	} {
		p := placeOf("P:", false, limit.Bucket{Key: tc.key, Limit: tc.l}, now)
		if p.key != tc.want || p.counter != tc.counter {
			t.Errorf("%q: got %q (counter %v), want %q (counter %v)", tc.key, p.key, p.counter, tc.want, tc.counter)
		}
	}
	// Keys memcached cannot hold are hashed, each kind to its own end.
	for _, tc := range []struct {
		key, end string
	}{
		{"domain|key=a b|#fw1m", hashedRef},
		{"domain|key=" + long + "|#fw1m", hashedRef},
		{"domain|key=a b", hashedOwn},
		{"domain|key=a\x00", hashedOwn},
		{"domain|key=" + long, hashedOwn},
	} {
		l := minute
		if tc.end == hashedOwn {
			l = limit.Limit{Size: 1, DripRate: time.Second, DripSize: 1}
		}
		p := placeOf("P:", false, limit.Bucket{Key: tc.key, Limit: l}, now)
		if !strings.HasPrefix(p.key, "P:"+hashedTag) || !strings.HasSuffix(p.key, tc.end) || !fits(p.key) {
			t.Errorf("%.40q: key %q, want P:%s<hash>%s", tc.key, p.key, hashedTag, tc.end)
		}
	}
}

func TestOwnKeysKeepsFixedWindowsApart(t *testing.T) {
	p := placeOf("", true, limit.Bucket{Key: "domain|key=value|#fw1m", Limit: storetest.Fixed(3, time.Minute)}, time.Unix(1234, 0))
	if p.counter || p.key != "rls:domain|key=value|#fw1m:" {
		t.Fatalf("with OwnKeys: %+v, want the store's own key", p)
	}
}

func TestKeyKindsNeverMeet(t *testing.T) {
	// Every kind of key ends in its own byte, and locks in another.
	keys := map[string]string{
		"reference": placeOf("", false, limit.Bucket{Key: "d|k=v|#fw1s", Limit: storetest.Fixed(1, time.Second)}, time.Unix(7, 0)).key,
		"own":       ownKey("", "d|k=v"),
		"hashedOwn": ownKey("", "d|k=v w"),
		"hashedRef": placeOf("", false, limit.Bucket{Key: "d|k=v w|#fw1s", Limit: storetest.Fixed(1, time.Second)}, time.Unix(7, 0)).key,
	}
	ends := map[byte]string{}
	for kind, k := range keys {
		end := k[len(k)-1]
		if other, ok := ends[end]; ok || end == lockSuffix[0] {
			t.Fatalf("%s key %q ends as a %s key or a lock", kind, k, other)
		}
		ends[end] = kind
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		a limit.Algorithm
		s limit.State
	}{
		{limit.LeakyBucket, limit.State{Counter: 3, Timestamp: 1234567}},
		{limit.SlidingWindow, limit.State{Counter: 5, Timestamp: -10, Counts: []int64{1, 0, 4}}},
		{limit.FixedWindow, limit.State{Counter: 9, Timestamp: 60e6}},
	} {
		if got := decode(tc.a, encode(tc.a, tc.s)); !got.Equal(tc.s) {
			t.Errorf("%v %+v: read back %+v", tc.a, tc.s, got)
		}
		if got := decode(tc.a+1, encode(tc.a, tc.s)); !got.Equal(limit.State{}) {
			t.Errorf("%v read as %v: %+v, want empty", tc.a, tc.a+1, got)
		}
	}
	for _, v := range []string{"", "0", "0 1", "0 x 1", "0 1 2 y", "1 2 3", "garbage"} {
		if got := decode(limit.LeakyBucket, []byte(v)); !got.Equal(limit.State{}) {
			t.Errorf("%q: %+v, want empty", v, got)
		}
	}
}

func TestExpiration(t *testing.T) {
	wall := time.Unix(2_000_000_000, 0)
	for _, tc := range []struct {
		ttl  time.Duration
		want int32
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Millisecond, 2},
		{time.Minute, 61},
		{29 * 24 * time.Hour, 29*24*3600 + 1},
		{31 * 24 * time.Hour, 2_000_000_000 + 31*24*3600 + 1},
		{1 << 62, 2_000_000_000 + maxKeep},
	} {
		if got := expiration(tc.ttl, wall); got != tc.want {
			t.Errorf("expiration(%s) = %d, want %d", tc.ttl, got, tc.want)
		}
	}
}
