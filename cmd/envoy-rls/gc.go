package main

import (
	"runtime/debug"
	"strconv"
)

// gcPercent is the GOGC the service runs with unless GOGC is set. The live
// heap of the service is small (a few MB, plus the memory store's buckets),
// and at Go's default of 100 the collector runs dozens of times a second
// under load: at 400 it takes a fifth of that CPU.
const gcPercent = 400

// bucketHeapBytes bounds what one memory-store bucket with a short key
// holds on the heap, map overhead included (about 95 bytes are measured).
const bucketHeapBytes = 128

// storeHeapBound is the most heap the memory stores may fill: the smaller
// of the byte bound and what the bucket bound allows.
func (s *settings) storeHeapBound() int64 {
	return min(int64(s.memoryMaxBytes), int64(s.memoryMaxBuckets)*bucketHeapBytes)
}

// gcSettings are the garbage collector's settings the service chose;
// zero fields were left to the environment.
type gcSettings struct {
	percent     int
	memoryLimit int64
}

// tuneGC sets GOGC to gcPercent and, so that a full memory store cannot
// make the heap grow 5-fold, GOMEMLIMIT to three times the heap the store
// may fill, storeBytes (but at least 64 MiB) — each unless the environment
// sets it.
func tuneGC(lookupEnv func(string) (string, bool), storeBytes int64) gcSettings {
	var set gcSettings
	if _, ok := lookupEnv("GOGC"); !ok {
		debug.SetGCPercent(gcPercent)
		set.percent = gcPercent
	}
	if _, ok := lookupEnv("GOMEMLIMIT"); !ok {
		set.memoryLimit = max(64<<20, 3*storeBytes)
		debug.SetMemoryLimit(set.memoryLimit)
	}
	return set
}

func (g gcSettings) describePercent() string {
	if g.percent == 0 {
		return "from GOGC"
	}
	return strconv.Itoa(g.percent)
}

func (g gcSettings) describeLimit() string {
	if g.memoryLimit == 0 {
		return "from GOMEMLIMIT"
	}
	return strconv.FormatInt(g.memoryLimit>>20, 10) + "MiB"
}
