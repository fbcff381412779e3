package memcached

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/bucketkey"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Every key the store writes ends in a byte that says its kind, so that no
// key of one kind is ever another's: a reference counter ends in a digit
// (its window's start), a bucket of its own in ':', a hashed own key in
// '#', a hashed reference key in '!', and a lock in 'L' (after the key it
// locks).
const (
	ownTag      = "rls:"
	ownEnd      = ":"
	hashedTag   = "rls#"
	hashedOwn   = "#"
	hashedRef   = "!"
	lockSuffix  = "L"
	maxKeyBytes = 249 // memcached's 250, less the lock's suffix
)

// place is where a bucket lives in memcached at one instant.
type place struct {
	key string
	// counter: the reference's layout, a decimal count of the window that
	// starts at start (Unix microseconds), which the key names.
	counter bool
	start   int64
}

// referenceUnits are the windows the reference counts, by the mark package
// descriptors gives a fixed window of that length.
var referenceUnits = map[string]time.Duration{
	"1s": time.Second, "1m": time.Minute, "1h": time.Hour, "1d": 24 * time.Hour,
	"7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour, "365d": 365 * 24 * time.Hour,
}

// placeOf returns where bucket b lives at now: the reference's counter
// for a fixed window of a reference unit whose key spells a descriptor
// (unless ownKeys), else a key of its own.
func placeOf(prefix string, ownKeys bool, b limit.Bucket, now time.Time) place {
	l := b.Limit
	if !ownKeys && l.Algorithm == limit.FixedWindow && !l.IsCalendar() {
		if ref, window, ok := referenceKey(b.Key); ok && window == l.Window {
			start := windowStart(now, window)
			return place{key: legalKey(prefix, ref+strconv.FormatInt(start, 10), hashedRef), counter: true, start: start * 1e6}
		}
	}
	return place{key: ownKey(prefix, b.Key)}
}

// windowStart is the Unix second the window of length w holding now starts at.
func windowStart(now time.Time, w time.Duration) int64 {
	sec := int64(w / time.Second)
	t := now.Unix()
	q := t / sec
	if t%sec != 0 && t < 0 {
		q--
	}
	return q * sec
}

// ownKey is the key of a bucket in the store's own layout.
func ownKey(prefix, bucketKey string) string {
	return legalKey(prefix, ownTag+bucketKey+ownEnd, hashedOwn)
}

// legalKey returns prefix+rest if memcached can hold it (and its lock),
// else the prefix and a hash of the whole, ending in end. (New checks the
// prefix is legal and at most maxPrefixBytes, so the hash always fits.)
func legalKey(prefix, rest, end string) string {
	if key := prefix + rest; fits(key) {
		return key
	}
	sum := sha256.Sum256([]byte(prefix + rest))
	return prefix + hashedTag + hex.EncodeToString(sum[:]) + end
}

// maxPrefixBytes is the longest key prefix: with a hash (69 bytes) it
// still fits.
const maxPrefixBytes = 128

// fits reports whether memcached takes key, and key plus the lock suffix:
// at most maxKeyBytes, no space, no control byte.
func fits(key string) bool {
	if len(key) > maxKeyBytes {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] == 0x7f {
			return false
		}
	}
	return true
}

// lockKey is the key of a bucket's lock: on the same server as the bucket
// (serverList routes it by the key it locks).
func lockKey(key string) string { return key + lockSuffix }

// referenceKey maps a bucket key of package descriptors back to the key
// the reference would count the descriptor's window in, less the prefix
// before it and the window's start after it: domain + "_" + key + "_" +
// value + "_" for each entry. It also returns the window its mark names. ok is false for a key
// that is not a descriptor's fixed window of a reference unit: no entries,
// another mark, a part that does not unescape.
//
// Bucket keys are "domain|key=value|...|#mark", every part escaped (%XX),
// with "#fw1m" marking a fixed window of a minute, or "#N/minute/fw" a
// limit sent by Envoy; a shared wildcard's bare '*' stays, as the
// reference writes the pattern.
func referenceKey(bucketKey string) (key string, window time.Duration, ok bool) {
	domain, entries, mark, ok := bucketkey.Parse(bucketKey)
	if !ok || domain == "" || len(entries) == 0 {
		return "", 0, false
	}
	if window, ok = markWindow(mark); !ok {
		return "", 0, false
	}
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('_')
	for _, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
		b.WriteByte('_')
	}
	return b.String(), window, true
}

// markWindow returns the window a fixed window's mark names when it is a
// reference unit: "#fw1m" (a node's limit), "#3/minute/fw" (a limit sent
// by Envoy, without a multiplier).
func markWindow(mark string) (time.Duration, bool) {
	if w, ok := strings.CutPrefix(mark, "#fw"); ok {
		d, ok := referenceUnits[w]
		return d, ok
	}
	rest, ok := strings.CutPrefix(mark, "#")
	if !ok {
		return 0, false
	}
	n, rest, ok := strings.Cut(rest, "/")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return 0, false
	}
	unit, ok := strings.CutSuffix(rest, "/fw")
	if !ok {
		return 0, false
	}
	u, err := limit.ParseUnit(unit)
	if err != nil {
		return 0, false
	}
	return u.Duration(), u.Duration() > 0
}
