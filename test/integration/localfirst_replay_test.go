package integration

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/localfirst"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// diffStep is what one step of a replay did: the syncs run before it, and
// a request's results on both stores (nil for a reset).
type diffStep struct {
	syncs, skipped int
	local, exact   []limit.Result
	here           bool // local-first decided the request without calling Redis
}

// diffMismatch is where a replay found local-first and exact mode apart.
type diffMismatch struct {
	step   int
	bucket int   // the bucket of the step's request that differs; -1: the verdict
	err    error // local-first failed
	steps  []diffStep
}

// replayDiff runs seq on a fresh local-first store and a fresh exact
// store, on databases 0 and 1 of srv, and returns the first step where
// they answer differently, or nil, and the steps run.
//
// The stores alone, not as serve wires them: its pipelining and batching
// change how calls reach Redis, not their answers (the conformance suite
// runs every way), and the service's over-limit cache, above the store,
// keeps a rejection until the reset the store gave, which must be the
// same in both.
func replayDiff(t *testing.T, srv *redistest.Server, seq diffSeq) (*diffMismatch, []diffStep) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	prefix := fmt.Sprintf("diff%d:", prefixes.Add(1))
	newStore := func(db int) *redis.Store {
		st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.DBURL(db)}, CallerClock: true, Prefix: prefix, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	exact := newStore(1)
	defer exact.Close()
	remote := &quietRemote{Store: newStore(0)}
	lf, err := localfirst.New(remote, localfirst.Options{Interval: seq.interval, ManualSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var panicked bool
	defer func() {
		if !panicked { // else it may hold its locks: Close would hang
			lf.Close()
		}
	}()
	persist := persister(t, srv, prefix)
	// guard turns a panic of the local-first store into an error.
	guard := func(f func() error) (err error) {
		defer func() {
			if p := recover(); p != nil {
				panicked = true
				err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		return f()
	}

	ctx := context.Background()
	lf.Sync(ctx, diffT0) // its next sync on the virtual clock (New put it on the real one)
	next := diffT0.Add(seq.interval)
	var steps []diffStep
	for i, op := range seq.ops {
		now := diffT0.Add(op.at)
		var st diffStep
		var syncs []time.Time
		syncs, st.skipped = syncInstants(&next, now, seq.interval)
		for _, at := range syncs {
			if err := guard(func() error { lf.Sync(ctx, at); return nil }); err != nil {
				steps = append(steps, st)
				return &diffMismatch{step: i, err: fmt.Errorf("sync at +%s: %w", at.Sub(diffT0), err), steps: steps}, steps
			}
			st.syncs++
		}
		remote.settle() // as a loop's syncs, which do not wait for what they start
		if op.hits == nil {
			keys := seq.names(op.keys)
			if err := guard(func() error { return lf.Reset(ctx, keys) }); err != nil {
				steps = append(steps, st)
				return &diffMismatch{step: i, err: fmt.Errorf("reset: %w", err), steps: steps}, steps
			}
			remote.settle()
			if err := exact.Reset(ctx, keys); err != nil {
				t.Fatalf("step %d: exact reset: %v", i, err)
			}
			persist()
			steps = append(steps, st)
			continue
		}
		buckets := seq.buckets(op)
		st.local, st.exact = make([]limit.Result, len(buckets)), make([]limit.Result, len(buckets))
		calls := remote.calls.Load()
		err := guard(func() error { return lf.Apply(ctx, now, buckets, st.local) })
		remote.settle()
		if remote.calls.Load() == calls {
			st.here = true
		}
		if err != nil {
			steps = append(steps, st)
			return &diffMismatch{step: i, err: err, steps: steps}, steps
		}
		if err := exact.Apply(ctx, now, buckets, st.exact); err != nil {
			t.Fatalf("step %d: exact: %v", i, err)
		}
		persist()
		steps = append(steps, st)
		for j := range buckets {
			if formatResult(st.local[j]) != formatResult(st.exact[j]) {
				return &diffMismatch{step: i, bucket: j, steps: steps}, steps
			}
		}
		if verdict(buckets, st.local) != verdict(buckets, st.exact) {
			return &diffMismatch{step: i, bucket: -1, steps: steps}, steps
		}
	}
	return nil, steps
}

// maxSyncs is the most syncs run between two steps; a longer gap runs its
// first maxSyncs-4 and its last 4, and leaves out those between, as a
// loop that falls behind (a pause, a busy machine) leaves ticks out: the
// contract holds for any schedule, and a jump of hours costs no thousands
// of syncs.
const maxSyncs = 24

// syncInstants returns the instants from *next to now at which the sync
// loop of a store syncing every interval would sync, and how many of them
// are left out (maxSyncs), and moves *next past now.
func syncInstants(next *time.Time, now time.Time, interval time.Duration) (at []time.Time, skipped int) {
	if now.Before(*next) {
		return nil, 0
	}
	n := int(now.Sub(*next)/interval) + 1
	for k := range n {
		if k < maxSyncs-4 || k >= n-4 {
			at = append(at, next.Add(time.Duration(k)*interval))
		}
	}
	*next = next.Add(time.Duration(n) * interval)
	return at, n - len(at)
}

// quietRemote is the Redis store under the local-first one, counting the
// calls out, so that a step waits for the calls the store makes in the
// background (for more units): a replay then does what its seed says,
// not what the scheduler did.
type quietRemote struct {
	*redis.Store
	out   atomic.Int64 // calls not returned
	calls atomic.Int64 // calls made
}

func (r *quietRemote) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	r.calls.Add(1)
	r.out.Add(1)
	defer r.out.Add(-1)
	return r.Store.Apply(ctx, now, buckets, results)
}

func (r *quietRemote) LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	r.calls.Add(1)
	r.out.Add(1)
	defer r.out.Add(-1)
	return r.Store.LeaseAll(ctx, now, leases)
}

func (r *quietRemote) LeaseBatched(ctx context.Context, now time.Time, leases []redis.Lease) (int64, time.Time, error) {
	r.calls.Add(1)
	r.out.Add(1)
	defer r.out.Add(-1)
	return r.Store.LeaseBatched(ctx, now, leases)
}

// settleQuiet is how long no call must start for the store to be idle,
// after the goroutines that would start one had the processor: a call in
// the background starts in a goroutine the request made.
const settleQuiet = 100 * time.Microsecond

// settle waits until no call is out and none started for settleQuiet.
func (r *quietRemote) settle() {
	for {
		n := r.calls.Load()
		for r.out.Load() > 0 {
			time.Sleep(20 * time.Microsecond)
		}
		for range 10 {
			runtime.Gosched()
		}
		time.Sleep(settleQuiet)
		if r.out.Load() == 0 && r.calls.Load() == n {
			return
		}
	}
}

// persistScript takes the TTL off every key of a prefix (ARGV[1]).
var persistScript = goredis.NewScript(`
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do redis.call('PERSIST', k) end
return 0`)

// persister returns a function that takes the TTL off the keys of prefix
// on databases 0 and 1 of srv. The stores decide on the virtual clock, but
// Redis expires keys on its own: a key kept for a few virtual
// milliseconds would go while the virtual clock stands still. A key kept
// past its TTL is a bucket the decisions find empty all the same (limit
// package: a store may save or drop it).
func persister(t *testing.T, srv *redistest.Server, prefix string) func() {
	t.Helper()
	var clients []*goredis.Client
	for db := range 2 {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: db})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	return func() {
		t.Helper()
		for _, c := range clients {
			if err := persistScript.Run(context.Background(), c, nil, prefix).Err(); err != nil {
				t.Fatalf("persisting the keys: %v", err)
			}
		}
	}
}

