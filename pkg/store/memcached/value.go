package memcached

import (
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// A bucket of the store's own layout holds its limit.State as text:
//
//	<algorithm> <counter> <timestamp> [<count> ...]
//
// with the algorithm's number (limit.Algorithm) and a sliding window's
// counts, newest first. A value of another algorithm, or one that does not
// parse, reads as an empty bucket: what a key that names its algorithm
// would find after a reload that changed it.

// encode returns the value that holds s for a bucket of algorithm a.
func encode(a limit.Algorithm, s limit.State) []byte {
	b := make([]byte, 0, 32+8*len(s.Counts))
	b = strconv.AppendInt(b, int64(a), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Counter, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Timestamp, 10)
	for _, c := range s.Counts {
		b = append(b, ' ')
		b = strconv.AppendInt(b, c, 10)
	}
	return b
}

// decode reads the state a value holds for a bucket of algorithm a.
func decode(a limit.Algorithm, v []byte) limit.State {
	fields := strings.Fields(string(v))
	if len(fields) < 3 || fields[0] != strconv.Itoa(int(a)) {
		return limit.State{}
	}
	var s limit.State
	var err error
	if s.Counter, err = strconv.ParseInt(fields[1], 10, 64); err != nil {
		return limit.State{}
	}
	if s.Timestamp, err = strconv.ParseInt(fields[2], 10, 64); err != nil {
		return limit.State{}
	}
	if len(fields) > 3 {
		s.Counts = make([]int64, len(fields)-3)
		for i, f := range fields[3:] {
			if s.Counts[i], err = strconv.ParseInt(f, 10, 64); err != nil {
				return limit.State{}
			}
		}
	}
	return s
}

// stateAt reads the state of a bucket at p from its item (nil when
// memcached holds none). A counter that is not a decimal number (only the
// reference writes there besides this store) reads as 0, as the reference
// reads it.
func stateAt(p place, b limit.Bucket, it *memcache.Item) limit.State {
	if it == nil {
		return limit.State{}
	}
	if p.counter {
		n, err := strconv.ParseInt(strings.TrimSpace(string(it.Value)), 10, 64)
		if err != nil || n < 0 {
			n = 0
		}
		return limit.State{Counter: n, Timestamp: p.start}
	}
	return decode(b.Limit.Algorithm, it.Value)
}

// valueOf is what a bucket at p holds once in state s.
func valueOf(p place, b limit.Bucket, s limit.State) []byte {
	if p.counter {
		return strconv.AppendInt(nil, max(s.Counter, 0), 10)
	}
	return encode(b.Limit.Algorithm, s)
}

// maxRelative is the longest expiration memcached takes as seconds from
// now; beyond, it reads one as a Unix time.
const maxRelative = 30 * 24 * 3600

// maxKeep bounds how long a key is kept: a debt that takes longer to leak
// is still kept a year past the last charge.
const maxKeep = 366 * 24 * 3600

// expiration is memcached's expiration for a key to be kept for ttl from
// wall (the store's clock): whole seconds, rounded up, plus one, as
// memcached's clock ticks in whole seconds and may expire a key up to a
// second early; past 30 days, a Unix time.
func expiration(ttl time.Duration, wall time.Time) int32 {
	secs := int64(maxKeep)
	if ttl < maxKeep*time.Second {
		secs = max(min(int64((ttl+time.Second-1)/time.Second)+1, maxKeep), 1)
	}
	if secs <= maxRelative {
		return int32(secs)
	}
	return int32(wall.Unix() + secs)
}
