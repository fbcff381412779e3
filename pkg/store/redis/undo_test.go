package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestUndo runs one table of undos through both twins of the undo logic,
// undo.lua (script mode) and undone (transactions mode), on a real Redis:
// the state each leaves and the expiry it gives must be the table's.
func TestUndo(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	before := limit.State{Counter: 3, Timestamp: 1_000}
	after := limit.State{Counter: 5, Timestamp: 1_000} // the charge added 2
	ch := change{before: before, after: after, beforeTTL: 40 * time.Second}
	const curTTL = 90 * time.Second // the expiry the charge left

	cases := []struct {
		name    string
		cur     *limit.State // nil: the key is gone
		want    limit.State
		wantTTL time.Duration // 0: the key is gone
	}{
		{"untouched since: as before, with its expiry", &after, before, ch.beforeTTL},
		{"charged again by others: less the charge, its own expiry", &limit.State{Counter: 9, Timestamp: 2_000}, limit.State{Counter: 7, Timestamp: 2_000}, curTTL},
		{"drained below the charge by others: gone", &limit.State{Counter: 1, Timestamp: 5_000}, limit.State{}, 0},
		{"expired since: nothing to give back", nil, limit.State{}, 0},
	}
	undoers := map[string]executor{"script": scriptExec{}, "transactions": txExec{}}
	// Each mode stores a bucket its own way: 12 bytes, or a hash.
	set := func(mode, key string, st limit.State, ttl time.Duration) {
		if mode == "script" {
			c.Set(ctx, key, encodeState(st), ttl)
			return
		}
		c.HSet(ctx, key, counterField, st.Counter, timestampField, st.Timestamp)
		c.PExpire(ctx, key, ttl)
	}
	get := func(mode, key string) (limit.State, bool) {
		if mode == "script" {
			v, err := c.Get(ctx, key).Result()
			st, _ := decodeState(v)
			return st, err == nil
		}
		return readState(c.HMGet(ctx, key, counterField, timestampField, windowField).Val())
	}
	for mode, exec := range undoers {
		for i, tc := range cases {
			key := fmt.Sprintf("undo|%s|%d", mode, i)
			c.Del(ctx, key)
			if tc.cur != nil {
				set(mode, key, *tc.cur, curTTL)
			}
			states, _, err := exec.undo(ctx, &clients{conn: c}, 10_000, []string{key}, []change{ch})
			if err != nil {
				t.Fatalf("%s, %s: %v", mode, tc.name, err)
			}
			if !states[0].Equal(tc.want) {
				t.Errorf("%s, %s: undone to %+v, want %+v", mode, tc.name, states[0], tc.want)
			}
			stored, exists := get(mode, key)
			ttl := c.PTTL(ctx, key).Val()
			switch {
			case tc.wantTTL == 0 && exists:
				t.Errorf("%s, %s: key left as %+v, want it gone", mode, tc.name, stored)
			case tc.wantTTL != 0 && (!stored.Equal(tc.want) || ttl > tc.wantTTL || ttl < tc.wantTTL-5*time.Second):
				t.Errorf("%s, %s: stored %+v with %v to live, want %+v with %v", mode, tc.name, stored, ttl, tc.want, tc.wantTTL)
			}
		}
	}

	// A charge that emptied the bucket (a refund) left no key: its undo
	// puts the bucket back as it was.
	refund := change{before: before, after: limit.State{}, beforeTTL: ch.beforeTTL}
	for mode, exec := range undoers {
		key := "undo|refund|" + mode
		c.Del(ctx, key)
		states, _, err := exec.undo(ctx, &clients{conn: c}, 10_000, []string{key}, []change{refund})
		stored, _ := get(mode, key)
		if err != nil || !states[0].Equal(before) || !stored.Equal(before) {
			t.Errorf("%s, undoing a refund: %+v (%v), stored %+v; want %+v", mode, states, err, stored, before)
		}
	}
}
