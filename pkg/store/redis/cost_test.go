package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BenchmarkRedisCost measures what Redis spends per request (its own CPU,
// from INFO cpu, as redis-µs/req) deciding two-level requests over 10000
// users in calls of 32 requests, against the floor of the commands the
// script must run and against what envoyproxy/ratelimit sends:
//
//	decide     the decide script, as the batched store sends it
//	floor      a script that only reads TIME, MGETs the buckets, makes the
//	           SET that changes nothing, then SETs (with an expiry) each
//	           bucket: the commands decide runs, no decision
//	empty      a script that returns at once, with decide's arguments
//	reference  INCRBY and EXPIRE of one key per request, pipelined
//	lease      the lease script (local-first), each request's two buckets
//	           asking for units and giving back what they hold
//	charge     the decide script as local-first's sync sends charges: the
//	           buckets of every request in one request, charged always
//
// RLS_REQUIRE_REDIS=1 go test ./pkg/store/redis -run XXX -bench RedisCost
func BenchmarkRedisCost(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	cs := &clients{conn: c}
	const users, batch = 10000, 32
	l := limit.Limit{Size: 1 << 30, DripRate: time.Minute, DripSize: 1}
	floor := newScript(`redis.call('TIME')
local got = redis.call('MGET', unpack(KEYS))
redis.call('SET', KEYS[1], '----------------------------------------------------------------', got[1] and 'NX' or 'XX')
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], 'abcdefghijkl', 'PX', '60000000')
end
return {0}`)
	empty := newScript(`return {0}`)

	// next returns the keys and requests of the next batch.
	user := 0
	next := func() ([]string, []scriptRequest) {
		keys := make([]string, 0, 2*batch)
		reqs := make([]scriptRequest, batch)
		for r := range reqs {
			user = (user + 7919) % users
			u := fmt.Sprintf("{cost}api|user=u%d", user)
			keys = append(keys, u, u+"|action=a1")
			reqs[r] = scriptRequest{at: -1, results: make([]limit.Result, 2),
				buckets: []limit.Bucket{{Key: u, Limit: l, Hits: 1}, {Key: u + "|action=a1", Limit: l, Hits: 1}}}
		}
		return keys, reqs
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"decide", func() error {
			keys, reqs := next()
			_, err := runRequests(ctx, cs, -1, keys, reqs)
			return err
		}},
		{"floor", func() error {
			keys, reqs := next()
			_, err := runScript(ctx, cs, &floor, keys, decideArgs(-1, keys, reqs))
			return err
		}},
		{"empty", func() error {
			keys, reqs := next()
			_, err := runScript(ctx, cs, &empty, keys, decideArgs(-1, keys, reqs))
			return err
		}},
		{"charge", func() error {
			keys, reqs := next()
			var all []limit.Bucket
			for _, r := range reqs {
				for _, b := range r.buckets {
					b.Always = true
					all = append(all, b)
				}
			}
			one := []scriptRequest{{at: -1, buckets: all, results: make([]limit.Result, len(all))}}
			_, err := runRequests(ctx, cs, -1, keys, one)
			return err
		}},
		{"lease", func() error {
			keys, _ := next()
			leases, index := make([]Lease, len(keys)), make([]int, len(keys))
			for i, k := range keys {
				leases[i], index[i] = Lease{Key: k, Limit: l, Return: 1000, At: time.Now().UnixMicro(), Ask: 1000}, i
			}
			_, err := runScript(ctx, cs, &leaseScript, keys, leaseArgs(-1, 0, leases, index))
			return err
		}},
		{"reference", func() error {
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				for range batch {
					user = (user + 7919) % users
					k := fmt.Sprintf("ref_api_user_u%d_action_a1_1760000000", user)
					p.IncrBy(ctx, k, 1)
					p.Expire(ctx, k, time.Minute)
				}
				return nil
			})
			return err
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			for range users / batch { // every key made, as in a warm service
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
			before := redisCPU(b, c)
			b.ResetTimer()
			for range b.N {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, c)-before).Microseconds())/float64(b.N*batch), "redis-µs/req")
		})
	}
}

// redisCPU returns the CPU time Redis has spent, from INFO cpu.
func redisCPU(b testing.TB, c *goredis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
