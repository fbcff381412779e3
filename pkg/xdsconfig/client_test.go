package xdsconfig

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestSubscription: the client takes the server's configs as they come;
// refuses an invalid one, keeping the one in force, without spinning when
// the server resends it at once; and connects to a server that comes up
// late.
func TestSubscription(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // the server comes up later

	configs, refusals := make(chan *descriptors.Config, 10), make(chan error, 10)
	c := &Client{Address: addr, NodeID: "envoy-ratelimit", Credentials: insecure.NewCredentials(),
		OnConfig: func(cfg *descriptors.Config) { configs <- cfg }, OnRejected: func(err error) { refusals <- err },
		Log: slog.New(slog.DiscardHandler)}
	c.Backoff.Min, c.Backoff.Max = 50*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(300 * time.Millisecond) // a few attempts fail
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x := xdstest.Start(t, lis)
	x.Set(t, "envoy-ratelimit", "1", xdstest.Limit("api", "user", "alice", "limit", 5, rlsconfv3.RateLimitUnit_MINUTE))
	cfg := receive(t, configs)
	levels := cfg.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "alice"}}, nil, nil)
	if len(levels) != 1 || levels[0].Rule.Rate.RequestsPerUnit != 5 || levels[0].Rule.Name != "limit" {
		t.Fatalf("version 1: %v", levels)
	}

	// An invalid update: refused with the problem, file and field named.
	x.Set(t, "envoy-ratelimit", "2", xdstest.Limit("api", "user", "alice", "limit", 5, rlsconfv3.RateLimitUnit_UNKNOWN))
	if err := receive(t, refusals); !strings.Contains(err.Error(), "xds:api:") || !strings.Contains(err.Error(), "rate_limit.unit: is required") {
		t.Fatalf("refusal: %v", err)
	}
	time.Sleep(time.Second)
	if n := x.Nacks(); n < 1 || n > 12 {
		t.Fatalf("%d refusals sent in a second for one bad version: want a few, not a spin", n)
	}
	select {
	case cfg := <-configs:
		t.Fatalf("the invalid version was applied: %v", cfg.Domains())
	default:
	}

	// A valid one after it applies.
	x.Set(t, "envoy-ratelimit", "3", xdstest.Limit("api", "user", "bob", "limit", 7, rlsconfv3.RateLimitUnit_HOUR),
		xdstest.Limit("web", "path", "/", "limit", 1, rlsconfv3.RateLimitUnit_SECOND))
	cfg = receive(t, configs)
	if len(cfg.Domains()) != 2 || len(cfg.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "bob"}}, nil, nil)) != 1 {
		t.Fatalf("version 3: %v", cfg.Domains())
	}
}

func receive[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing within 10s")
	}
	var zero T
	return zero
}

// TestBuildMatchesTheFile: a resource means what the same YAML file means,
// unlimited and replaces included.
func TestBuildMatchesTheFile(t *testing.T) {
	r := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "client", Value: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "user", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 0},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "action", Value: "a: b", RateLimit: &rlsconfv3.RateLimitPolicy{
				Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 3, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "m"}}}}}},
	}}
	cfg, _, err := Build([]*rlsconfv3.RateLimitConfig{r}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := descriptors.Parse(descriptors.Source{Name: "xds:a", Data: []byte(`domain: api
descriptors:
  - {key: client, value: internal, rate_limit: {unlimited: true}}
  - key: user
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
    descriptors:
      - {key: action, value: "a: b", rate_limit: {unit: day, requests_per_unit: 3, name: n, replaces: [{name: m}]}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	got, wantD := cfg.Describe(), want.Describe()
	if a, b := describe(got), describe(wantD); a != b {
		t.Fatalf("from the resource:\n%s\nfrom the file:\n%s", a, b)
	}
}

func describe(d descriptors.Description) string {
	var b strings.Builder
	for _, dom := range d.Domains {
		b.WriteString(dom.Domain)
		var walk func([]descriptors.DescriptorDescription, string)
		walk = func(ds []descriptors.DescriptorDescription, indent string) {
			for _, n := range ds {
				b.WriteString("\n" + indent + n.Key + "=" + n.Value + " " + n.Name)
				if n.Limit != nil {
					b.WriteString(" " + n.Limit.Reported)
				}
				if n.Unlimited {
					b.WriteString(" unlimited")
				}
				if n.ShadowMode {
					b.WriteString(" shadow")
				}
				walk(n.Descriptors, indent+"  ")
			}
		}
		walk(dom.Descriptors, "  ")
	}
	return b.String()
}
