package rlqsclient

import (
	"context"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

var (
	alice = map[string]string{"user": "alice", "route": "/a"}
	bob   = map[string]string{"user": "bob"}
)

// TestInitialReport: the first request opens the stream and reports its
// bucket alone with time_elapsed 0; so does each new bucket.
func TestInitialReport(t *testing.T) {
	i, f, clock := start(t, Options{Domain: "shop"})
	i.Report() // no bucket yet: no timer, nothing opened
	f.noStream(t, 50*time.Millisecond)

	if !i.Request(alice) {
		t.Fatal("first request denied under ALLOW_ALL")
	}
	fs := f.nextStream(t)
	r := fs.next(t)
	if r.GetDomain() != "shop" || len(r.GetBucketQuotaUsages()) != 1 {
		t.Fatalf("initial report %v: want domain shop and one bucket", r)
	}
	checkUsage(t, usageOf(t, r, map[string]string{"route": "/a", "user": "alice"}), 1, 0, 0)

	clock.Advance(3500 * time.Millisecond)
	i.Request(alice)
	i.Request(bob)
	r = fs.next(t)
	if len(r.GetBucketQuotaUsages()) != 1 {
		t.Fatalf("second initial report %v: want bob alone", r)
	}
	checkUsage(t, usageOf(t, r, bob), 1, 0, 0)
	// The server may read a report before the client books it as sent.
	waitFor(t, "two reports booked", func() bool { return i.Stats().ReportsSent == 2 })
	if s := i.Stats(); s.StreamsOpened != 1 {
		t.Errorf("stats %+v: want one stream", s)
	}
}

// TestInitialRequestUnderDenyAll: a DENY_ALL default denies the first
// request too, and the initial report says so.
func TestInitialRequestUnderDenyAll(t *testing.T) {
	i, f, _ := start(t, Options{NoAssignment: blanket(typev3.RateLimitStrategy_DENY_ALL)})
	if i.Request(alice) || i.Request(alice) {
		t.Fatal("a request allowed under DENY_ALL")
	}
	checkUsage(t, usageOf(t, f.nextStream(t).next(t), alice), 0, 1, 0)
}

// TestInitialRequestUnderTokenBucketDefault: a token bucket default does
// not decide the first request (it is allowed); later ones take tokens.
func TestInitialRequestUnderTokenBucketDefault(t *testing.T) {
	i, _, _ := start(t, Options{NoAssignment: tokens(2, 1, time.Hour)})
	if got := admits(i, alice, 5); got != 3 {
		t.Errorf("admitted %d of 5, want 3 (the first, then 2 tokens)", got)
	}
}

// TestPeriodicReports: each tick reports every bucket, idle ones with zero
// counts, with the whole seconds since that bucket's last report.
func TestPeriodicReports(t *testing.T) {
	i, f, clock := start(t, Options{})
	i.Request(alice)
	fs := f.nextStream(t)
	fs.next(t)
	clock.Advance(2500 * time.Millisecond)
	i.Request(alice)
	i.Request(alice)
	i.Request(bob) // initial report at 2.5 s
	fs.next(t)

	clock.Advance(3400 * time.Millisecond) // 5.9 s
	i.Report()
	r := fs.next(t)
	if len(r.GetBucketQuotaUsages()) != 2 {
		t.Fatalf("report %v: want both buckets", r)
	}
	checkUsage(t, usageOf(t, r, alice), 2, 0, 5) // 5.9 s truncated
	checkUsage(t, usageOf(t, r, bob), 0, 0, 3)   // 3.4 s since its initial report

	clock.Advance(4200 * time.Millisecond) // 10.1 s: nothing requested
	i.Report()
	r = fs.next(t)
	checkUsage(t, usageOf(t, r, alice), 0, 0, 4)
	checkUsage(t, usageOf(t, r, bob), 0, 0, 4)
	waitFor(t, "four reports booked", func() bool { return i.Stats().ReportsSent == 4 })
	if s := i.Stats(); s.Ticks != 2 {
		t.Errorf("stats %+v: want 2 ticks", s)
	}
}

// TestReportTimerOnRealTime: without a Clock the timer ticks by itself.
func TestReportTimerOnRealTime(t *testing.T) {
	f, conn := newFake(t)
	i := Start(context.Background(), conn, Options{Domain: "d", ReportInterval: 50 * time.Millisecond})
	defer i.Close()
	i.Request(alice)
	fs := f.nextStream(t)
	checkUsage(t, usageOf(t, fs.next(t), alice), 1, 0, 0)
	i.Request(alice)
	// The request lands in whichever tick comes first; later ones are idle.
	var allowed uint64
	for range 3 {
		u := usageOf(t, fs.next(t), alice)
		allowed += u.GetNumRequestsAllowed()
		if u.GetTimeElapsed().GetSeconds() != 0 {
			t.Errorf("time_elapsed %v within 50 ms ticks", u.GetTimeElapsed().AsDuration())
		}
	}
	if allowed != 1 {
		t.Errorf("%d requests reported over three ticks, want 1", allowed)
	}
}

// TestStreamReopenedAtNextTick: after the server ends the stream, nothing
// is sent until the next tick restarts it; a bucket created meanwhile has
// its initial report (and that request's count) dropped.
func TestStreamReopenedAtNextTick(t *testing.T) {
	i, f, clock := start(t, Options{})
	i.Request(alice)
	fs := f.nextStream(t)
	fs.next(t)
	fs.end <- nil
	waitFor(t, "the client to see the stream end", func() bool { return !i.Stats().StreamOpen })

	clock.Advance(2 * time.Second)
	i.Request(alice)
	i.Request(bob) // initial report read and dropped
	f.noStream(t, 100*time.Millisecond)
	s := i.Stats()
	if s.ReportsDropped != 1 || s.StreamsEnded != 1 {
		t.Fatalf("stats %+v: want 1 dropped report, 1 ended stream", s)
	}

	clock.Advance(3 * time.Second)
	i.Report()
	fs = f.nextStream(t)
	r := fs.next(t)
	checkUsage(t, usageOf(t, r, alice), 1, 0, 5)
	checkUsage(t, usageOf(t, r, bob), 0, 0, 3)
	s = i.Stats()
	if s.StreamsOpened != 2 || !s.StreamOpen {
		t.Errorf("stats %+v: want a second stream, open", s)
	}
	if b := s.Buckets[1]; b.LostAllowed != 1 || b.ReportedAllowed != 0 || b.Allowed != 1 {
		t.Errorf("bob %+v: want its one request lost", b)
	}
}

// TestClose: Close writes what was queued, then resets the call; requests
// are still decided but nothing more is sent.
func TestClose(t *testing.T) {
	i, f, _ := start(t, Options{})
	i.Request(alice)
	fs := f.nextStream(t)
	i.Close()
	fs.next(t)
	select {
	case _, ok := <-fs.reports:
		if ok {
			t.Fatal("a report after the initial one")
		}
	case <-time.After(wait):
		t.Fatal("the stream was not reset")
	}
	if !i.Request(bob) {
		t.Error("a request denied after Close")
	}
	i.Report()
	if s := i.Stats(); s.ReportsSent != 1 || s.ReportsDropped != 1 || s.StreamOpen || s.Ticks != 0 {
		t.Errorf("stats %+v: want 1 sent, bob's initial report dropped, no tick", s)
	}
}
