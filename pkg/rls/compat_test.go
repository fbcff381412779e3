package rls

import (
	"strings"
	"testing"
	"time"
)

// Config files in envoyproxy/ratelimit's format, and what each field does
// here (docs/migration.md's tables).

func compatService(t *testing.T, yaml string) (*Service, *clock) {
	t.Helper()
	return newService(t, Options{Config: loadConfig(t, yaml)})
}

func answers(t *testing.T, svc *Service, c *clock, steps []step) {
	t.Helper()
	runSteps(t, svc, c, steps)
}

const messaging = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

func TestCompatNestedAndKeyOnly(t *testing.T) {
	svc, c := compatService(t, messaging)
	marketing := request("messaging", desc("message_type=marketing", "to_number=2061111111"))
	answers(t, svc, c, []step{
		// The placeholder level has no limit: only the nested one applies.
		{0, marketing, "OK [OK 5/DAY left=4 reset=4h48m0s] X-RateLimit-Remaining=4 X-RateLimit-Clear=17280"},
		// A key without value: one bucket per phone number.
		{0, request("messaging", desc("to_number=2061111111")), "OK [OK 100/DAY left=99 reset=14m24s] X-RateLimit-Remaining=99 X-RateLimit-Clear=864"},
		{0, request("messaging", desc("to_number=2062222222")), "OK [OK 100/DAY left=99 reset=14m24s] X-RateLimit-Remaining=99 X-RateLimit-Clear=864"},
	})
}

// parentLimits has a limit at both levels: the difference between the
// hierarchy (every level) and envoyproxy/ratelimit (the deepest only).
const parentLimits = `
domain: api
%s
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: action
        rate_limit: {unit: minute, requests_per_unit: 10}
`

func TestCompatMatchAllAndLeaf(t *testing.T) {
	trade := request("api", desc("user=alice", "action=trade"))
	// Default: both levels, the user level of 2 decides.
	svc, c := compatService(t, strings.Replace(parentLimits, "%s", "", 1))
	answers(t, svc, c, []step{
		{0, trade, "OK [OK 2/MINUTE left=1 reset=30s] X-RateLimit-Remaining=1 X-RateLimit-Clear=30"},
		{0, trade, "OK [OK 2/MINUTE left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60"},
		{0, trade, "OVER_LIMIT [OVER_LIMIT 2/MINUTE left=0 reset=30s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60 X-RateLimit-Reset=30 Retry-After=30"},
	})
	// match: leaf: only the deepest matching node, as envoyproxy/ratelimit:
	// [user, action] counts against the action level alone, and [user]
	// against the user level alone.
	svc, c = compatService(t, strings.Replace(parentLimits, "%s", "match: leaf", 1))
	answers(t, svc, c, []step{
		{0, trade, "OK [OK 10/MINUTE left=9 reset=6s] X-RateLimit-Remaining=9 X-RateLimit-Clear=6"},
		{0, trade, "OK [OK 10/MINUTE left=8 reset=12s] X-RateLimit-Remaining=8 X-RateLimit-Clear=12"},
		{0, trade, "OK [OK 10/MINUTE left=7 reset=18s] X-RateLimit-Remaining=7 X-RateLimit-Clear=18"},
		{0, request("api", desc("user=alice")), "OK [OK 2/MINUTE left=1 reset=30s] X-RateLimit-Remaining=1 X-RateLimit-Clear=30"},
		// A descriptor longer than the tree matches nothing there.
		{0, request("api", desc("user=alice", "action=trade", "extra=1")), "OK [OK]"},
	})
}

func TestCompatReplaces(t *testing.T) {
	svc, c := compatService(t, `
domain: api
descriptors:
  - key: category
    value: read
    rate_limit: {name: reads, unit: minute, requests_per_unit: 1}
  - key: endpoint
    value: /reports
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: reads
`)
	both := request("api", desc("category=read"), desc("endpoint=/reports"))
	answers(t, svc, c, []step{
		// The reads limit is replaced: neither checked nor charged.
		{0, both, "OK [OK; OK 3/MINUTE left=2 reset=20s] X-RateLimit-Remaining=2 X-RateLimit-Clear=20"},
		{0, both, "OK [OK; OK 3/MINUTE left=1 reset=40s] X-RateLimit-Remaining=1 X-RateLimit-Clear=40"},
		// Alone, the reads limit applies, untouched by the calls above.
		{0, request("api", desc("category=read")), "OK [OK reads 1/MINUTE left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60"},
		{0, request("api", desc("category=read")), "OVER_LIMIT [OVER_LIMIT reads 1/MINUTE left=0 reset=1m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=60 X-RateLimit-Reset=60 Retry-After=60"},
	})
}

