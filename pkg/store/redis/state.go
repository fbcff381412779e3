package redis

import (
	"encoding/binary"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// A bucket's state is stored in 12 bytes, so that with its key and Redis's
// own overhead a bucket of a typical two-level descriptor costs under 100
// bytes (a 12-byte string fits Redis's 32-byte allocation class; the decimal
// text "<counter> <timestamp>" needs the 48-byte one). Two big-endian
// 48-bit words:
//
//	hi = counter*128 + (timestamp>>48 + 32)
//	lo = timestamp & (2^48-1)
//
// The counter of a stored bucket is at most leaky.MaxSize (2^40); the
// timestamp, in Unix microseconds, within ±2^53. decide.lua and undo.lua
// read and write the same layout with Lua's struct library ('>I6I6').
const stateLen = 12

const (
	maxStoredCounter = leaky.MaxSize
	maxTimestamp     = 1 << 53
	lowBits          = 48
	topBias          = 32 // 2^53 >> 48: makes the timestamp's top part non-negative
)

// encodeState returns the stored form of s, its counter limited to
// maxStoredCounter and its timestamp to ±2^53.
func encodeState(s limit.State) string {
	c := min(max(s.Counter, 0), maxStoredCounter)
	ts := min(max(s.Timestamp, -maxTimestamp), maxTimestamp)
	hi := uint64(c)<<7 | uint64(ts>>lowBits+topBias)
	lo := uint64(ts) & (1<<lowBits - 1)
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], hi<<16)
	binary.BigEndian.PutUint64(b[6:], lo<<16)
	return string(b[:stateLen])
}

// decodeState reads a stored state; ok is false if v is not one.
func decodeState(v string) (s limit.State, ok bool) {
	if len(v) != stateLen {
		return limit.State{}, false
	}
	var b [16]byte
	copy(b[:], v)
	hi := binary.BigEndian.Uint64(b[0:]) >> 16
	lo := binary.BigEndian.Uint64(b[6:]) >> 16
	ts := (int64(hi&127)-topBias)<<lowBits + int64(lo)
	return limit.State{Counter: int64(hi >> 7), Timestamp: ts}, true
}

// A sliding window is stored as the start of its newest sub-window (Unix
// microseconds, 7 bytes big-endian) and its counts, newest first, 6 bytes
// each; the oldest counts that are 0 are left out, so a window costs bytes
// for the sub-windows it counts, at most 7 + 6 per sub-window. decide.lua
// reads and writes it with '>I7' and 'I6' per count.
const (
	windowStartLen = 7
	windowCountLen = 6
)

// encodeWindow returns the stored form of a sliding window's state, or ""
// when it counts nothing (and is not stored).
func encodeWindow(s limit.State) string {
	m := len(s.Counts)
	for m > 0 && s.Counts[m-1] <= 0 {
		m--
	}
	if m == 0 {
		return ""
	}
	b := make([]byte, 8, windowStartLen+windowCountLen*m+2)
	binary.BigEndian.PutUint64(b, uint64(min(max(s.Timestamp, 0), maxTimestamp)))
	b = b[1:]
	var c [8]byte
	for _, n := range s.Counts[:m] {
		binary.BigEndian.PutUint64(c[:], uint64(min(max(n, 0), maxStoredCounter)))
		b = append(b, c[2:]...)
	}
	return string(b)
}

// decodeWindow reads a stored sliding window; ok is false if v is not one.
func decodeWindow(v string) (s limit.State, ok bool) {
	if len(v) < windowStartLen || (len(v)-windowStartLen)%windowCountLen != 0 {
		return limit.State{}, false
	}
	var b [8]byte
	copy(b[1:], v[:windowStartLen])
	s.Timestamp = int64(binary.BigEndian.Uint64(b[:]))
	rest := v[windowStartLen:]
	s.Counts = make([]int64, len(rest)/windowCountLen)
	for i := range s.Counts {
		var c [8]byte
		copy(c[2:], rest[i*windowCountLen:])
		s.Counts[i] = int64(binary.BigEndian.Uint64(c[:]))
		s.Counter += s.Counts[i]
	}
	return s, true
}
