package redis

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/netdelay"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestExchangeReport: replicas of regions write their reports to a store
// and each reads back the others', on a single Redis and a Cluster; a
// report past its TTL is gone; a report of 4 MB (100,000 buckets) crosses
// whole.
func TestExchangeReport(t *testing.T) {
	t.Run("Single", func(t *testing.T) {
		srv := redistest.Start(t)
		testExchangeReport(t, ClientOptions{URL: srv.URL()})
	})
	t.Run("Cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a Cluster takes seconds to start")
		}
		testExchangeReport(t, ClientOptions{URL: redistest.StartCluster(t).URL(), Cluster: true})
	})
}

func testExchangeReport(t *testing.T, connect ClientOptions) {
	s, err := New(Options{Connect: &connect, CallerClock: true, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMicro(1_800_000_000_000_000)
	if got, err := s.ExchangeReport(ctx, now, "eu/a", []byte("eu's"), 3*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("the first report: %v, %v", got, err)
	}
	big := bytes.Repeat([]byte{7}, 4<<20)
	if _, err := s.ExchangeReport(ctx, now, "us/b", big, time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := s.ExchangeReport(ctx, now.Add(500*time.Millisecond), "ap/c", []byte("ap's"), 3*time.Second)
	if err != nil || len(got) != 2 {
		t.Fatalf("ap reads %d reports, %v; want eu's and us's", len(got), err)
	}
	for _, p := range got {
		switch p.Replica {
		case "eu/a":
			if p.Record != "eu's" {
				t.Fatalf("eu's report read as %q", p.Record)
			}
		case "us/b":
			if p.Record != string(big) {
				t.Fatalf("us's report of %d bytes read as %d", len(big), len(p.Record))
			}
		default:
			t.Fatalf("a report of %q", p.Replica)
		}
	}
	// us's second is over; eu's three are not.
	got, err = s.ExchangeReport(ctx, now.Add(2*time.Second), "ap/c", []byte("ap's again"), 3*time.Second)
	if err != nil || len(got) != 1 || got[0] != (Posted{Replica: "eu/a", Record: "eu's"}) {
		t.Fatalf("2 s on: %v, %v; want eu's alone", got, err)
	}
	// Found past its expiry, us's is deleted, with its head.
	key, heads := "rg:"+regionsKey, "rg:"+headsKey
	admin := s.clientsAt(s.placeOf(key, false)).conn
	for _, k := range []string{key, heads} {
		if ok, err := admin.HExists(ctx, k, "us/b").Result(); err != nil || ok {
			t.Fatalf("us's report past its expiry is still in %s (%v)", k, err)
		}
		if ttl, err := admin.PTTL(ctx, k).Result(); err != nil || ttl < 3*time.Second {
			t.Fatalf("%s expires in %v (%v); want it past its latest field", k, ttl, err)
		}
	}

	// A post writes and reads nothing; the next exchange reads it.
	if err := s.PostReport(ctx, now.Add(2600*time.Millisecond), "us/d", []byte("us's post"), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err = s.ExchangeReport(ctx, now.Add(2700*time.Millisecond), "eu/a", []byte("eu's"), 3*time.Second)
	if err != nil || len(got) != 2 {
		t.Fatalf("eu reads %v, %v; want ap's and us's post", got, err)
	}
}

// TestReportsReadOnce: a report is read from Redis once; the exchanges
// after return it without reading it again until the replica writes its
// next (another head).
func TestReportsReadOnce(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMicro(1_800_000_000_000_000)
	report := func(epoch byte, n int) []byte {
		return append([]byte{1, 0, 0, 0, 0, 0, 0, 0, epoch}, bytes.Repeat([]byte{epoch}, n)...)
	}
	hmgets := func() int { return redistest.CommandCalls(t, admin)["hmget"] }
	for epoch := byte(1); epoch <= 3; epoch++ {
		if err := s.PostReport(ctx, now, "us/b", report(epoch, 100), time.Minute); err != nil {
			t.Fatal(err)
		}
		before := hmgets()
		for range 2 { // at the publish and at the division
			got, err := s.ExchangeReport(ctx, now, "eu/a", report(epoch, 10), time.Minute)
			if err != nil || len(got) != 1 || got[0].Record != string(report(epoch, 100)) {
				t.Fatalf("epoch %d: eu reads %v, %v; want us's report of the epoch", epoch, got, err)
			}
		}
		if n := hmgets() - before; n != 1 {
			t.Fatalf("epoch %d: us's report read %d times, want once", epoch, n)
		}
	}
}

// TestReportsBesideTheVersionBefore: replicas of the version before
// exchange their reports with demands.lua on the same hash; each reads the
// other's.
func TestReportsBesideTheVersionBefore(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMicro(1_800_000_000_000_000)
	// before is an exchange of the version before.
	before := func(at time.Time, field, report string) []Posted {
		t.Helper()
		key := s.keyPrefix + regionsKey
		c := &demandCall{keys: []string{key}, shelves: []Shelf{{Level: "regions", TTL: 3 * time.Second, Record: []byte(report)}}}
		exchangeRun(ctx, s.clientsAt(s.placeOf(key, false)), s.at(at), field, []*demandCall{c})
		if c.err != nil {
			t.Fatal(c.err)
		}
		return c.views[0]
	}
	before(now, "eu/old", "eu's")
	got, err := s.ExchangeReport(ctx, now, "us/new", []byte("us's"), 3*time.Second)
	if err != nil || len(got) != 1 || got[0] != (Posted{Replica: "eu/old", Record: "eu's"}) {
		t.Fatalf("the new replica reads %v, %v; want the old one's", got, err)
	}
	if err := s.PostReport(ctx, now, "ap/new", []byte("ap's"), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := before(now, "eu/old", "eu's"); len(got) != 2 {
		t.Fatalf("the old replica reads %v; want the new ones' two", got)
	}
	// The old one's report, past its expiry, is not read, and deleted at
	// the next exchange (it has no head to tell it by).
	later := now.Add(5 * time.Second)
	if got, err := s.ExchangeReport(ctx, later, "us/new", []byte("us's"), 3*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("5 s on, the new replica reads %v, %v; want none", got, err)
	}
	if _, err := s.ExchangeReport(ctx, later, "us/new", []byte("us's"), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := srv.Client(t).HExists(ctx, s.keyPrefix+regionsKey, "eu/old").Result(); err != nil || ok {
		t.Fatalf("the old replica's report past its expiry is still there (%v)", err)
	}
}

// TestPostChecksAField: a post deletes one other field past its expiry,
// every eighth second, so that a hash no replica of its region reads does
// not keep every report of replicas gone.
func TestPostChecksAField(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// A multiple of 8 s, and of 16 s: the post checks the first field.
	now := time.UnixMicro(1_800_000_000_000_000)
	if err := s.PostReport(ctx, now.Add(-time.Minute), "eu/gone", []byte("eu's"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.PostReport(ctx, now, "us/a", []byte("us's"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := srv.Client(t).HExists(ctx, "rg:"+regionsKey, "eu/gone").Result(); err != nil || ok {
		t.Fatalf("a report past its expiry is still there after a post that checked it (%v)", err)
	}
}

// TestReportsKeepTheMost: past MaxDemandReplicas fields, the one expiring
// soonest goes, with its head.
func TestReportsKeepTheMost(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMicro(1_800_000_000_000_000)
	if err := s.PostReport(ctx, now, "eu/soonest", []byte("r"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range MaxDemandReplicas {
		if err := s.PostReport(ctx, now, fmt.Sprintf("us/%d", i), []byte("r"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	admin := srv.Client(t)
	for _, k := range []string{s.keyPrefix + regionsKey, s.keyPrefix + headsKey} {
		if n, err := admin.HLen(ctx, k).Result(); err != nil || n != MaxDemandReplicas {
			t.Fatalf("%s holds %d fields (%v), want %d", k, n, err, MaxDemandReplicas)
		}
		if ok, _ := admin.HExists(ctx, k, "eu/soonest").Result(); ok {
			t.Fatalf("%s keeps the field expiring soonest", k)
		}
	}
}

// TestReportsOnTheServersClock: without CallerClock, a report's expiry is
// reckoned on the Redis server's clock (as the store's calls find it),
// whatever this one's.
func TestReportsOnTheServersClock(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Prefix: "rg:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	admin := srv.Client(t)
	// The time given is this replica's, an hour off: it does not count.
	for range 2 { // the first reads the server's clock, the next goes by its last call
		if err := s.PostReport(ctx, time.Now().Add(time.Hour), "eu/a", []byte("eu's"), time.Minute); err != nil {
			t.Fatal(err)
		}
		v, err := admin.HGet(ctx, s.keyPrefix+regionsKey, "eu/a").Result()
		if err != nil {
			t.Fatal(err)
		}
		server, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Duration(expiryOf(v)-server.UnixMicro()) * time.Microsecond; d < 59*time.Second || d > time.Minute {
			t.Fatalf("the report expires %v after the server's time, want a minute", d)
		}
	}
	got, err := s.ExchangeReport(ctx, time.Now(), "us/b", []byte("us's"), time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("us reads %v, %v; want eu's", got, err)
	}
}

// TestPrepareReports: a peer's Redis over a link of 100 ms each way. Its
// first post opens a connection, reads the server's clock and loads the
// script, one round trip each, past the half second an exchange gives
// it; prepared ahead, the first post is one round trip.
func TestPrepareReports(t *testing.T) {
	srv := redistest.Start(t)
	link := netdelay.Start(t, srv.Addr(), 100*time.Millisecond)
	open := func() *Store {
		s, err := New(Options{Connect: &ClientOptions{URL: "redis://" + link.Addr() + "/0"}, Prefix: "rg:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	post := func(s *Store) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return s.PostReport(ctx, time.Now(), "eu/a", []byte("eu's"), time.Minute)
	}
	if err := post(open()); err == nil {
		t.Fatal("an unprepared first post over the link fit in half a second: the test shows nothing")
	}
	s := open()
	if err := s.PrepareReports(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := post(s); err != nil {
		t.Fatalf("the first post after PrepareReports: %v", err)
	}
}