func TestCompatFields(t *testing.T) {
	svc, c := compatService(t, `
domain: edge
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: "/files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: "/img/*.png"
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: bypass
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: year, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    quota_mode: true
    metadata: {backend: a}
    rate_limit: {unit: month, requests_per_unit: 1}
`)
	answers(t, svc, c, []step{
		{0, request("edge", desc("remote_address=10.0.0.1")), "OK [OK 1/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=1"},
		{0, request("edge", desc("remote_address=10.0.0.2")), "OK [OK 1/SECOND left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=1"},
		// share_threshold: every file shares one bucket.
		{0, request("edge", desc("path=/files/a.pdf")), "OK [OK 2/HOUR left=1 reset=30m0s] X-RateLimit-Remaining=1 X-RateLimit-Clear=1800"},
		{0, request("edge", desc("path=/files/b.csv")), "OK [OK 2/HOUR left=0 reset=1h0m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=3600"},
		{0, request("edge", desc("path=/files/c.txt")), "OVER_LIMIT [OVER_LIMIT 2/HOUR left=0 reset=30m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=3600 X-RateLimit-Reset=1800 Retry-After=1800"},
		// '*' inside a value; without share_threshold, a bucket per value.
		{0, request("edge", desc("path=/img/a.png")), "OK [OK 1/WEEK left=0 reset=168h0m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=604800"},
		{0, request("edge", desc("path=/img/b.png")), "OK [OK 1/WEEK left=0 reset=168h0m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=604800"},
		{0, request("edge", desc("bypass=anything")), "OK [OK]"},
		{0, request("edge", desc("banned=x")), "OVER_LIMIT [OVER_LIMIT 0/YEAR left=0 reset=8760h0m0s] X-RateLimit-Remaining=0 X-RateLimit-Clear=0 X-RateLimit-Reset=31536000 Retry-After=31536000"},
		// shadow_mode: decided, never blocks, never shown.
		{0, request("edge", desc("trial=t")), "OK [OK]"},
		{0, request("edge", desc("trial=t")), "OK [OK]"},
	})
}

// TestCompatFixedWindowLeaf: a file in envoyproxy/ratelimit's format with
// match: leaf and rate_limit_algorithm: fixed_window counts as the
// reference does: only the deepest level, in windows aligned on the clock
// (t0 is 51s before a minute ends), starting afresh in each.
func TestCompatFixedWindowLeaf(t *testing.T) {
	svc, c := compatService(t, "domain: api\nmatch: leaf\nrate_limit_algorithm: fixed_window\n"+strings.SplitN(parentLimits, "\n", 4)[3])
	action := request("api", desc("user=a", "action=x"))
	answers(t, svc, c, []step{
		{0, action, "OK [OK 10/MINUTE left=9 reset=51s] X-RateLimit-Remaining=9 X-RateLimit-Clear=51"},
		{0, request("api", withHits(desc("user=a", "action=x"), 9, false)), "OK [OK 10/MINUTE left=0 reset=51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=51"},
		{50 * time.Second, action, "OVER_LIMIT [OVER_LIMIT 10/MINUTE left=0 reset=1s] X-RateLimit-Remaining=0 X-RateLimit-Clear=1 X-RateLimit-Reset=1 Retry-After=1"},
		// The user level was not charged: only the deepest counts.
		{50 * time.Second, request("api", desc("user=a")), "OK [OK 2/MINUTE left=1 reset=1s] X-RateLimit-Remaining=1 X-RateLimit-Clear=1"},
		// A new window: the whole limit again.
		{51 * time.Second, action, "OK [OK 10/MINUTE left=9 reset=1m0s] X-RateLimit-Remaining=9 X-RateLimit-Clear=60"},
	})
}

// TestCompatChargesEveryHit: with charge: always beside match: leaf and
// fixed windows, a rejected request is charged to every limit it matched,
// as envoyproxy/ratelimit counts it: the second call, over a's limit,
// still takes one of b's ten.
func TestCompatChargesEveryHit(t *testing.T) {
	svc, c := compatService(t, `
domain: api
match: leaf
rate_limit_algorithm: fixed_window
charge: always
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	both := request("api", desc("a=1"), desc("b=1"))
	answers(t, svc, c, []step{
		{0, both, "OK [OK 1/MINUTE left=0 reset=51s; OK 10/MINUTE left=9 reset=51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=51"},
		{0, both, "OVER_LIMIT [OVER_LIMIT 1/MINUTE left=0 reset=51s; OK 10/MINUTE left=8 reset=51s] X-RateLimit-Remaining=0 X-RateLimit-Clear=51 X-RateLimit-Reset=51 Retry-After=51"},
		{0, request("api", withHits(desc("b=1"), 0, false)), "OK [OK 10/MINUTE left=8 reset=51s] X-RateLimit-Remaining=8 X-RateLimit-Clear=51"},
	})
}
