package rls

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// t0 is 09:08:09 on 6 May 2026 in Berlin, 16:08:09 in Tokyo.
const budgetsTestConfig = `
domain: llm
descriptors:
  - key: team
    charge: always
    name: tokens
    fixed_window: {limit: 1000, calendar: month, time_zone: Europe/Berlin}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true, time_zone: Asia/Tokyo}
`

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarBudget steps a monthly token budget in Berlin (charged
// always) and a daily request limit in Tokyo through the service: the
// reset, Retry-After and current_limit say the period, which ends at the
// zone's midnight.
func TestCalendarBudget(t *testing.T) {
	svc, c := newService(t, Options{Config: loadConfig(t, budgetsTestConfig)})
	june := time.Date(2026, 6, 1, 0, 0, 0, 0, mustZone(t, "Europe/Berlin")).Sub(t0) // 25 days, 14:51:51
	tokyoMidnight := time.Date(2026, 5, 7, 0, 0, 0, 0, mustZone(t, "Asia/Tokyo")).Sub(t0)
	secs := func(d time.Duration) string { return fmt.Sprint(int64(d / time.Second)) }
	team := func(hits uint64) *step { return &step{req: request("llm", withHits(desc("team=a"), hits, false))} }
	user := request("llm", desc("user=u"))
	steps := []step{
		{0, team(0).req, `OK [OK tokens 1000/MONTH left=1000 reset=` + june.String() + `] X-RateLimit-Remaining=1000 X-RateLimit-Clear=0`},
		{0, team(600).req, `OK [OK tokens 1000/MONTH left=400 reset=` + june.String() + `] X-RateLimit-Remaining=400 X-RateLimit-Clear=` + secs(june)},
		// Usage past the budget is recorded: the checks fail until June.
		{time.Hour, team(600).req, `OVER_LIMIT [OVER_LIMIT tokens 1000/MONTH left=0 reset=` + (june - time.Hour).String() + `] X-RateLimit-Remaining=0 X-RateLimit-Clear=` + secs(june-time.Hour) +
			` X-RateLimit-Reset=` + secs(june-time.Hour) + ` Retry-After=` + secs(june-time.Hour)},
		{june - time.Second, team(0).req, `OVER_LIMIT [OVER_LIMIT tokens 1000/MONTH left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=1 X-RateLimit-Reset=1 Retry-After=1`},
		{june, team(0).req, `OK [OK tokens 1000/MONTH left=1000 reset=720h0m0s] X-RateLimit-Remaining=1000 X-RateLimit-Clear=0`}, // June: 30 days
		// Two a day in Tokyo, whose day ends at 15:00 UTC.
		{0, user, `OK [OK 2/DAY left=1 reset=` + tokyoMidnight.String() + `] X-RateLimit-Remaining=1 X-RateLimit-Clear=` + secs(tokyoMidnight)},
		{0, user, `OK [OK 2/DAY left=0 reset=` + tokyoMidnight.String() + `] X-RateLimit-Remaining=0 X-RateLimit-Clear=` + secs(tokyoMidnight)},
		{tokyoMidnight - time.Minute, user, `OVER_LIMIT [OVER_LIMIT 2/DAY left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60 X-RateLimit-Reset=60 Retry-After=60`},
		{tokyoMidnight, user, `OK [OK 2/DAY left=1 reset=24h0m0s] X-RateLimit-Remaining=1 X-RateLimit-Clear=86400`},
	}
	// The steps run in time order per key; the clock goes back between
	// the team's and the user's, which do not share a bucket.
	runSteps(t, svc, c, steps[:5])
	svc2, c2 := newService(t, Options{Config: loadConfig(t, budgetsTestConfig)})
	runSteps(t, svc2, c2, steps[5:])
}

// TestCalendarPolicyWindow: the IETF RateLimit-Policy's w is the length of
// the period holding now: May in Berlin has 31 days.
func TestCalendarPolicyWindow(t *testing.T) {
	svc, c := newService(t, Options{Config: loadConfig(t, budgetsTestConfig), Headers: IETFHeaders})
	runSteps(t, svc, c, []step{
		{0, request("llm", withHits(desc("team=a"), 1, false)), `OK [OK tokens 1000/MONTH left=999 reset=614h51m51s] RateLimit-Policy="tokens";q=1000;w=2678400 RateLimit="tokens";r=999;t=2213511`},
	})
}

// TestEnvoyLimitFollowsFileCalendar: a limit of a day sent by Envoy for a
// domain whose file says calendar: true counts in the file's zone's days.
func TestEnvoyLimitFollowsFileCalendar(t *testing.T) {
	cfg := loadConfig(t, "domain: api\ncalendar: true\ntime_zone: Asia/Tokyo\ndescriptors:\n  - key: user\n")
	svc, c := newService(t, Options{Config: cfg})
	d := request("api", withLimit(desc("user=a"), 1, typev3.RateLimitUnit_DAY))
	runSteps(t, svc, c, []step{
		{0, d, `OK [OK 1/DAY left=0 reset=7h51m51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=28311`},
		{7 * time.Hour, d, `OVER_LIMIT [OVER_LIMIT 1/DAY left=0 reset=51m51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=3111 X-RateLimit-Reset=3111 Retry-After=3111`},
	})
}

// TestBucketsAndExplainShowThePeriod: GET /buckets and POST /explain show
// a calendar window's period in its zone.
func TestBucketsAndExplainShowThePeriod(t *testing.T) {
	svc, c := newService(t, Options{Config: loadConfig(t, budgetsTestConfig)})
	ctx := context.Background()
	c.now = time.Date(2026, 5, 31, 21, 59, 0, 0, time.UTC) // 23:59 on 31 May in Berlin
	if _, err := svc.ShouldRateLimit(ctx, request("llm", withHits(desc("team=a"), 5, false))); err != nil {
		t.Fatal(err)
	}
	const may = `"period":{"start":"2026-05-01T00:00:00+02:00","end":"2026-06-01T00:00:00+02:00","time_zone":"Europe/Berlin"}`
	b, err := svc.Buckets(ctx, "llm", [][]descriptors.Entry{{{Key: "team", Value: "a"}}, {{Key: "user", Value: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(b)
	if !strings.Contains(string(j), `"remaining":995,`) || !strings.Contains(string(j), may) ||
		!strings.Contains(string(j), `"period":{"start":"2026-06-01T00:00:00+09:00","end":"2026-06-02T00:00:00+09:00","time_zone":"Asia/Tokyo"}`) ||
		!strings.Contains(string(j), `"calendar":"month","time_zone":"Europe/Berlin"`) {
		t.Errorf("GET /buckets:\n%s\nwant May's period in Berlin with 995 remaining, 1 June in Tokyo, and the limit's calendar", j)
	}
	e, err := svc.Explain(ctx, request("llm", desc("team=a")))
	if err != nil {
		t.Fatal(err)
	}
	j, _ = json.Marshal(e.Descriptors[0].Walk[0].Limits[0])
	if !strings.Contains(string(j), may) {
		t.Errorf("POST /explain's limit:\n%s\nwant May's period in Berlin", j)
	}
	c.now = c.now.Add(time.Minute) // June in Berlin
	b, err = svc.Buckets(ctx, "llm", [][]descriptors.Entry{{{Key: "team", Value: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	j, _ = json.Marshal(b)
	if !strings.Contains(string(j), `"remaining":1000,`) || !strings.Contains(string(j), `"start":"2026-06-01T00:00:00+02:00","end":"2026-07-01T00:00:00+02:00"`) {
		t.Errorf("GET /buckets in June:\n%s\nwant June's period, the budget whole", j)
	}
}
