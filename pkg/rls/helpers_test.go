package rls

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

const testConfig = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 10, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        name: trades
        leaky_bucket: {size: 3, drip_rate: 2s}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: client
    value: abuser
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: plan
    shadow_mode: true
    leaky_bucket: {size: 1, drip_rate: 1h}
  - key: hot
    leaky_bucket: {size: 100, drip_rate: 1h}
`

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func loadConfig(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	c, _, err := descriptors.Parse(descriptors.Source{Name: "test.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clock is a settable test clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// newService returns a service on a fresh memory store with the test
// config and a clock stopped at t0.
func newService(t testing.TB, opts Options) (*Service, *clock) {
	t.Helper()
	if opts.Store == nil {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		opts.Store = store
	}
	if opts.Config == nil {
		opts.Config = loadConfig(t, testConfig)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &clock{now: t0}
	if opts.Clock == nil {
		opts.Clock = c.Now
	}
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc, c
}

// desc builds a descriptor from "key=value" pairs.
func desc(pairs ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, hits uint64, negative bool) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	d.IsNegativeHits = negative
	return d
}

func withLimit(d *ratelimitv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	return d
}

func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// render writes a response compactly, for comparison with a want string:
//
//	OVER_LIMIT [OVER_LIMIT trades 30/MINUTE left=0 reset=2s; OK] X-RateLimit-Remaining=0 ...
func render(r *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.GetOverallCode().String())
	b.WriteString(" [")
	for i, st := range r.GetStatuses() {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(st.GetCode().String())
		if l := st.GetCurrentLimit(); l != nil {
			if l.GetName() != "" {
				fmt.Fprintf(&b, " %s", l.GetName())
			}
			fmt.Fprintf(&b, " %d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			if m := l.GetUnitMultiplier(); m != nil {
				fmt.Fprintf(&b, "x%d", m.GetValue())
			}
			fmt.Fprintf(&b, " left=%d reset=%s", st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
		}
	}
	b.WriteString("]")
	for _, h := range r.GetResponseHeadersToAdd() {
		fmt.Fprintf(&b, " %s=%s", h.GetKey(), h.GetValue())
		if len(h.GetRawValue()) > 0 {
			b.WriteString(" (raw value set)")
		}
	}
	return b.String()
}
