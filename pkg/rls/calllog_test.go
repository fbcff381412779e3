package rls

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestDebugLogLine: at debug level every call logs one line with its
// domain, code, descriptors, and per descriptor the deciding level and
// what remains; at info level, none.
func TestDebugLogLine(t *testing.T) {
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	level.Set(slog.LevelDebug)
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
	svc, _ := newService(t, Options{Logger: log})
	ctx := context.Background()
	for range 4 {
		svc.ShouldRateLimit(ctx, request("api", desc("user=alice", "action=trade"), desc("unknown=1")))
	}
	svc.ShouldRateLimit(ctx, request("api", desc("=x")))
	svc.ShouldRateLimit(ctx, request("web", desc("user="+strings.Repeat("x", 100))))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`msg="rate-limit call" domain=api code=OK descriptors="[user=alice,action=trade unknown=1]" deciding="[trades -]" remaining="[2 -]"`,
		`msg="rate-limit call" domain=api code=OK descriptors="[user=alice,action=trade unknown=1]" deciding="[trades -]" remaining="[1 -]"`,
		`msg="rate-limit call" domain=api code=OK descriptors="[user=alice,action=trade unknown=1]" deciding="[trades -]" remaining="[0 -]"`,
		`msg="rate-limit call" domain=api code=OVER_LIMIT descriptors="[user=alice,action=trade unknown=1]" deciding="[trades -]" remaining="[0 -]"`,
		`msg="rate-limit call" domain=api code=InvalidArgument descriptors="[=x]" deciding=[-] remaining=[-]`,
		`msg="rate-limit call" domain=web code=OK descriptors="[user=` + strings.Repeat("x", 64) + `...]" deciding=[-] remaining=[-]`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines for %d calls:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		if _, rest, _ := strings.Cut(l, " level=DEBUG "); rest != want[i] {
			t.Errorf("line %d:\n%s\nwant\n%s", i, rest, want[i])
		}
	}

	buf.Reset()
	level.Set(slog.LevelInfo)
	svc.ShouldRateLimit(ctx, request("api", desc("user=alice")))
	if buf.Len() != 0 {
		t.Errorf("at info level: %s", buf.String())
	}
	// Off, the line costs nothing: a call allocates as with no logger at all.
	quiet, _ := newService(t, Options{})
	req := request("api", desc("user=bob", "action=trade"))
	// The race detector drops pooled objects at random: each count is the
	// least of three runs, and may still be one over.
	allocs := func(s *Service) float64 {
		least := testing.AllocsPerRun(200, func() { s.ShouldRateLimit(ctx, req) })
		for range 2 {
			least = min(least, testing.AllocsPerRun(200, func() { s.ShouldRateLimit(ctx, req) }))
		}
		return least
	}
	off, none := allocs(svc), allocs(quiet)
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	if off > none+slack {
		t.Errorf("a call allocates %v times with debug off, more than the %v with a discarding logger", off, none)
	}
}
