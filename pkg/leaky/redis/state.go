package redis

import (
	"encoding/binary"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
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
func encodeState(s leaky.State) string {
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
func decodeState(v string) (s leaky.State, ok bool) {
	if len(v) != stateLen {
		return leaky.State{}, false
	}
	var b [16]byte
	copy(b[:], v)
	hi := binary.BigEndian.Uint64(b[0:]) >> 16
	lo := binary.BigEndian.Uint64(b[6:]) >> 16
	ts := (int64(hi&127)-topBias)<<lowBits + int64(lo)
	return leaky.State{Counter: int64(hi >> 7), Timestamp: ts}, true
}
