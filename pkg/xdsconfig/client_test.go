package xdsconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

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
// every field included: unlimited, replaces, quota mode, metadata, a week.
func TestBuildMatchesTheFile(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"service_with_quota": map[string]any{"name": "service_1"}, "weight": 2, "on": true,
		"tags": []any{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "client", Value: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "user", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 0},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "action", Value: "a: b", DetailedMetric: true, RateLimit: &rlsconfv3.RateLimitPolicy{
				Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 3, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "m"}}}}}},
		{Key: "service", Value: "service_1", QuotaMode: true, Metadata: md,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 7}},
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
      - key: action
        value: "a: b"
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 3, name: n, replaces: [{name: m}]}
  - key: service
    value: service_1
    quota_mode: true
    metadata: {service_with_quota: {name: service_1}, weight: 2, "on": true, tags: [a, b]}
    rate_limit: {unit: week, requests_per_unit: 7}
`)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(cfg.Describe(), "", "  ")
	wantJSON, _ := json.MarshalIndent(want.Describe(), "", "  ")
	if string(got) != string(wantJSON) {
		t.Fatalf("from the resource:\n%s\nfrom the file:\n%s", got, wantJSON)
	}
	for _, field := range []string{`"quota_mode": true`, `"name": "service_1"`, `"detailed_metric": true`, `"reported_as": "7/week"`} {
		if !strings.Contains(string(got), field) {
			t.Errorf("%s is not in the config read from the resource:\n%s", field, got)
		}
	}
}

// TestEveryFieldIsRead: the YAML form a resource is read as has a field
// for every field of RateLimitDescriptor and RateLimitPolicy, under the
// same name, so a field the API adds cannot be dropped here unnoticed
// when the API module is upgraded.
func TestEveryFieldIsRead(t *testing.T) {
	for _, c := range []struct {
		msg  protoreflect.MessageDescriptor
		form reflect.Type
	}{
		{(&rlsconfv3.RateLimitConfig{}).ProtoReflect().Descriptor(), reflect.TypeFor[file]()},
		{(&rlsconfv3.RateLimitDescriptor{}).ProtoReflect().Descriptor(), reflect.TypeFor[node]()},
		{(&rlsconfv3.RateLimitPolicy{}).ProtoReflect().Descriptor(), reflect.TypeFor[rate]()},
		{(&rlsconfv3.RateLimitReplace{}).ProtoReflect().Descriptor(), reflect.TypeFor[replace]()},
	} {
		read := map[string]bool{}
		for i := range c.form.NumField() {
			name, _, _ := strings.Cut(c.form.Field(i).Tag.Get("yaml"), ",")
			read[name] = true
		}
		if c.msg.Name() == "RateLimitConfig" {
			read["name"] = true // the resource's name: the file it stands for
		}
		fields := c.msg.Fields()
		for i := range fields.Len() {
			if f := fields.Get(i); !read[string(f.Name())] {
				t.Errorf("%s.%s (field %d) is not read from xDS", c.msg.FullName(), f.Name(), f.Number())
			}
		}
	}
}

// TestUnknownFieldsAreToldOf: a resource carrying fields this service's
// API does not have is taken without them, and each field is told of
// once per resource, however often the resource comes, with where it is.
func TestUnknownFieldsAreToldOf(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := xdstest.Start(t, lis)
	withUnknown := func(version string) *rlsconfv3.RateLimitConfig {
		r := xdstest.Limit("api", "user", "alice", "limit", 5, rlsconfv3.RateLimitUnit_MINUTE)
		// A newer API: field 9 of the descriptor (a varint), field 20 of
		// its policy (a string), field 9 of the resource.
		d := r.Descriptors[0]
		d.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
		d.RateLimit.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 20, protowire.BytesType), version))
		r.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 3))
		return r
	}
	configs, unknown := make(chan *descriptors.Config, 10), make(chan UnknownField, 10)
	var logs strings.Builder
	var mu sync.Mutex
	c := &Client{Address: x.Addr, NodeID: "n", Credentials: insecure.NewCredentials(),
		OnConfig: func(cfg *descriptors.Config) { configs <- cfg }, OnUnknownField: func(u UnknownField) { unknown <- u },
		Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	x.Set(t, "n", "1", withUnknown("1"))
	cfg := receive(t, configs)
	if levels := cfg.Domain("api").Resolve([]descriptors.Entry{{Key: "user", Value: "alice"}}, nil, nil); len(levels) != 1 {
		t.Fatalf("the resource's known fields were not taken: %v", levels)
	}
	x.Set(t, "n", "2", withUnknown("2"))
	receive(t, configs)
	var got []string
	for len(unknown) > 0 {
		u := <-unknown
		got = append(got, fmt.Sprintf("%s %s %d %s", u.Resource, u.Message, u.Number, u.Path))
	}
	slices.Sort(got)
	want := []string{
		"api ratelimit.config.ratelimit.v3.RateLimitConfig 9 ",
		"api ratelimit.config.ratelimit.v3.RateLimitDescriptor 9 descriptors[0]",
		"api ratelimit.config.ratelimit.v3.RateLimitPolicy 20 descriptors[0].rate_limit",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unknown fields told of over two updates:\n%s\nwant each once:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "which this service does not know"); n != 3 {
		t.Errorf("%d log lines for 3 unknown fields:\n%s", n, out)
	}
	if !strings.Contains(out, "xds:api: ratelimit.config.ratelimit.v3.RateLimitPolicy has field 20") {
		t.Errorf("the log does not name the resource, message and field:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
