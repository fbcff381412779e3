package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestRegionsSmoke: three regions on their own Redis, a few buckets and
// short intervals: the run exchanges, measures, and finds every bucket
// divided within its limit.
func TestRegionsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	var urls []string
	for range 3 {
		urls = append(urls, redistest.Start(t).URL())
	}
	var stdout, stderr strings.Builder
	code := runContext(context.Background(), []string{"regions", "-redis", strings.Join(urls, ","), "-buckets", "500",
		"-interval", "200ms", "-silence", "2s", "-warmup", "600ms", "-duration", "1s", "-baseline", "400ms", "-format", "json"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	var j regionsJSON
	if err := json.Unmarshal([]byte(stdout.String()), &j); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if j.Regions != 3 || j.Divided != 1500 || j.OverLimit != 0 || j.Intervals != 5 || j.ExchangesOK == 0 || len(j.Redis) != 3 {
		t.Fatalf("report %+v; want 3 regions, 1500 buckets divided, none over the limit, 5 intervals", j)
	}
	for _, r := range j.Redis {
		if r.CallsPerInterval < 3 || r.InBytesPerInterv < 3*(9+40*500) {
			t.Errorf("Redis %s: %.1f script calls and %.0f bytes in an interval; want the reports of 3 regions", r.Region, r.CallsPerInterval, r.InBytesPerInterv)
		}
	}
}
