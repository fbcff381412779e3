package examples

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// TestEnvoyGatewayBudgets: envoy-gateway/budgets.yaml loads, and holds a
// limit for each rule of budgets-policy.yaml, under the keys Envoy Gateway
// names them by (rule-<i>-match-0 below the route's entry): the policy's
// token rule, a check on the request path charged from the response, is
// a calendar month in Berlin that charges always; its request rule, a
// minute's limit charged as admitted. Each is of the policy's unit.
func TestEnvoyGatewayBudgets(t *testing.T) {
	cfg := loadConfig(t, "envoy-gateway/budgets.yaml")
	d := cfg.Domain("default/eg/http")
	if d == nil {
		t.Fatal("budgets.yaml has no domain default/eg/http (the listener Envoy Gateway names it after)")
	}
	policy := readYAML(t, "envoy-gateway/budgets-policy.yaml")[0]
	if at(t, policy, "kind") != "BackendTrafficPolicy" || at(t, policy, "spec", "rateLimit", "type") != "Global" {
		t.Fatal("budgets-policy.yaml is not a global rate limit's BackendTrafficPolicy")
	}
	route := "httproute/default/" + at(t, policy, "spec", "targetRefs", 0, "name").(string) + "/rule/0/match/0/*"
	units := map[string]limit.Unit{"Minute": limit.Minute, "Hour": limit.Hour, "Day": limit.Day, "Month": limit.Month}
	rules := at(t, policy, "spec", "rateLimit", "global", "rules").([]any)
	if len(rules) != 2 {
		t.Fatalf("%d rules, want the tokens' and the requests'", len(rules))
	}
	for i, rule := range rules {
		header := at(t, rule, "clientSelectors", 0, "headers", 0)
		if at(t, header, "type") != "Distinct" {
			t.Fatalf("rule %d: header %v, want a Distinct one (a bucket per value)", i, header)
		}
		levels := d.Resolve([]descriptors.Entry{{Key: route, Value: route}, {Key: fmt.Sprintf("rule-%d-match-0", i), Value: "someone"}}, nil, nil)
		if len(levels) != 1 {
			t.Fatalf("rule %d: the descriptor Envoy Gateway sends reaches %d limits in budgets.yaml, want 1", i, len(levels))
		}
		r := levels[0].Rule
		if want := units[at(t, rule, "limit", "unit").(string)]; r.Rate.Unit != want {
			t.Errorf("rule %d: budgets.yaml's limit is per %v, the policy's per %v", i, r.Rate.Unit, want)
		}
		cost, charged := rule.(map[string]any)["cost"]
		if !charged {
			if r.Always {
				t.Errorf("rule %d counts requests, but its limit charges always", i)
			}
			continue
		}
		if at(t, cost, "request", "number") != 0 || at(t, cost, "response", "from") != "Metadata" {
			t.Errorf("rule %d: cost %v, want a check on the request path and the response's tokens charged", i, cost)
		}
		l := r.Limit
		if !r.Always || !l.IsCalendar() || l.Calendar != window.Month || l.Zone != "Europe/Berlin" {
			t.Errorf("rule %d: %v (charges always: %v), want a calendar month in Europe/Berlin that charges always", i, l, r.Always)
		}
	}
	research := d.Resolve([]descriptors.Entry{{Key: route, Value: route}, {Key: "rule-0-match-0", Value: "research"}}, nil, nil)
	if len(research) != 1 || research[0].Rule.Limit.Size != 10000000 || !strings.Contains(research[0].Rule.Name, "research") {
		t.Errorf("the research team reaches %v, want its own budget of 10,000,000", research)
	}
}
