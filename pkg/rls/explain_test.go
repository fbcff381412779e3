package rls

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// explainConfig has a level of each kind an explanation names: any value,
// exact and wildcard matches, several limits on a node, a window, shadow,
// replaces, an allow list and an over-limit body.
const explainConfig = `domain: shop
over_limit_body: "Slow down: try again in {retry_after} s."
descriptors:
  - key: user
    leaky_bucket: {size: 3, drip_rate: 1s}
    descriptors:
      - key: path
        value: /cart/*
        limits:
          - fixed_window: {limit: 2, window: 1m}
            name: cart
          - leaky_bucket: {size: 1, drip_rate: 1h}
            name: cart_shadow
            shadow_mode: true
  - key: category
    value: read
    rate_limit: {name: reads, unit: minute, requests_per_unit: 1}
  - key: endpoint
    value: /reports
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: reads
  - key: client
    value: internal
    rate_limit: {unlimited: true}
`

// shopService is a service on the explain config and a memory store.
func shopService(t *testing.T, opts Options) (*Service, *clock, *memory.Store) {
	t.Helper()
	store, err := memory.New(memory.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	opts.Store, opts.Config = store, loadConfig(t, explainConfig)
	svc, c := newService(t, opts)
	return svc, c, store
}

// TestExplainIsTheCall explains random requests at random instants, then
// makes them: the explanation gives the call's code, headers, body and
// statuses, and explaining charges nothing (a second explanation is the
// same as the first).
func TestExplainIsTheCall(t *testing.T) {
	svc, c, _ := shopService(t, Options{})
	ctx := context.Background()
	pool := []func() *ratelimitv3.RateLimitDescriptor{
		func() *ratelimitv3.RateLimitDescriptor { return desc("user=alice") },
		func() *ratelimitv3.RateLimitDescriptor { return desc("user=alice", "path=/cart/1") },
		func() *ratelimitv3.RateLimitDescriptor { return desc("user=bob", "path=/cart/2", "x=y") },
		func() *ratelimitv3.RateLimitDescriptor { return desc("category=read") },
		func() *ratelimitv3.RateLimitDescriptor { return desc("endpoint=/reports") },
		func() *ratelimitv3.RateLimitDescriptor { return desc("client=internal") },
		func() *ratelimitv3.RateLimitDescriptor { return withHits(desc("user=alice"), 0, false) },
		func() *ratelimitv3.RateLimitDescriptor { return withHits(desc("user=alice"), 1, true) },
		func() *ratelimitv3.RateLimitDescriptor {
			return withLimit(desc("user=bob"), 2, typev3.RateLimitUnit_MINUTE)
		},
	}
	rng := rand.New(rand.NewPCG(14, 3))
	over := 0
	for step := range 500 {
		c.now = c.now.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
		req := request("shop")
		for range 1 + rng.IntN(3) {
			req.Descriptors = append(req.Descriptors, pool[rng.IntN(len(pool))]())
		}
		e, err := svc.Explain(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		again, err := svc.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(t, e), mustJSON(t, again); a != b {
			t.Fatalf("step %d: explaining changed the buckets:\n%s\nthen\n%s", step, a, b)
		}
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := renderExplanation(e), render(resp); got != want {
			t.Fatalf("step %d: %s\nexplained %s\ncall gave %s\n%s", step, renderRequest(req), got, want, mustJSON(t, e))
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	if over < 50 || over > 450 {
		t.Errorf("%d of 500 calls over the limit: the run does not test both answers", over)
	}
}

// renderExplanation writes what an explanation says of the response as
// render writes a response. A status's limit is the deciding level's rule;
// unlimited descriptors report the most a limit_remaining holds.
func renderExplanation(e *Explanation) string {
	var b strings.Builder
	b.WriteString(e.Code + " [")
	for i, d := range e.Descriptors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(d.Code)
		if x := deciding(d); x != nil {
			if x.Name != "" {
				fmt.Fprintf(&b, " %s", x.Name)
			}
			rate := strings.Split(x.Reported, "/")
			unit := strings.ToUpper(rate[len(rate)-1])
			n := rate[0]
			if len(rate) == 3 { // N/Mxunit
				n, unit = rate[0], strings.ToUpper(rate[2])
			}
			fmt.Fprintf(&b, " %s/%s", n, unit)
			if m, _, ok := strings.Cut(rate[1], "x"); ok && len(rate) == 3 {
				fmt.Fprintf(&b, "x%s", m)
			}
			fmt.Fprintf(&b, " left=%d reset=%s", *d.Remaining, d.DurationUntilReset)
		}
	}
	b.WriteString("]")
	for _, h := range e.Headers {
		fmt.Fprintf(&b, " %s=%s", h.Key, h.Value)
	}
	return b.String()
}

// deciding returns the limit marked as deciding a descriptor's status.
func deciding(d DescriptorExplanation) *LimitExplanation {
	var found *LimitExplanation
	for _, st := range d.Walk {
		for i := range st.Limits {
			if st.Limits[i].Deciding {
				found = &st.Limits[i]
			}
		}
	}
	if o := d.LimitSentByEnvoy; o != nil && o.Deciding {
		found = o
	}
	return found
}

func renderRequest(req *rlsv3.RateLimitRequest) string {
	var parts []string
	for _, d := range req.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		parts = append(parts, fmt.Sprintf("[%s hits=%v neg=%v limit=%v]", strings.Join(es, ","), d.GetHitsAddend(), d.GetIsNegativeHits(), d.GetLimit()))
	}
	return strings.Join(parts, " ")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExplainChargesNothing reads the store's buckets before and after an
// explanation: they are the same.
func TestExplainChargesNothing(t *testing.T) {
	svc, c, store := shopService(t, Options{})
	ctx := context.Background()
	req := request("shop", desc("user=alice", "path=/cart/1"), desc("endpoint=/reports"))
	svc.ShouldRateLimit(ctx, req)
	buckets := []limit.Bucket{
		{Key: "shop|user=alice"}, {Key: "shop|user=alice|path=/cart/1|#fw1m", Limit: limit.Limit{Algorithm: limit.FixedWindow}},
		{Key: "shop|user=alice|path=/cart/1"}, {Key: "shop|endpoint=/reports"}}
	read := func() []limit.State {
		states := make([]limit.State, len(buckets))
		if _, err := store.State(ctx, c.now, buckets, states); err != nil {
			t.Fatal(err)
		}
		return states
	}
	before := read()
	for i, st := range before {
		if st.Counter != 1 {
			t.Fatalf("bucket %s after one call: %+v, want one hit (are the keys right?)", buckets[i].Key, st)
		}
	}
	for range 5 {
		if _, err := svc.Explain(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if after := read(); !slices.EqualFunc(before, after, limit.State.Equal) {
		t.Errorf("explanations changed the buckets from %+v to %+v", before, after)
	}
}

// TestExplanationJSON pins the explanation's JSON: the schema the docs
// show and scripts read.
func TestExplanationJSON(t *testing.T) {
	svc, c, _ := shopService(t, Options{})
	ctx := context.Background()
	for range 2 {
		svc.ShouldRateLimit(ctx, request("shop", desc("user=alice", "path=/cart/1")))
	}
	c.now = c.now.Add(500 * time.Millisecond)
	e, err := svc.Explain(ctx, request("shop", desc("user=alice", "path=/cart/1", "x=y"), desc("category=read"), desc("endpoint=/reports"), desc("client=internal")))
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(t, e); got != explanationJSON {
		t.Errorf("got\n%s\nwant\n%s", got, explanationJSON)
	}
}

const explanationJSON = `{
  "domain": "shop",
  "file": "test.yaml",
  "at": "2026-05-06T07:08:09.5Z",
  "code": "OVER_LIMIT",
  "headers": [
    {
      "key": "X-RateLimit-Remaining",
      "value": "0"
    },
    {
      "key": "X-RateLimit-Clear",
      "value": "50.5"
    },
    {
      "key": "X-RateLimit-Reset",
      "value": "50.5"
    },
    {
      "key": "Retry-After",
      "value": "51"
    }
  ],
  "body": "Slow down: try again in 51 s.",
  "descriptors": [
    {
      "entries": [
        {
          "key": "user",
          "value": "alice"
        },
        {
          "key": "path",
          "value": "/cart/1"
        },
        {
          "key": "x",
          "value": "y"
        }
      ],
      "hits": 1,
      "code": "OVER_LIMIT",
      "deciding": {
        "path": "user/path=/cart/*",
        "name": "cart",
        "key": "shop|user=alice|path=/cart/1|#fw1m"
      },
      "remaining": 0,
      "duration_until_reset": "50.5s",
      "walk": [
        {
          "entry": 0,
          "path": "user",
          "line": 4,
          "match": "any value",
          "limits": [
            {
              "algorithm": "leaky_bucket",
              "size": 3,
              "drip_rate": "1s",
              "drip_size": 1,
              "reported_as": "1/second",
              "label": "user",
              "bucket": {
                "key": "shop|user=alice",
                "hits": 1,
                "state": {
                  "admits": true,
                  "remaining": 1,
                  "clear": "1.5s"
                }
              }
            }
          ]
        },
        {
          "entry": 1,
          "path": "user/path=/cart/*",
          "line": 7,
          "match": "wildcard",
          "limits": [
            {
              "algorithm": "fixed_window",
              "name": "cart",
              "limit": 2,
              "window": "1m0s",
              "reported_as": "2/minute",
              "label": "cart",
              "deciding": true,
              "bucket": {
                "key": "shop|user=alice|path=/cart/1|#fw1m",
                "hits": 1,
                "state": {
                  "admits": false,
                  "remaining": 0,
                  "clear": "50.5s",
                  "reset": "50.5s"
                }
              }
            },
            {
              "algorithm": "leaky_bucket",
              "name": "cart_shadow",
              "shadow_mode": true,
              "size": 1,
              "drip_rate": "1h0m0s",
              "drip_size": 1,
              "reported_as": "1/hour",
              "label": "cart_shadow",
              "bucket": {
                "key": "shop|user=alice|path=/cart/1",
                "hits": 1,
                "shadow": true,
                "state": {
                  "admits": false,
                  "remaining": 0,
                  "clear": "59m59.5s",
                  "reset": "59m59.5s"
                }
              }
            }
          ]
        }
      ],
      "stopped": {
        "entry": 2,
        "key": "x",
        "value": "y",
        "reason": "no descriptor of the config matches it here"
      }
    },
    {
      "entries": [
        {
          "key": "category",
          "value": "read"
        }
      ],
      "hits": 1,
      "code": "OK",
      "walk": [
        {
          "entry": 0,
          "path": "category=read",
          "line": 15,
          "match": "exact",
          "limits": [
            {
              "algorithm": "leaky_bucket",
              "name": "reads",
              "size": 1,
              "drip_rate": "1m0s",
              "drip_size": 1,
              "reported_as": "1/minute",
              "label": "reads",
              "skipped": "replaces",
              "replaced_by": "endpoint=/reports"
            }
          ]
        }
      ]
    },
    {
      "entries": [
        {
          "key": "endpoint",
          "value": "/reports"
        }
      ],
      "hits": 1,
      "code": "OK",
      "deciding": {
        "path": "endpoint=/reports",
        "key": "shop|endpoint=/reports"
      },
      "remaining": 5,
      "duration_until_reset": "0s",
      "walk": [
        {
          "entry": 0,
          "path": "endpoint=/reports",
          "line": 18,
          "match": "exact",
          "limits": [
            {
              "algorithm": "leaky_bucket",
              "size": 5,
              "drip_rate": "12s",
              "drip_size": 1,
              "reported_as": "5/minute",
              "label": "endpoint=/reports",
              "deciding": true,
              "bucket": {
                "key": "shop|endpoint=/reports",
                "hits": 1,
                "state": {
                  "admits": true,
                  "remaining": 5,
                  "clear": "0s"
                }
              }
            }
          ]
        }
      ]
    },
    {
      "entries": [
        {
          "key": "client",
          "value": "internal"
        }
      ],
      "hits": 1,
      "code": "OK",
      "unlimited": true,
      "walk": [
        {
          "entry": 0,
          "path": "client=internal",
          "line": 25,
          "match": "exact",
          "unlimited": true
        }
      ]
    }
  ]
}`

// TestExplainOffline: from the config alone, the walks, limits and keys,
// without state or a decision.
func TestExplainOffline(t *testing.T) {
	cfg := loadConfig(t, explainConfig)
	e, err := ExplainConfig(cfg, request("shop", desc("user=alice", "path=/cart/1")), false)
	if err != nil {
		t.Fatal(err)
	}
	js := mustJSON(t, e)
	for _, absent := range []string{`"state"`, `"code"`, `"at"`, `"headers"`, `"deciding"`} {
		if strings.Contains(js, absent) {
			t.Errorf("offline explanation has %s:\n%s", absent, js)
		}
	}
	if k := e.Descriptors[0].Walk[1].Limits[0].Bucket.Key; k != "shop|user=alice|path=/cart/1|#fw1m" {
		t.Errorf("cart level's key %q", k)
	}
	for _, c := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{request("nope", desc("user=a")), `unknown domain "nope": a call for it is answered OK without limits; the config's domains are "shop"`},
		{request("shop", desc("user=a", "=x")), "descriptors[0].entries[1] has an empty key"},
		{request("shop"), "request has no descriptors"},
	} {
		if _, err := ExplainConfig(cfg, c.req, false); status.Code(grpcStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want InvalidArgument saying %q", renderRequest(c.req), err, c.want)
		}
	}
}

// TestExplainNeedsAnInspector: a store that cannot be read without
// charging says so (501 over HTTP), charging nothing.
func TestExplainNeedsAnInspector(t *testing.T) {
	applied := false
	store := storeFunc(func(context.Context, time.Time, []limit.Bucket, []limit.Result) error { applied = true; return nil })
	svc, _ := newService(t, Options{Store: store})
	_, err := svc.Explain(context.Background(), request("api", desc("user=a")))
	if status.Code(grpcStatus(err)) != codes.Unimplemented || applied {
		t.Errorf("got %v (store applied: %v), want Unimplemented and nothing applied", err, applied)
	}
}
