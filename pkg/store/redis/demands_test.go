package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// shelves returns n shelves over several hierarchies, each with a record
// of its own naming who wrote it, valid for a minute.
func shelves(n int, who string) []Shelf {
	out := make([]Shelf, n)
	for i := range out {
		level := fmt.Sprintf("api|u=u%d|x=%d", i%40, i)
		out[i] = Shelf{Level: level, TTL: time.Minute, Record: []byte(fmt.Sprintf("%s's record of level %d", who, i))}
	}
	return out
}

// emptied returns the shelves with no record: their fields go.
func emptied(shs []Shelf) []Shelf {
	out := make([]Shelf, len(shs))
	for i, sh := range shs {
		out[i] = Shelf{Level: sh.Level, TTL: sh.TTL}
	}
	return out
}

// TestDemandExchangeIsOneRoundTrip: on a single Redis an exchange of 200
// levels is one round trip and one script call; one of 600 is one round
// trip of three calls (at most 256 levels each); emptying 200 shelves is
// one round trip too.
func TestDemandExchangeIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &redistest.Counter{}
	c.AddHook(hook)
	s, err := New(Options{Client: c, Prefix: "trips:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.ExchangeRecords(ctx, time.Now(), "warm-up", shelves(1, "w")); err != nil {
		t.Fatal(err) // loads the script, opens the connection
	}
	for _, tc := range []struct{ levels, calls int }{{200, 1}, {600, 3}} {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hook.Reset()
		view, err := s.ExchangeRecords(ctx, time.Now(), "r1", shelves(tc.levels, "env-1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(view) != tc.levels {
			t.Fatalf("%d levels back, want %d", len(view), tc.levels)
		}
		stats := redistest.CommandCalls(t, admin)
		t.Logf("exchange of %d levels: %d round trips, %d commands sent; Redis ran %d EVALSHA, %d HSET, %d HGETALL, %d PEXPIRE",
			tc.levels, hook.Trips.Load(), hook.Cmds.Load(), stats["evalsha"], stats["hset"], stats["hgetall"], stats["pexpire"])
		if hook.Trips.Load() != 1 || hook.Cmds.Load() != int64(tc.calls) {
			t.Fatalf("%d levels: %d round trips of %d commands, want 1 of %d", tc.levels, hook.Trips.Load(), hook.Cmds.Load(), tc.calls)
		}
		if stats["evalsha"] != tc.calls || stats["eval"] != 0 {
			t.Fatalf("%d levels: %d EVALSHA and %d EVAL, want %d EVALSHA", tc.levels, stats["evalsha"], stats["eval"], tc.calls)
		}
	}
	hook.Trips.Store(0)
	if _, err := s.ExchangeRecords(ctx, time.Now(), "r1", emptied(shelves(200, ""))); err != nil {
		t.Fatal(err)
	}
	if hook.Trips.Load() != 1 {
		t.Fatalf("emptying 200 shelves: %d round trips, want 1", hook.Trips.Load())
	}
}

// TestDemandCallsReadBoundedBytes: another replica keeps a record of 81
// KB on each of 10 levels (far more than a record holds); a call starts
// no level past maxCallBytes read, so the first call does 7 levels and a
// second round trip the other 3, and everything comes back.
func TestDemandCallsReadBoundedBytes(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &redistest.Counter{}
	c.AddHook(hook)
	s, err := New(Options{Client: c, Prefix: "budget:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const levels, per = 10, 3000
	var big, mine []Shelf
	for l := range levels {
		level := fmt.Sprintf("api|u=%d", l)
		sh := Shelf{Level: level, TTL: time.Minute, Record: []byte(fmt.Sprintf("%d:%s", l, strings.Repeat("x", 27*per)))}
		big = append(big, sh)
		mine = append(mine, Shelf{Level: level, TTL: time.Minute, Record: []byte("mine")})
	}
	if _, err := s.ExchangeRecords(ctx, time.Now(), "big", big); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.Trips.Store(0)
	view, err := s.ExchangeRecords(ctx, time.Now(), "small", mine)
	if err != nil {
		t.Fatal(err)
	}
	for l, sh := range big {
		if got := view[sh.Level]; len(got) != 1 || got[0].Record != string(sh.Record) {
			t.Fatalf("level %d: %d records, want the big one", l, len(got))
		}
	}
	stats := redistest.CommandCalls(t, admin)
	t.Logf("%d levels of %d bytes: %d round trips, %d EVALSHA, %d HGETALL", levels, len(big[0].Record), hook.Trips.Load(), stats["evalsha"], stats["hgetall"])
	if hook.Trips.Load() != 2 || stats["evalsha"] != 2 || stats["hgetall"] != levels {
		t.Fatalf("%d round trips, %d calls, %d levels read; want 2, 2, %d", hook.Trips.Load(), stats["evalsha"], stats["hgetall"], levels)
	}
}

// TestDemandKeys checks the layout on Redis: one hash per level, in its
// bucket's slot, beside the bucket and apart from it, under the prefix,
// one field per replica; expired fields deleted as met; a hash that
// outlives its latest field a little; an emptied last field taking its
// hash along.
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
	key := "keys:{api|u=a}|x=1|#rlqs2"
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
	a := Shelf{Level: level, TTL: 10 * time.Second, Record: []byte("ra's record \x00\xff")}
	b := Shelf{Level: level, TTL: 10 * time.Second, Record: []byte("rb's")}
	if _, err := s.ExchangeRecords(ctx, now, "ra", []Shelf{a}); err != nil {
		t.Fatal(err)
	}
	view, err := s.ExchangeRecords(ctx, now, "rb", []Shelf{b})
	if err != nil || len(view[level]) != 1 || view[level][0] != (Posted{Replica: "ra", Record: string(a.Record)}) {
		t.Fatalf("rb sees %q, %v; want ra's record", view, err)
	}
	if err := s.Apply(ctx, now, []limit.Bucket{{Key: level, Limit: l, Hits: 1}}, res); err != nil || res[0].Remaining != 2 {
		t.Fatalf("apply after an exchange: %v, %+v", err, res[0])
	}
	if typ := admin.Type(ctx, key).Val(); typ != "hash" {
		t.Fatalf("%s is a %q", key, typ)
	}
	if fields := admin.HKeys(ctx, key).Val(); len(fields) != 2 {
		t.Fatalf("fields %q, want one per replica", fields)
	}
	if v := admin.HGet(ctx, key, "rb").Val(); v[expiryLen:] != "rb's" {
		t.Fatalf("a value of %q, want its expiry then its record", v)
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

	// ra's field expires; rb, written again for longer, stays: met, ra's
	// is deleted, and the hash's expiry follows rb's.
	b.TTL = time.Minute
	if _, err := s.ExchangeRecords(ctx, now.Add(5*time.Second), "rb", []Shelf{b}); err != nil {
		t.Fatal(err)
	}
	if ttl := admin.PTTL(ctx, key).Val(); ttl <= time.Minute {
		t.Fatalf("the hash expires in %v, after its latest field's minute", ttl)
	}
	view, err = s.ExchangeRecords(ctx, now.Add(11*time.Second), "rb", []Shelf{b})
	if err != nil || len(view[level]) != 0 {
		t.Fatalf("view %v, %v; want ra's field expired", view, err)
	}
	if fields := admin.HKeys(ctx, key).Val(); len(fields) != 1 || fields[0] != "rb" {
		t.Fatalf("fields %q, want the expired one deleted", fields)
	}

	// Another prefix is another registry.
	other, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "other:"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	view, err = other.ExchangeRecords(ctx, now, "rz", []Shelf{{Level: level, TTL: time.Minute, Record: []byte("z")}})
	if err != nil || len(view[level]) != 0 {
		t.Fatalf("another prefix: %v, %v", view, err)
	}

	// A lost script is loaded again.
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExchangeRecords(ctx, now.Add(12*time.Second), "rb", []Shelf{b}); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
	if _, err := s.ExchangeRecords(ctx, now.Add(12*time.Second), "rb", emptied([]Shelf{b})); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the hash outlived its last field")
	}
}

// TestDemandReplicaCap: a level keeps MaxDemandReplicas fields; past it,
// those expiring soonest go, the one just written never.
func TestDemandReplicaCap(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, CallerClock: true, Prefix: "cap:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const level = "api|u=a"
	now := time.UnixMicro(1_760_000_000_000_000)
	shelf := []Shelf{{Level: level, TTL: time.Minute, Record: []byte("x")}}
	if _, err := s.ExchangeRecords(ctx, now, "old", shelf); err != nil {
		t.Fatal(err)
	}
	var view map[string][]Posted
	for i := range MaxDemandReplicas {
		if view, err = s.ExchangeRecords(ctx, now.Add(time.Second), fmt.Sprintf("r%04d", i), shelf); err != nil {
			t.Fatal(err)
		}
	}
	// The last writer sees the others it keeps: old, expiring first, went.
	if got := len(view[level]); got != MaxDemandReplicas-1 {
		t.Fatalf("the last writer sees %d others, want %d", got, MaxDemandReplicas-1)
	}
	if admin.HExists(ctx, "cap:{api|u=a}|#rlqs2", "old").Val() {
		t.Fatal("the field expiring soonest was kept past the cap")
	}
	// old again, expiring last: of those expiring soonest, all at once, the
	// first by its bytes goes.
	if view, err = s.ExchangeRecords(ctx, now.Add(2*time.Second), "old", shelf); err != nil || len(view[level]) != MaxDemandReplicas-1 {
		t.Fatalf("old back: %d others, %v", len(view[level]), err)
	}
	if admin.HExists(ctx, "cap:{api|u=a}|#rlqs2", "r0000").Val() || !admin.HExists(ctx, "cap:{api|u=a}|#rlqs2", "old").Val() {
		t.Fatal("old back: r0000 should have gone, old stayed")
	}
}

// TestDemandServerClock exchanges on the Redis server's clock, as
// replicas do.
func TestDemandServerClock(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Prefix: "clock:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const level = "api|u=a"
	sh := func(instance string, ttl time.Duration) []Shelf {
		return []Shelf{{Level: level, TTL: ttl, Record: []byte(instance)}}
	}
	// The time given is not the one used.
	if _, err := s.ExchangeRecords(ctx, time.Unix(0, 0), "ra", sh("a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExchangeRecords(ctx, time.Unix(0, 0), "rb", sh("b", 20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	view, err := s.ExchangeRecords(ctx, time.Unix(0, 0), "rc", sh("c", time.Minute))
	if err != nil || len(view[level]) != 2 {
		t.Fatalf("view %v, %v", view, err)
	}
	time.Sleep(30 * time.Millisecond)
	view, err = s.ExchangeRecords(ctx, time.Unix(0, 0), "rc", sh("c", time.Minute))
	if err != nil || len(view[level]) != 1 || view[level][0].Record != "a" {
		t.Fatalf("b's 20ms are over: view %v, %v", view, err)
	}
}

// TestDemandClusterSlots exchanges levels of many hierarchies on a
// Cluster: their hashes span several slots and nodes, each level's in its
// bucket's slot, and all come back.
func TestDemandClusterSlots(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, err := New(Options{Connect: &ClientOptions{URL: cl.URL(), Cluster: true}, Prefix: "slots:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shs := shelves(300, "a")
	slots := map[uint16]bool{}
	for _, sh := range shs {
		slots[slot(demandKey(s.keyPrefix, sh.Level))] = true
	}
	if len(slots) < 10 {
		t.Fatalf("%d slots: the levels must span many", len(slots))
	}
	if _, err := s.ExchangeRecords(context.Background(), time.Now(), "ra", shs); err != nil {
		t.Fatal(err)
	}
	view, err := s.ExchangeRecords(context.Background(), time.Now(), "rb", shelves(300, "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shs {
		if got := view[sh.Level]; len(got) != 1 || got[0].Record != string(sh.Record) {
			t.Fatalf("level %q: %q, want %q", sh.Level, got, sh.Record)
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
	if _, err := tx.ExchangeRecords(context.Background(), time.Now(), "r", shelves(1, "a")); err == nil || !strings.Contains(err.Error(), "script mode") {
		t.Fatalf("transactions mode: %v", err)
	}
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.ExchangeRecords(context.Background(), time.Now(), "r", shelves(1, "a")); err != errClosed {
		t.Fatalf("closed: %v", err)
	}
}

// TestDemandReplyChecked feeds demandsReply replies of every wrong shape:
// each is an error naming what was wrong, never a panic.
func TestDemandReplyChecked(t *testing.T) {
	stamp := strings.Repeat("\x00", expiryLen)
	value, two := stamp+"rec", stamp+"two"
	shs := []Shelf{{Level: "l1"}, {Level: "l2"}}
	views := make([][]Posted, 2)
	done, err := demandsReply([]any{int64(2), "a", value, "b", two, int64(0), int64(2)}, shs, views)
	if err != nil || done != 2 || fmt.Sprint(views[0]) != "[{a rec} {b two}]" || views[1] != nil {
		t.Fatalf("%d, %q, %v", done, views, err)
	}
	views = make([][]Posted, 2)
	if done, err := demandsReply([]any{int64(1), "a", stamp, int64(1)}, shs, views); err != nil || done != 1 || len(views[0]) != 1 || views[0][0] != (Posted{Replica: "a"}) {
		t.Fatalf("one level done, an empty record: %d, %q, %v", done, views, err)
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
		"replica int":    {[]any{int64(1), int64(5), value, int64(0), int64(2)}, `level "l1", field 0: a int64 and a string`},
		"value nil":      {[]any{int64(1), "a", nil, int64(0), int64(2)}, "a string and a <nil>"},
		"value short":    {[]any{int64(1), "a", "xyz", int64(0), int64(2)}, `replica "a": a value of 3 bytes, shorter than its expiry`},
		"left over":      {[]any{int64(0), int64(0), "x", int64(2)}, "1 values left over"},
	} {
		_, err := demandsReply(tc.reply, shs, make([][]Posted, 2))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
