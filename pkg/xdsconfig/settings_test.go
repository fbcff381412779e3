package xdsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestBackoffWait: the waits after 1, 2, ... failures in a row, as
// envoyproxy/ratelimit's client (jpillora/backoff) computes them.
func TestBackoffWait(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name   string
		b      Backoff
		random float64
		want   []time.Duration // after 1, 2, ... failures
	}{
		{"doubling to the max", Backoff{Min: s, Max: 10 * s, Factor: 2}, 0, []time.Duration{s, 2 * s, 4 * s, 8 * s, 10 * s, 10 * s}},
		{"the zero value", Backoff{}, 0.9, []time.Duration{500 * time.Millisecond, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}},
		{"the reference's defaults: a factor below 1 stays at the min", Backoff{Min: 10 * s, Max: 60 * s, Factor: 0.5, Jitter: true}, 0.99,
			[]time.Duration{10 * s, 10 * s, 10 * s}},
		{"jitter: between the min and the wait", Backoff{Min: s, Max: 10 * s, Factor: 2, Jitter: true}, 0.5,
			[]time.Duration{s, 1500 * time.Millisecond, 2500 * time.Millisecond, 4500 * time.Millisecond, 8500 * time.Millisecond, 10 * s}},
		{"jitter drawing 0: the min", Backoff{Min: s, Max: 10 * s, Factor: 3, Jitter: true}, 0, []time.Duration{s, s, s}},
		{"a min not below the max: the max", Backoff{Min: 5 * s, Max: 5 * s, Factor: 2}, 0, []time.Duration{5 * s, 5 * s}},
	} {
		for i, want := range c.want {
			if got := c.b.Wait(i+1, c.random); got != want {
				t.Errorf("%s: step %d: %s, want %s", c.name, i+1, got, want)
			}
		}
	}
	// Past any float: the max.
	if got := (Backoff{Min: s, Max: 7 * s, Factor: 10, Jitter: true}).Wait(5000, 0.3); got != 7*s {
		t.Errorf("after 5000 failures: %s, want the max", got)
	}
}

// TestReconnectsFollowTheBackoff: with the server away, the client waits
// the backoff's schedule between attempts.
func TestReconnectsFollowTheBackoff(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nobody listens

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	c := &Client{Address: addr, NodeID: "n", Credentials: insecure.NewCredentials(), Log: slog.New(slog.DiscardHandler),
		OnConfig: func(*descriptors.Config) {},
		Backoff:  Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond, Factor: 2}}
	c.sleep = func(ctx context.Context, d time.Duration) error {
		if waits = append(waits, d); len(waits) == 5 {
			cancel()
			return ctx.Err()
		}
		return nil
	}
	if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
}

// TestNodeMetadataAndHeaders: the server sees the node's metadata and the
// stream's headers.
func TestNodeMetadataAndHeaders(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := xdstest.Start(t, lis)
	configs := make(chan *descriptors.Config, 10)
	c := &Client{Address: x.Addr, NodeID: "n", Credentials: insecure.NewCredentials(), Log: slog.New(slog.DiscardHandler),
		OnConfig:     func(cfg *descriptors.Config) { configs <- cfg },
		NodeMetadata: map[string]string{"cluster": "eu-1", "zone": "b"},
		Headers:      map[string]string{"X-Token": "s3cret", "tenant": "blue"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	x.Set(t, "n", "1", xdstest.Limit("api", "user", "alice", "limit", 5, rlsconfv3.RateLimitUnit_MINUTE))
	receive(t, configs)

	md := x.Node().GetMetadata().GetFields()
	if len(md) != 2 || md["cluster"].GetStringValue() != "eu-1" || md["zone"].GetStringValue() != "b" {
		t.Errorf("node metadata %v", x.Node().GetMetadata())
	}
	h := x.Headers()
	if got := h.Get("x-token"); len(got) != 1 || got[0] != "s3cret" {
		t.Errorf("x-token: %v in %v", got, h)
	}
	if got := h.Get("tenant"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("tenant: %v in %v", got, h)
	}
}

// TestMaxMessageBytes: a response over MaxMessageBytes is refused by gRPC:
// the stream ends, nothing is taken, and the log says why; a client with
// room takes it.
func TestMaxMessageBytes(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := xdstest.Start(t, lis)
	big := xdstest.Limit("api", "user", "alice", "limit", 5, rlsconfv3.RateLimitUnit_MINUTE)
	for i := range 50 { // about 2 KB
		big.Descriptors = append(big.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "path", Value: fmt.Sprintf("/some/longer/path/%03d", i)})
	}
	x.Set(t, "n", "1", big)

	run := func(maxBytes int) (chan *descriptors.Config, func() string, func()) {
		configs := make(chan *descriptors.Config, 10)
		var logs strings.Builder
		var mu sync.Mutex
		c := &Client{Address: x.Addr, NodeID: "n", Credentials: insecure.NewCredentials(), MaxMessageBytes: maxBytes,
			OnConfig: func(cfg *descriptors.Config) { configs <- cfg },
			Log:      slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
			Backoff:  Backoff{Min: 50 * time.Millisecond, Max: 100 * time.Millisecond}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		out := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
		return configs, out, func() { cancel(); <-done }
	}
	configs, out, stop := run(1024)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out(), "ResourceExhausted") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal of a response over 1024 bytes logged:\n%s", out())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case cfg := <-configs:
		t.Fatalf("a response over the size was taken: %v", cfg.Domains())
	default:
	}
	stop()

	configs, _, stop = run(1 << 20)
	defer stop()
	if cfg := receive(t, configs); cfg.Domain("api") == nil {
		t.Fatal("the config was not taken with room for it")
	}
}
