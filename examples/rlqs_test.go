package examples

import (
	"testing"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// TestRLQSExample: envoy/rlqs.yaml is a valid Envoy bootstrap whose
// rate_limit_quota filter asks envoy-rls (over HTTP/2, on its gRPC port)
// for a domain of envoy/envoy-rls, and every bucket its matchers build
// meets a limit there.
func TestRLQSExample(t *testing.T) {
	doc := readYAML(t, "envoy/rlqs.yaml")[0]
	var b bootstrapv3.Bootstrap
	decodeProto(t, "envoy/rlqs.yaml", doc, &b)

	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	q := &rlqsfilterv3.RateLimitQuotaFilterConfig{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(q); err != nil {
		t.Fatalf("the first HTTP filter is not rate_limit_quota: %v", err)
	}
	cfg := loadConfig(t, "envoy/envoy-rls")
	d := cfg.Domain(q.GetDomain())
	if d == nil {
		t.Fatalf("Envoy reports domain %q, which envoy-rls/ does not define", q.GetDomain())
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != q.GetRlqsServer().GetEnvoyGrpc().GetClusterName() {
			continue
		}
		addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if got := addr.GetAddress() + ":" + itoa(addr.GetPortValue()); got != "envoy-rls:8081" {
			t.Errorf("the RLQS server cluster goes to %q, want envoy-rls:8081 (the gRPC port)", got)
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("cluster %s does not speak HTTP/2, which gRPC needs", c.GetName())
		}
	}

	// Every bucket the matchers build: a sample of it meets a limit.
	var settings []*xdsmatcherv3.Matcher_OnMatch
	for _, m := range q.GetBucketMatchers().GetMatcherList().GetMatchers() {
		settings = append(settings, m.GetOnMatch())
	}
	settings = append(settings, q.GetBucketMatchers().GetOnNoMatch())
	if len(settings) < 2 {
		t.Fatalf("want a matcher and an on_no_match bucket, got %d", len(settings))
	}
	for i, on := range settings {
		s := &rlqsfilterv3.RateLimitQuotaBucketSettings{}
		if err := on.GetAction().GetTypedConfig().UnmarshalTo(s); err != nil {
			t.Fatalf("bucket settings %d: %v", i, err)
		}
		if s.GetNoAssignmentBehavior() == nil || s.GetDenyResponseSettings().GetHttpStatus().GetCode() != 429 {
			t.Errorf("bucket settings %d: want a no_assignment_behavior and 429 on deny", i)
		}
		sample := map[string]string{}
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			sample[k] = v.GetStringValue()
			if v.GetCustomValue() != nil {
				sample[k] = "alice" // the header's value
			}
		}
		if levels := d.Resolve(d.Order(sample), nil, nil); len(levels) == 0 {
			t.Errorf("bucket %v of settings %d meets no limit of domain %q", sample, i, d.Name)
		}
	}
}
