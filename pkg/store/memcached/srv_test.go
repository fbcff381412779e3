package memcached

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/memcachedtest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestSRV: the servers an SRV record names, sorted by host:port as the
// reference sorts them (the order decides each key's server), and looked
// up again every refresh.
func TestSRV(t *testing.T) {
	var lookups atomic.Int64
	lookup := func(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
		if service != "memcache" || proto != "tcp" || name != "mc.example" {
			t.Errorf("looked up _%s._%s.%s", service, proto, name)
		}
		if lookups.Add(1) == 1 {
			return "", []*net.SRV{{Target: "127.0.0.2", Port: 11211}, {Target: "127.0.0.1", Port: 11212}}, nil
		}
		return "", []*net.SRV{{Target: "127.0.0.3", Port: 11211}}, nil
	}
	s, err := New(Options{SRV: "_memcache._tcp.mc.example", SRVRefresh: 300 * time.Millisecond, LookupSRV: lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	servers := func() []string {
		var out []string
		s.servers.Each(func(a net.Addr) error { out = append(out, a.String()); return nil })
		return out
	}
	if got := servers(); !slices.Equal(got, []string{"127.0.0.1:11212", "127.0.0.2:11211"}) {
		t.Fatalf("servers %v, want them sorted", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(servers(), []string{"127.0.0.3:11211"}) {
		if time.Now().After(deadline) {
			t.Fatalf("servers %v after refreshes, want the new record's", servers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLockOnBucketServer: a lock goes to its bucket's server, so that a
// request of one bucket reads both in one command.
func TestLockOnBucketServer(t *testing.T) {
	s, err := New(Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen := map[string]bool{}
	for i := range 100 {
		k := fmt.Sprintf("domain_key_value%d_1234", i)
		b, _ := s.servers.PickServer(k)
		l, _ := s.servers.PickServer(lockKey(k))
		if b.String() != l.String() {
			t.Errorf("key %q on %s, its lock on %s", k, b, l)
		}
		seen[b.String()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("100 keys on %d of 3 servers", len(seen))
	}
}

// TestServersFoundLater: an SRV record that does not answer yet is no
// reason not to start: calls fail, as with the servers down, until a
// health check finds them.
func TestServersFoundLater(t *testing.T) {
	srv := memcachedtest.Start(t)
	host, port, _ := net.SplitHostPort(srv.Addr())
	var ready atomic.Bool
	lookup := func(context.Context, string, string, string) (string, []*net.SRV, error) {
		if !ready.Load() {
			return "", nil, &net.DNSError{Err: "no such host", Name: "mc.example", IsNotFound: true}
		}
		p, _ := strconv.Atoi(port)
		return "", []*net.SRV{{Target: host, Port: uint16(p)}}, nil
	}
	s, err := New(Options{SRV: "_memcache._tcp.mc.example", LookupSRV: lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := []limit.Bucket{{Key: "k", Limit: limit.Limit{Size: 1, DripRate: time.Second, DripSize: 1}, Hits: 1}}
	res := make([]limit.Result, 1)
	if err := s.Apply(context.Background(), time.Now(), b, res); err == nil {
		t.Fatal("Apply before the servers are found: no error")
	}
	if err := s.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Fatalf("Check before the servers are found: %v", err)
	}
	ready.Store(true)
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check once the record answers: %v", err)
	}
	if err := s.Apply(context.Background(), time.Now(), b, res); err != nil || !res[0].Admitted {
		t.Fatalf("Apply once found: %v, %+v", err, res[0])
	}
}
