package main

import (
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}

	got := tuneGC(env(nil), 256<<20)
	if got.percent != 400 || debug.SetGCPercent(400) != 400 {
		t.Errorf("GOGC unset: percent %d, want 400 set", got.percent)
	}
	if want := int64(3 * 256 << 20); got.memoryLimit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("GOMEMLIMIT unset: limit %d, want %d set", got.memoryLimit, want)
	}
	if got := tuneGC(env(nil), 10); got.memoryLimit != 64<<20 {
		t.Errorf("small store: limit %d, want the 64 MiB floor", got.memoryLimit)
	}

	debug.SetGCPercent(150)
	debug.SetMemoryLimit(1 << 30)
	got = tuneGC(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}), 256<<20)
	if got != (gcSettings{}) || debug.SetGCPercent(150) != 150 || debug.SetMemoryLimit(-1) != 1<<30 {
		t.Errorf("GOGC and GOMEMLIMIT set: tuneGC changed %+v", got)
	}
	if got.describePercent() != "from GOGC" || got.describeLimit() != "from GOMEMLIMIT" {
		t.Errorf("descriptions %q %q", got.describePercent(), got.describeLimit())
	}
}

func TestStoreHeapBound(t *testing.T) {
	for _, c := range []struct {
		buckets int
		bytes   byteSize
		want    int64
	}{
		{1_000_000, 256 << 20, 128_000_000}, // the bucket bound is the smaller
		{1_000_000, 64 << 20, 64 << 20},
	} {
		s := &settings{memoryMaxBuckets: c.buckets, memoryMaxBytes: c.bytes}
		if got := s.storeHeapBound(); got != c.want {
			t.Errorf("%d buckets, %d bytes: bound %d, want %d", c.buckets, c.bytes, got, c.want)
		}
	}
}
