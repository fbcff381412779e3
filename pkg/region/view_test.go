package region

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestViews: what an operator reads of two regions on one limit of 60 a
// second, eu asked 30 a second and us 10: before any exchange, an equal
// part and us late; once they exchange, each region's demand and the
// claims the division gave, adding up to the limit; with us's store
// down, us late on eu's side and the failed exchanges counted, then gone
// past the silence.
func TestViews(t *testing.T) {
	boards := map[string]*memBoard{"eu": newMemBoard(), "us": newMemBoard()}
	clock := time.Unix(1_800_000_000, 0)
	xs := map[string]*Exchange{}
	for name, own := range boards {
		peers := map[string]Board{}
		for other, b := range boards {
			if other != name {
				peers[other] = b
			}
		}
		x, err := New(Options{Region: name, Regions: []string{"eu", "us"}, Own: own, Peers: peers,
			Interval: time.Second, Silence: 3 * time.Second, Clock: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		xs[name] = x
	}
	eu := xs["eu"]
	const key = "api|tenant=t"
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	status := func(x *Exchange, region string) Status {
		for _, s := range x.Statuses() {
			if s.Region == region {
				return s
			}
		}
		t.Fatalf("no status of %s in %+v", region, x.Statuses())
		return Status{}
	}

	v := eu.Bucket(key, l)
	if v.Divided || v.Size != 30 || math.Abs(v.Rate-30) > 0.01 || v.Share != 0.5 || len(v.Parts) != 0 || v.Region != "eu" {
		t.Fatalf("before any exchange: %+v, want an equal part (30, 30/s) and no parts", v)
	}
	if s := status(eu, "us"); s.State != "late" || s.LastExchangeSeconds != -1 || s.Own {
		t.Fatalf("us before any exchange: %+v, want late and never exchanged with", s)
	}
	if s := status(eu, "eu"); s.State != "fresh" || !s.Own {
		t.Fatalf("eu before any exchange: %+v, want its own region, fresh", s)
	}

	ctx := context.Background()
	epoch := clock.Unix()
	step := func() {
		xs["eu"].Asked([]limit.Bucket{{Key: key, Limit: l, Hits: 30}})
		xs["us"].Asked([]limit.Bucket{{Key: key, Limit: l, Hits: 10}})
		for _, x := range xs {
			x.Publish(ctx, epoch-1, clock)
		}
		clock = clock.Add(500 * time.Millisecond)
		for _, x := range xs {
			x.Divide(ctx, epoch, clock)
		}
		clock = clock.Add(500 * time.Millisecond)
		epoch++
	}
	for range 3 {
		step()
	}
	v = eu.Bucket(key, l)
	if !v.Divided || len(v.Parts) != 2 {
		t.Fatalf("after three exchanges: %+v, want the bucket divided with two parts", v)
	}
	t.Logf("eu's view: %+v", v)
	size, rate := 0.0, 0.0
	for _, p := range v.Parts {
		if p.State != "fresh" {
			t.Errorf("%s is %s after three exchanges, want fresh", p.Region, p.State)
		}
		size, rate = size+p.Size, rate+p.Rate
	}
	if p := v.Parts[0]; p.Region != "eu" || p.Demand != 30 || p.Size != v.Size || math.Abs(p.Rate-v.Rate) > 1e-9 {
		t.Errorf("eu's part %+v, want demand 30 and the claim in force (%v, %v/s)", p, v.Size, v.Rate)
	}
	if p := v.Parts[1]; p.Region != "us" || p.Demand != 10 {
		t.Errorf("us's part %+v, want demand 10", p)
	}
	if size > 60+1e-9 || rate > l.PerSecond()+1e-9 || v.Parts[0].Rate <= v.Parts[1].Rate {
		t.Errorf("the parts add up to %v and %v/s of 60 and 60/s, or eu (asked more) has no more rate than us: %+v", size, rate, v.Parts)
	}
	if s := status(eu, "us"); s.State != "fresh" || s.Replicas != 1 || s.Buckets != 1 || s.Demand != 10 || s.LastExchangeSeconds < 0 || s.LastExchangeSeconds > 1 || s.FailedExchanges != 0 {
		t.Fatalf("us after three exchanges, from eu: %+v, want fresh, 1 replica, 1 bucket, 10/s, exchanged within a second", s)
	}

	boards["us"].down = true
	step()
	step()
	if s := status(eu, "us"); s.State != "late" || s.FailedExchanges != 2 || s.LastExchangeSeconds < 2 {
		t.Fatalf("us's store down for two exchanges, from eu: %+v, want late, 2 failed exchanges, the last exchange 2 s old", s)
	}
	if p := eu.Bucket(key, l).Parts[1]; p.State != "late" || p.Size == 0 {
		t.Fatalf("us's part while late: %+v, want late, holding its claim", p)
	}
	for range 4 {
		step()
	}
	if s := status(eu, "us"); s.State != "gone" {
		t.Fatalf("us's store down past the silence, from eu: %+v, want gone", s)
	}
	if p := eu.Bucket(key, l).Parts[1]; p.State != "gone" || p.Size != 0 || p.Rate != 0 {
		t.Fatalf("us's part once gone: %+v, want gone, holding nothing", p)
	}
}

// TestStatusesBeforeTheFirstDivision: a scrape between a replica's first
// report and its first division (its own store down at start, say) is
// answered, and the exchange goes on after it.
func TestStatusesBeforeTheFirstDivision(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	x, err := New(Options{Region: "eu", Regions: []string{"eu", "us"}, Own: newMemBoard(), Peers: map[string]Board{"us": newMemBoard()},
		Interval: time.Second, Silence: time.Minute, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Rate{RequestsPerUnit: 60, Unit: limit.Second}.Limit()
	x.Asked([]limit.Bucket{{Key: "api|user=u", Limit: l, Hits: 1}})
	ctx := context.Background()
	if err := x.Publish(ctx, clock.Unix()-1, clock); err != nil {
		t.Fatal(err)
	}
	if got := x.Statuses(); len(got) != 2 || got[0].Region != "eu" || got[0].State != "fresh" || got[1].State != "late" {
		t.Fatalf("statuses before the first division: %+v", got)
	}
	done := make(chan error, 1)
	go func() { done <- x.Divide(ctx, clock.Unix(), clock.Add(500*time.Millisecond)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the division after a status read did not return")
	}
}
