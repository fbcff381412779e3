package redis

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// demandLevels returns n levels over several hierarchies, and entries of
// instance on them.
func demandLevels(n int, instance string) []Demand {
	ds := make([]Demand, n)
	for i := range ds {
		ds[i] = Demand{Level: fmt.Sprintf("api|u=u%d|x=%d", i%40, i), Instance: instance, Demand: float64(i), Active: int64(i)}
	}
	return ds
}

// tripCounter counts round trips: a command or a whole pipeline.
type tripCounter struct{ trips, cmds atomic.Int64 }

func (h *tripCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *tripCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (h *tripCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestDemandPublishIsOneRoundTrip: on a single Redis a publish of 200
// levels is one round trip and one script call; one of 600 is one round
// trip of three calls (at most 256 levels each); a withdrawal of 200 is
// one round trip of HDELs.
func TestDemandPublishIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &tripCounter{}
	c.AddHook(hook)
	s, err := New(Options{Client: c, Prefix: "trips:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.PublishDemands(ctx, time.Now(), time.Minute, demandLevels(1, "warm-up")); err != nil {
		t.Fatal(err) // loads the script, opens the connection
	}
	for _, tc := range []struct{ levels, calls int }{{200, 1}, {600, 3}} {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hook.trips.Store(0)
		hook.cmds.Store(0)
		view, err := s.PublishDemands(ctx, time.Now(), time.Minute, demandLevels(tc.levels, "env-1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(view) != tc.levels {
			t.Fatalf("%d levels back, want %d", len(view), tc.levels)
		}
		stats := redistest.CommandCalls(t, admin)
		t.Logf("publish of %d levels: %d round trips, %d commands sent; Redis ran %d EVALSHA, %d HSET, %d HGETALL, %d PEXPIRE",
			tc.levels, hook.trips.Load(), hook.cmds.Load(), stats["evalsha"], stats["hset"], stats["hgetall"], stats["pexpire"])
		if hook.trips.Load() != 1 || hook.cmds.Load() != int64(tc.calls) {
			t.Fatalf("%d levels: %d round trips of %d commands, want 1 of %d", tc.levels, hook.trips.Load(), hook.cmds.Load(), tc.calls)
		}
		if stats["evalsha"] != tc.calls || stats["eval"] != 0 {
			t.Fatalf("%d levels: %d EVALSHA and %d EVAL, want %d EVALSHA", tc.levels, stats["evalsha"], stats["eval"], tc.calls)
		}
	}
	hook.trips.Store(0)
	levels := make([]string, 200)
	for i, d := range demandLevels(200, "") {
		levels[i] = d.Level
	}
	if err := s.WithdrawDemands(ctx, "env-1", levels); err != nil {
		t.Fatal(err)
	}
	if hook.trips.Load() != 1 {
		t.Fatalf("a withdrawal: %d round trips, want 1", hook.trips.Load())
	}
}

// TestDemandCallsReadBoundedEntries publishes 1,000 entries on each of
// 10 levels at once: a call starts no level past maxCallEntries read, so
// the first call does 5 levels (5,000 entries) and a second round trip
// the other 5, and everything comes back.
func TestDemandCallsReadBoundedEntries(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &tripCounter{}
	c.AddHook(hook)
	s, err := New(Options{Client: c, Prefix: "budget:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.PublishDemands(ctx, time.Now(), time.Minute, demandLevels(1, "warm-up")); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.trips.Store(0)
	const levels, per = 10, 1000
	var ds []Demand
	for i := range per {
		for l := range levels {
			ds = append(ds, Demand{Level: fmt.Sprintf("api|u=%d", l), Instance: fmt.Sprintf("envoy-%04d", i), Demand: float64(i), Active: int64(l)})
		}
	}
	view, err := s.PublishDemands(ctx, time.Now(), time.Minute, ds)
	if err != nil {
		t.Fatal(err)
	}
	for l := range levels {
		level := fmt.Sprintf("api|u=%d", l)
		if got := view[level]; len(got) != per || got[0].Level != level || got[0].Active != int64(l) {
			t.Fatalf("level %q: %d entries, want %d", level, len(got), per)
		}
	}
	stats := redistest.CommandCalls(t, admin)
	t.Logf("%d levels of %d entries: %d round trips, %d EVALSHA, %d HGETALL", levels, per, hook.trips.Load(), stats["evalsha"], stats["hgetall"])
	if hook.trips.Load() != 2 || stats["evalsha"] != 2 || stats["hgetall"] != levels {
		t.Fatalf("%d round trips, %d calls, %d levels read; want 2, 2, %d", hook.trips.Load(), stats["evalsha"], stats["hgetall"], levels)
	}
}

// TestDemandKeys checks the layout on Redis: one hash per level, in its
// bucket's slot, beside the bucket and apart from it, under the prefix;
// expired entries deleted as met; a hash that outlives its latest entry a
// little; a withdrawn last entry taking its hash along.
func TestDemandKeys(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "keys:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const level = "api|u=a|x=1"
	key := "keys:{api|u=a}|x=1|#rlqs"
	if got := demandKey(s.keyPrefix, level); got != key {
		t.Fatalf("key %q, want %q", got, key)
	}
	if slot(key) != slot(redisKey(s.keyPrefix, level)) {
		t.Fatal("a level's hash is not in its bucket's slot")
	}

	// The bucket of the level and its hash live side by side.
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	now := time.UnixMicro(1_760_000_000_000_000)
	res := make([]limit.Result, 1)
	if err := s.Apply(ctx, now, []limit.Bucket{{Key: level, Limit: l, Hits: 2}}, res); err != nil || res[0].Remaining != 3 {
		t.Fatalf("apply: %v, %+v", err, res[0])
	}
	ds := []Demand{{level, "a", math.Inf(1), 0}, {level, "b", 1, 2}}
	if _, err := s.PublishDemands(ctx, now, 10*time.Second, ds); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, now, []limit.Bucket{{Key: level, Limit: l, Hits: 1}}, res); err != nil || res[0].Remaining != 2 {
		t.Fatalf("apply after a publish: %v, %+v", err, res[0])
	}
	if typ := admin.Type(ctx, key).Val(); typ != "hash" {
		t.Fatalf("%s is a %q", key, typ)
	}
	if n := admin.HLen(ctx, key).Val(); n != 2 {
		t.Fatalf("%d fields, want 2", n)
	}
	if v := admin.HGet(ctx, key, "b").Val(); len(v) != demandValueLen {
		t.Fatalf("a value of %d bytes, want %d", len(v), demandValueLen)
	}
	// On the server's clock: the TTL and a second more.
	if ttl := admin.PTTL(ctx, key).Val(); ttl <= 10*time.Second || ttl > 11*time.Second {
		t.Fatalf("the hash expires in %v, want 10 to 11s", ttl)
	}
	all, _ := admin.Keys(ctx, "*").Result()
	for _, k := range all {
		if !strings.HasPrefix(k, "keys:") {
			t.Fatalf("key %q is not under the prefix", k)
		}
	}

	// b expires; a, published again for longer, stays: met, b is deleted,
	// and the hash's expiry follows a's.
	ds = ds[:1]
	if _, err := s.PublishDemands(ctx, now.Add(5*time.Second), time.Minute, ds); err != nil {
		t.Fatal(err)
	}
	if ttl := admin.PTTL(ctx, key).Val(); ttl <= time.Minute {
		t.Fatalf("the hash expires in %v, after its latest entry's minute", ttl)
	}
	view, err := s.PublishDemands(ctx, now.Add(11*time.Second), time.Minute, ds)
	if err != nil || len(view[level]) != 1 || view[level][0].Instance != "a" {
		t.Fatalf("view %v, %v", view, err)
	}
	if fields := admin.HKeys(ctx, key).Val(); len(fields) != 1 || fields[0] != "a" {
		t.Fatalf("fields %q, want the expired one deleted", fields)
	}

	// Another prefix is another registry.
	other, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "other:"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	view, err = other.PublishDemands(ctx, now, time.Minute, []Demand{{level, "z", 1, 0}})
	if err != nil || len(view[level]) != 1 || view[level][0].Instance != "z" {
		t.Fatalf("another prefix: %v, %v", view, err)
	}

	// A lost script is loaded again.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PublishDemands(ctx, now.Add(12*time.Second), time.Minute, ds); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
	if err := s.WithdrawDemands(ctx, "a", []string{level}); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the hash outlived its last entry")
	}
}

// TestDemandServerClock publishes on the Redis server's clock, as
// replicas do.
func TestDemandServerClock(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Prefix: "clock:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// The time given is not the one used.
	if _, err := s.PublishDemands(ctx, time.Unix(0, 0), time.Minute, []Demand{{"api|u=a", "a", 1, 0}}); err != nil {
		t.Fatal(err)
	}
	view, err := s.PublishDemands(ctx, time.Unix(0, 0), 20*time.Millisecond, []Demand{{"api|u=a", "b", 1, 0}})
	if err != nil || len(view["api|u=a"]) != 2 {
		t.Fatalf("view %v, %v", view, err)
	}
	time.Sleep(30 * time.Millisecond)
	view, err = s.PublishDemands(ctx, time.Unix(0, 0), time.Minute, []Demand{{"api|u=a", "a", 1, 0}})
	if err != nil || len(view["api|u=a"]) != 1 || view["api|u=a"][0].Instance != "a" {
		t.Fatalf("b's 20ms are over: view %v, %v", view, err)
	}
}

// TestDemandClusterSlots publishes levels of many hierarchies on a
// Cluster: their hashes span several slots and nodes, each level's in its
// bucket's slot, and all come back.
func TestDemandClusterSlots(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, err := New(Options{Connect: &ClientOptions{URL: cl.URL(), Cluster: true}, Prefix: "slots:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ds := demandLevels(300, "a")
	slots := map[uint16]bool{}
	for _, d := range ds {
		slots[slot(demandKey(s.keyPrefix, d.Level))] = true
	}
	if len(slots) < 10 {
		t.Fatalf("%d slots: the levels must span many", len(slots))
	}
	view, err := s.PublishDemands(context.Background(), time.Now(), time.Minute, ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if got := view[d.Level]; len(got) != 1 || got[0] != d {
			t.Fatalf("level %q: %v, want %v", d.Level, got, d)
		}
	}
}

// TestDemandRefusals: the transactions mode has no scripts, and a closed
// store nothing.
func TestDemandRefusals(t *testing.T) {
	srv := redistest.Start(t)
	tx, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Mode: TransactionsMode})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if _, err := tx.PublishDemands(context.Background(), time.Now(), time.Minute, demandLevels(1, "a")); err == nil || !strings.Contains(err.Error(), "script mode") {
		t.Fatalf("transactions mode: %v", err)
	}
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.PublishDemands(context.Background(), time.Now(), time.Minute, demandLevels(1, "a")); err != errClosed {
		t.Fatalf("closed: %v", err)
	}
	if err := s.WithdrawDemands(context.Background(), "a", []string{"api"}); err != errClosed {
		t.Fatalf("closed: %v", err)
	}
}

// TestDemandReplyChecked feeds demandsReply replies of every wrong shape:
// each is an error naming what was wrong, never a panic.
func TestDemandReplyChecked(t *testing.T) {
	value := strings.Repeat("\x00", demandValueLen)
	levels := []string{"l1", "l2"}
	views := make([][]Demand, 2)
	done, err := demandsReply([]any{int64(1), "a", value, int64(0), int64(2)}, levels, views)
	if err != nil || done != 2 || len(views[0]) != 1 || views[0][0] != (Demand{"l1", "a", 0, 0}) || views[1] != nil {
		t.Fatalf("%d, %v, %v", done, views, err)
	}
	views = make([][]Demand, 2)
	if done, err := demandsReply([]any{int64(0), int64(1)}, levels, views); err != nil || done != 1 {
		t.Fatalf("one level done: %d, %v", done, err)
	}
	for name, tc := range map[string]struct {
		reply []any
		want  string
	}{
		"empty":          {nil, "an empty reply"},
		"no levels done": {[]any{int64(0)}, "0 (int64) is not a number of levels answered, of 2"},
		"too many done":  {[]any{int64(0), int64(0), int64(3)}, "is not a number of levels answered"},
		"done a text":    {[]any{int64(0), "1"}, "1 (string) is not a number of levels"},
		"short":          {[]any{int64(0), int64(2)}, `ends before level "l2"`},
		"count a text":   {[]any{"1", "a", value, int64(0), int64(2)}, `level "l1": 1 (string) is not a count`},
		"negative":       {[]any{int64(-1), int64(0), int64(2)}, "is not a count"},
		"count too big":  {[]any{int64(2), "a", value, int64(0), int64(2)}, "is not a count"},
		"instance int":   {[]any{int64(1), int64(5), value, int64(0), int64(2)}, `level "l1", entry 0: a int64 and a string`},
		"value nil":      {[]any{int64(1), "a", nil, int64(0), int64(2)}, "a string and a <nil>"},
		"value short":    {[]any{int64(1), "a", "xyz", int64(0), int64(2)}, `instance "a": a value of 3 bytes, not 23`},
		"left over":      {[]any{int64(0), int64(0), "x", int64(2)}, "1 values left over"},
	} {
		_, err := demandsReply(tc.reply, levels, make([][]Demand, 2))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