func (s *diffSeq) names(keys []int) []string {
	var names []string
	for _, k := range keys {
		names = append(names, s.keys[k].key)
	}
	return names
}

func (s *diffSeq) buckets(op diffOp) []limit.Bucket {
	var bs []limit.Bucket
	for j, k := range op.keys {
		dk := s.keys[k]
		bs = append(bs, limit.Bucket{Key: dk.key, Limit: dk.limit, Hits: op.hits[j], Shadow: dk.shadow, Always: dk.always})
	}
	return bs
}

// verdict is the request's answer: every bucket not in shadow mode
// admitted.
func verdict(buckets []limit.Bucket, results []limit.Result) string {
	if len(results) < len(buckets) {
		return "-" // not decided
	}
	for i, b := range buckets {
		if !b.Shadow && !results[i].Admitted {
			return "OVER_LIMIT"
		}
	}
	return "OK"
}

// formatResult shows what the test compares of a result.
func formatResult(r limit.Result) string {
	if r.Admitted {
		return fmt.Sprintf("{ok remaining=%d reset=%s}", r.Remaining, r.Reset)
	}
	return fmt.Sprintf("{over remaining=%d reset=%s}", r.Remaining, r.Reset)
}

// report tells of m: the seed, the keys, the first difference, and the
// steps up to it on the keys of its request (the others change these
// buckets in no way).
func (m *diffMismatch) report(seq diffSeq) string {
	var b strings.Builder
	op := seq.ops[m.step]
	fmt.Fprintf(&b, "seed %d: local-first (syncing every %s) and exact mode differ at step %d, +%s (%s)\n",
		seq.seed, seq.interval, m.step, op.at, diffT0.Add(op.at).Format(time.RFC3339Nano))
	b.WriteString("keys:\n")
	for k, dk := range seq.keys {
		fmt.Fprintf(&b, "  k%d %s: %s %s", k, dk.key, dk.limit.Algorithm, dk.limit)
		if dk.shadow {
			b.WriteString(", shadow")
		}
		if dk.always {
			b.WriteString(", charge always")
		}
		b.WriteString("\n")
	}
	switch st := m.steps[m.step]; {
	case m.err != nil:
		fmt.Fprintf(&b, "local-first failed: %v\n", m.err)
	case m.bucket >= 0:
		fmt.Fprintf(&b, "first mismatch: k%d, hits %d: local-first %s, exact %s\n",
			op.keys[m.bucket], op.hits[m.bucket], formatResult(st.local[m.bucket]), formatResult(st.exact[m.bucket]))
	default:
		buckets := seq.buckets(op)
		fmt.Fprintf(&b, "first mismatch: the verdict: local-first %s, exact %s\n", verdict(buckets, st.local), verdict(buckets, st.exact))
	}
	left, syncs, skipped := 0, 0, 0
	var lines []string
	for i := 0; i <= m.step; i++ {
		o, st := seq.ops[i], m.steps[i]
		syncs, skipped = syncs+st.syncs, skipped+st.skipped
		if !slices.ContainsFunc(o.keys, func(k int) bool { return slices.Contains(op.keys, k) }) {
			left++
			continue
		}
		lines = append(lines, formatStep(seq, i, st, syncs, skipped))
		syncs, skipped = 0, 0
	}
	fmt.Fprintf(&b, "steps on the keys of step %d (%d on other keys left out):\n", m.step, left)
	b.WriteString(strings.Join(lines, ""))
	return b.String()
}

