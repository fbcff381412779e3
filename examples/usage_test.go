package examples

import (
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestEnvoyUsageExample: the usage-based Envoy config validates against
// Envoy's protos, checks on the request path and charges at stream end the
// same descriptor, from the dynamic metadata its Lua filter sets, and
// envoy-rls's file for its domain charges always.
func TestEnvoyUsageExample(t *testing.T) {
	var b bootstrapv3.Bootstrap
	decodeProto(t, "envoy/usage.yaml", readYAML(t, "envoy/usage.yaml")[0], &b)
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	rl, lua := &ratelimitv3.RateLimit{}, &luav3.Lua{}
	if err := filters[0].GetTypedConfig().UnmarshalTo(rl); err != nil {
		t.Fatalf("the first HTTP filter is not the rate-limit filter: %v", err)
	}
	if err := filters[1].GetTypedConfig().UnmarshalTo(lua); err != nil {
		t.Fatalf("the second HTTP filter is not Lua: %v", err)
	}
	route := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	per := &ratelimitv3.RateLimitPerRoute{}
	if err := route.GetTypedPerFilterConfig()[filters[0].GetName()].UnmarshalTo(per); err != nil {
		t.Fatalf("the route has no rate-limit config of its own (hits_addend needs one): %v", err)
	}
	limits := per.GetRateLimits()
	if len(limits) != 2 {
		t.Fatalf("%d rate limits, want a check and a charge", len(limits))
	}
	check, charge := limits[0], limits[1]
	if check.GetApplyOnStreamDone() || check.GetHitsAddend().GetNumber().GetValue() != 0 || check.GetHitsAddend().GetNumber() == nil {
		t.Errorf("the first is not a check on the request path (hits_addend 0): %v", check)
	}
	if !charge.GetApplyOnStreamDone() || check.GetActions()[0].String() != charge.GetActions()[0].String() {
		t.Errorf("the second does not charge the same descriptor at stream end: %v", charge)
	}
	// The charge reads what the Lua filter sets: namespace and key.
	const metadata = "%DYNAMIC_METADATA(envoy.filters.http.lua:tokens)%"
	if charge.GetHitsAddend().GetFormat() != metadata ||
		!strings.Contains(lua.GetDefaultSourceCode().GetInlineString(), `dynamicMetadata():set("envoy.filters.http.lua", "tokens"`) {
		t.Errorf("the charge's hits (%q) are not what the Lua filter sets", charge.GetHitsAddend().GetFormat())
	}
	cfg := loadConfig(t, "envoy/envoy-rls")
	d := cfg.Domain(rl.GetDomain())
	if d == nil {
		t.Fatalf("Envoy asks for domain %q, which envoy-rls/ does not define", rl.GetDomain())
	}
	key := check.GetActions()[0].GetRequestHeaders().GetDescriptorKey()
	levels := d.Resolve([]descriptors.Entry{{Key: key, Value: "client-1"}}, nil, nil)
	if len(levels) != 1 || !levels[0].Rule.Always {
		t.Errorf("[%s=client-1] reaches %v in envoy-rls/, want one limit that charges always", key, levels)
	}
}

// TestEnvoyGatewayUsagePolicy: the BackendTrafficPolicy makes the request
// path a check (cost.request 0) and charges the response's cost from
// metadata, in the global rate limit that envoy-rls serves.
func TestEnvoyGatewayUsagePolicy(t *testing.T) {
	doc := readYAML(t, "envoy-gateway/usage-policy.yaml")[0]
	if at(t, doc, "apiVersion") != "gateway.envoyproxy.io/v1alpha1" || at(t, doc, "kind") != "BackendTrafficPolicy" {
		t.Fatalf("not a BackendTrafficPolicy: %v %v", at(t, doc, "apiVersion"), at(t, doc, "kind"))
	}
	if at(t, doc, "spec", "rateLimit", "type") != "Global" {
		t.Error("cost.response needs the global rate limit")
	}
	cost := at(t, doc, "spec", "rateLimit", "global", "rules", 0, "cost")
	if at(t, cost, "request", "from") != "Number" || at(t, cost, "request", "number") != 0 {
		t.Errorf("cost.request %v, want Number 0: a check on the request path", at(t, cost, "request"))
	}
	if at(t, cost, "response", "from") != "Metadata" || at(t, cost, "response", "metadata", "namespace") == nil || at(t, cost, "response", "metadata", "key") == nil {
		t.Errorf("cost.response %v, want it from metadata", at(t, cost, "response"))
	}
}
