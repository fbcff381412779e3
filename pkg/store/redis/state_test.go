package redis

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

func TestStateEncoding(t *testing.T) {
	for i, tc := range []struct {
		in, want limit.State
	}{
		{limit.State{}, limit.State{}},
		{limit.State{Counter: 1, Timestamp: 1_763_700_000_123_457}, limit.State{Counter: 1, Timestamp: 1_763_700_000_123_457}},
		{limit.State{Counter: 1 << 40, Timestamp: 1 << 53}, limit.State{Counter: 1 << 40, Timestamp: 1 << 53}},
		{limit.State{Counter: 7, Timestamp: -1 << 53}, limit.State{Counter: 7, Timestamp: -1 << 53}},
		{limit.State{Counter: 3, Timestamp: -1}, limit.State{Counter: 3, Timestamp: -1}},
		{limit.State{Counter: 3, Timestamp: 1<<48 - 1}, limit.State{Counter: 3, Timestamp: 1<<48 - 1}},
		{limit.State{Counter: 3, Timestamp: -1 << 48}, limit.State{Counter: 3, Timestamp: -1 << 48}},
		// Out of range: limited.
		{limit.State{Counter: 1 << 53, Timestamp: 1 << 60}, limit.State{Counter: 1 << 40, Timestamp: 1 << 53}},
		{limit.State{Counter: -5, Timestamp: -1 << 60}, limit.State{Counter: 0, Timestamp: -1 << 53}},
	} {
		v := encodeState(tc.in)
		if len(v) != stateLen {
			t.Fatalf("step %d: %d bytes", i, len(v))
		}
		got, ok := decodeState(v)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("step %d: %+v stored as %x reads %+v (%v), want %+v", i, tc.in, v, got, ok, tc.want)
		}
	}
	for _, v := range []string{"", "1 1763700000000000", "12345678901"} {
		if s, ok := decodeState(v); ok {
			t.Errorf("%q read as %+v, want not a state", v, s)
		}
	}
}