// formatStep is one line of a report: the step, the syncs before it, and
// a request's hits and results, or a reset.
func formatStep(seq diffSeq, i int, st diffStep, syncs, skipped int) string {
	o := seq.ops[i]
	var b strings.Builder
	fmt.Fprintf(&b, "  #%-3d +%-16s", i, o.at)
	if syncs > 0 {
		fmt.Fprintf(&b, " (%d syncs", syncs)
		if skipped > 0 {
			fmt.Fprintf(&b, ", %d left out", skipped)
		}
		b.WriteString(")")
	}
	if o.hits == nil {
		fmt.Fprintf(&b, " reset")
		for _, k := range o.keys {
			fmt.Fprintf(&b, " k%d", k)
		}
		return b.String() + "\n"
	}
	buckets := seq.buckets(o)
	for j, k := range o.keys {
		fmt.Fprintf(&b, " k%d=%d", k, o.hits[j])
	}
	results := func(rs []limit.Result) string {
		var parts []string
		for _, r := range rs {
			parts = append(parts, formatResult(r))
		}
		return strings.Join(parts, " ")
	}
	fmt.Fprintf(&b, "\n        local-first %-10s %s\n        exact       %-10s %s\n",
		verdict(buckets, st.local), results(st.local), verdict(buckets, st.exact), results(st.exact))
	return b.String()
}
