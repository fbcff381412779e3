package redis

import (
	"bytes"
	"context"
	"testing"
	"time"

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
}
