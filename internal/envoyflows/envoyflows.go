// Package envoyflows replays, for tests, the calls Envoy makes for limits
// on usage known only after the response: a check on the request path (a
// descriptor whose hits_addend is 0) and, at stream end, a charge of the
// cost (apply_on_stream_done, hits_addend from dynamic metadata). It
// counts what passes, to hold a rate-limit service to envoyproxy/ratelimit's
// numbers for the same calls and config.
package envoyflows

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Call sends one ShouldRateLimit request, as Envoy's filter does.
type Call func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)

// Domain is the domain of Config.
const Domain = "usage"

// Config is the config the flows run on, as envoyproxy/ratelimit reads
// it: two backends in quota mode with metadata naming them, and a token
// budget. Native files add "charge: always" (NativeConfig); started as
// the reference, every limit charges always by default.
const Config = `domain: usage
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2}}
  - key: generic_key
    value: llm
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// Resource is Config as an xDS server sends it (Envoy Gateway, Envoy AI
// Gateway): a RateLimitConfig named and of domain, its two services in
// quota mode when quotaMode is set.
func Resource(domain string, quotaMode bool) *rlsconfv3.RateLimitConfig {
	service := func(name string, n uint32) *rlsconfv3.RateLimitDescriptor {
		md := &structpb.Struct{Fields: map[string]*structpb.Value{"service_with_quota": structpb.NewStructValue(
			&structpb.Struct{Fields: map[string]*structpb.Value{"name": structpb.NewStringValue(name)}})}}
		return &rlsconfv3.RateLimitDescriptor{Key: "service", Value: name, QuotaMode: quotaMode, Metadata: md,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}
	}
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		service("service_1", 1), service("service_2", 2),
		{Key: "generic_key", Value: "llm", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 1000}},
	}}
}

// NativeConfig is Config for a service started on its own defaults: the
// file says that its limits charge always, and are fixed windows.
const NativeConfig = "charge: always\nrate_limit_algorithm: fixed_window\n" + Config

// The reference's numbers for each flow, on Config.
const (
	TokenBudgetAdmitted      = 2 // of 6: checks pass at 0 and 600 tokens, then 1,200 > 1,000
	ChargeOnResponseAdmitted = 3 // of 5: checks pass at 0, 1 and 2 of a limit of 2
	QuotaBackendsAdmitted    = 5 // of 7: service_1 twice, then service_2 three times
)

// QuotaBackendsPicked is the backends the quota flow routes to, in order.
var QuotaBackendsPicked = []string{"service_1", "service_1", "service_2", "service_2", "service_2"}

// check is a descriptor sent on the request path: hits_addend 0.
func check(key, value string) *ratelimitv3.RateLimitDescriptor {
	return charge(key, value, 0)
}

// charge is a descriptor sent at stream end with the request's cost.
func charge(key, value string, cost uint64) *ratelimitv3.RateLimitDescriptor {
	return &ratelimitv3.RateLimitDescriptor{
		Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		HitsAddend: wrapperspb.UInt64(cost),
	}
}

func ask(ctx context.Context, call Call, descs ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	return call(ctx, &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: descs})
}

// TokenBudget sends 6 requests through a budget of 1,000 tokens a minute
// (generic_key=llm), each response costing 600, and returns how many were
// admitted. A rejected request has no response and is charged nothing.
func TokenBudget(ctx context.Context, call Call) (int, error) {
	return checkThenCharge(ctx, call, 6, "generic_key", "llm", 600)
}

// ChargeOnResponse sends 5 requests through service_2's 2 a minute,
// checked on the request path and charged 1 at stream end, and returns how
// many were admitted.
func ChargeOnResponse(ctx context.Context, call Call) (int, error) {
	return checkThenCharge(ctx, call, 5, "service", "service_2", 1)
}

func checkThenCharge(ctx context.Context, call Call, n int, key, value string, cost uint64) (int, error) {
	admitted := 0
	for i := range n {
		resp, err := ask(ctx, call, check(key, value))
		if err != nil {
			return admitted, fmt.Errorf("request %d, check: %w", i, err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			continue
		}
		admitted++
		if _, err := ask(ctx, call, charge(key, value, cost)); err != nil {
			return admitted, fmt.Errorf("request %d, charge: %w", i, err)
		}
	}
	return admitted, nil
}

// QuotaBackends sends 7 requests that check both backends on the request
// path, route to the backend the response's dynamic metadata names
// (metadata.service_with_quota.name, as an Envoy header mutation reads
// it) and charge that backend 1 at stream end. It returns the backends the
// admitted requests went to, in order.
func QuotaBackends(ctx context.Context, call Call) ([]string, error) {
	var picked []string
	for i := range 7 {
		resp, err := ask(ctx, call, check("service", "service_1"), check("service", "service_2"))
		if err != nil {
			return picked, fmt.Errorf("request %d, check: %w", i, err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			continue
		}
		name := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].
			GetStructValue().GetFields()["name"].GetStringValue()
		if name == "" {
			return picked, fmt.Errorf("request %d: admitted, but its dynamic metadata names no backend: %v", i, resp.GetDynamicMetadata())
		}
		picked = append(picked, name)
		if _, err := ask(ctx, call, charge("service", name, 1)); err != nil {
			return picked, fmt.Errorf("request %d, charge: %w", i, err)
		}
	}
	return picked, nil
}

// AwayFromMinuteEdge waits, if need be, until a flow run now ends in the
// minute it starts in: the flows' limits are fixed windows of a minute,
// which a minute's edge would empty midway. A flow takes well under the
// margin.
func AwayFromMinuteEdge(margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < margin {
		time.Sleep(left + 50*time.Millisecond)
	}
}

// Expect runs the three flows, each on fresh buckets from fresh(), and
// fails t unless each admits envoyproxy/ratelimit's number, within slack
// requests (and, with slack, the quota flow still routes to service_1
// before service_2).
func Expect(t testing.TB, fresh func() Call, slack int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	near := func(what string, got, want int, err error) {
		t.Helper()
		if err != nil || got < want-slack || got > want+slack {
			t.Errorf("%s: %d admitted (%v), want %d (±%d) as envoyproxy/ratelimit", what, got, err, want, slack)
		}
	}
	n, err := TokenBudget(ctx, fresh())
	near("token budget", n, TokenBudgetAdmitted, err)
	n, err = ChargeOnResponse(ctx, fresh())
	near("charge on response", n, ChargeOnResponseAdmitted, err)
	picked, err := QuotaBackends(ctx, fresh())
	near("quota backends", len(picked), QuotaBackendsAdmitted, err)
	switch {
	case slack == 0 && !slices.Equal(picked, QuotaBackendsPicked):
		t.Errorf("quota backends %v, want %v as envoyproxy/ratelimit", picked, QuotaBackendsPicked)
	case !slices.IsSorted(picked) || len(picked) > 0 && picked[0] != "service_1":
		t.Errorf("quota backends %v: want service_1 first, then service_2", picked)
	}
}
