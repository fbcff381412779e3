package redis

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

func TestStateEncoding(t *testing.T) {
	for i, tc := range []struct {
		in, want leaky.State
	}{
		{leaky.State{}, leaky.State{}},
		{leaky.State{Counter: 1, Timestamp: 1_763_700_000_123_457}, leaky.State{Counter: 1, Timestamp: 1_763_700_000_123_457}},
		{leaky.State{Counter: 1 << 40, Timestamp: 1 << 53}, leaky.State{Counter: 1 << 40, Timestamp: 1 << 53}},
		{leaky.State{Counter: 7, Timestamp: -1 << 53}, leaky.State{Counter: 7, Timestamp: -1 << 53}},
		{leaky.State{Counter: 3, Timestamp: -1}, leaky.State{Counter: 3, Timestamp: -1}},
		{leaky.State{Counter: 3, Timestamp: 1<<48 - 1}, leaky.State{Counter: 3, Timestamp: 1<<48 - 1}},
		{leaky.State{Counter: 3, Timestamp: -1 << 48}, leaky.State{Counter: 3, Timestamp: -1 << 48}},
		// Out of range: limited.
		{leaky.State{Counter: 1 << 53, Timestamp: 1 << 60}, leaky.State{Counter: 1 << 40, Timestamp: 1 << 53}},
		{leaky.State{Counter: -5, Timestamp: -1 << 60}, leaky.State{Counter: 0, Timestamp: -1 << 53}},
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
