package refstats

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/statsdtest"
)

// TestDogStatsDOverUDP: with DogStatsD, every stat of a flush arrives in
// a datagram with the tags, its name rewritten by a mogrifier; over TCP it
// is refused, as DogStatsD listens on UDP.
func TestDogStatsDOverUDP(t *testing.T) {
	addr, lines := statsdtest.ListenUDP(t, 100)
	tags, err := ParseTags("team:edge")
	if err != nil {
		t.Fatal(err)
	}
	byDomain, err := NewMogrifier(threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	s, err := NewStatsD(addr, "udp", log, WithTags(tags), WithDogStatsD(Mogrifiers{byDomain}))
	if err != nil {
		t.Fatal(err)
	}
	s.Count("ratelimit.service.rate_limit.api.user.over_limit", 2)
	s.Count("ratelimit.service.config_load_success", 1)
	s.Time("ratelimit_server.ShouldRateLimit.response_time", 3*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, 50*time.Millisecond); close(done) }()
	var got []string
	for range 3 {
		select {
		case l := <-lines:
			got = append(got, l)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %q arrived", got)
		}
	}
	cancel()
	<-done
	slices.Sort(got)
	want := []string{
		"ratelimit.service.config_load_success:1|c|#team:edge",
		"ratelimit.service.rate_limit.over_limit:2|c|#team:edge,domain:api,descriptor:user",
		"ratelimit_server.ShouldRateLimit.response_time:3|ms|#team:edge",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := NewStatsD("127.0.0.1:8125", "tcp", log, WithDogStatsD(nil)); err == nil || !strings.Contains(err.Error(), "udp") {
		t.Errorf("DogStatsD over tcp: %v, want an error", err)
	}
}
