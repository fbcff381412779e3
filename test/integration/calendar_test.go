package integration

import (
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

const calendarBudgetConfig = `
domain: api
descriptors:
  - key: team
    charge: always
    fixed_window: {limit: 1000, calendar: month, time_zone: Asia/Tokyo}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true, time_zone: America/Los_Angeles}
`

// TestCalendarBudgetOnRedis: three replicas whose clocks are 20 hours
// apart share a monthly token budget in Tokyo and a daily request limit in
// Los Angeles, on a single Redis and a Cluster. They decide on Redis's
// clock, so they agree, whatever period their own clocks are in; a check
// past the budget answers OVER_LIMIT until the month's end in Tokyo, a
// third request of the day until midnight in Los Angeles.
func TestCalendarBudgetOnRedis(t *testing.T) {
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "budget.yaml", Data: []byte(calendarBudgetConfig)})
	if err != nil {
		t.Fatal(err)
	}
	month := window.Month.Period(time.Now().UnixMicro(), window.Zone("Asia/Tokyo"))
	day := window.Day.Period(time.Now().UnixMicro(), window.Zone("America/Los_Angeles"))
	if left := time.Until(time.UnixMicro(min(month.End, day.End))); left < 30*time.Second {
		time.Sleep(left + time.Second) // not across a period's end
	}
	untilEnd := func(name string, c window.Calendar) time.Duration {
		return time.Until(time.UnixMicro(c.Period(time.Now().UnixMicro(), window.Zone(name)).End))
	}
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			client := start(t)
			var replicas []*replica
			for _, skew := range []time.Duration{0, -20 * time.Hour, 20 * time.Hour} {
				replicas = append(replicas, startReplicas(t, 1, replicaOptions{client: client, config: cfg,
					clock: func() time.Time { return time.Now().Add(skew) }})...)
			}
			team := func(hits uint64) *rlsv3.RateLimitRequest {
				req := request([]string{"team=t"})
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
				return req
			}
			steps := []struct {
				r     *replica
				req   *rlsv3.RateLimitRequest
				code  rlsv3.RateLimitResponse_Code
				left  uint32
				reset time.Duration // the time to the period's end, when over
			}{
				{replicas[0], team(0), rlsv3.RateLimitResponse_OK, 1000, 0},
				{replicas[1], team(600), rlsv3.RateLimitResponse_OK, 400, 0},
				{replicas[2], team(600), rlsv3.RateLimitResponse_OVER_LIMIT, 0, untilEnd("Asia/Tokyo", window.Month)},
				{replicas[0], team(0), rlsv3.RateLimitResponse_OVER_LIMIT, 0, untilEnd("Asia/Tokyo", window.Month)},
				{replicas[1], request([]string{"user=u"}), rlsv3.RateLimitResponse_OK, 1, 0},
				{replicas[2], request([]string{"user=u"}), rlsv3.RateLimitResponse_OK, 0, 0},
				{replicas[0], request([]string{"user=u"}), rlsv3.RateLimitResponse_OVER_LIMIT, 0, untilEnd("America/Los_Angeles", window.Day)},
			}
			for i, st := range steps {
				resp := st.r.call(t, st.req)
				s := resp.GetStatuses()[0]
				got := fmt.Sprintf("%v left %d", s.GetCode(), s.GetLimitRemaining())
				if want := fmt.Sprintf("%v left %d", st.code, st.left); got != want {
					t.Fatalf("step %d: %s, want %s", i, got, want)
				}
				if st.reset == 0 {
					continue
				}
				if d := s.GetDurationUntilReset().AsDuration() - st.reset; d < -5*time.Second || d > 5*time.Second {
					t.Errorf("step %d: resets in %s, want %s: the period's end on Redis's clock", i, s.GetDurationUntilReset().AsDuration(), st.reset)
				}
			}
		})
	}
}
