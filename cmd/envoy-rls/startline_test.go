package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestStartLineNamesTheMode: the "envoy-rls serving" line says how the
// store decides and, started as envoyproxy/ratelimit, which of its
// defaults are in force and how to have envoy-rls's own.
func TestStartLineNamesTheMode(t *testing.T) {
	for i, c := range []struct {
		args      []string
		env       map[string]string
		reference bool
		mode      string
		dropIn    []string // parts of the drop-in note; nil: none
		notDropIn []string
	}{
		{args: nil, mode: "memory (one replica"},
		{args: []string{"-store", "redis"}, mode: "exact: every request decided on Redis"},
		{args: []string{"-store", "redis", "-sync-interval", "1s"}, mode: "local-first, syncing with Redis every 1s"},
		{args: []string{"-memory-snapshot", "/var/lib/envoy-rls/b.snapshot"}, mode: "snapshot to /var/lib/envoy-rls/b.snapshot every 10s"},
		{reference: true, env: map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379"}, mode: "exact",
			dropIn: []string{"rate_limit as fixed windows", "only the deepest node counts", "every hit charged", "no response headers",
				"RLS_RATE_LIMIT_ALGORITHM=leaky_bucket", "RLS_MATCH=all", "RLS_CHARGE=admitted", "RLS_RESPONSE_HEADERS=leaky"}},
		{reference: true, env: map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "RLS_MATCH": "all", "LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
			mode: "exact", dropIn: []string{"rate_limit as fixed windows", "its RateLimit-* headers"}, notDropIn: []string{"deepest", "RLS_MATCH"}},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		s, err := parseFlags(c.args, lookup, io.Discard, c.reference)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := s.mode(); !strings.Contains(got, c.mode) {
			t.Errorf("step %d: mode %q, want %q", i, got, c.mode)
		}
		got := s.dropIn()
		if c.dropIn == nil && got != "" {
			t.Errorf("step %d: a drop-in note %q when started as envoy-rls", i, got)
		}
		for _, part := range c.dropIn {
			if !strings.Contains(got, part) {
				t.Errorf("step %d: drop-in note %q lacks %q", i, got, part)
			}
		}
		for _, part := range c.notDropIn {
			if strings.Contains(got, part) {
				t.Errorf("step %d: drop-in note %q has %q, which an RLS_ variable turned off", i, got, part)
			}
		}
	}
	// The line itself, as serve logs it.
	srv := startServe(t, "-config", "../../config")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(srv.stderr.String(), "envoy-rls serving") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if out := srv.stderr.String(); !strings.Contains(out, `mode="memory (one replica`) {
		t.Errorf("the start line does not name the mode:\n%s", out)
	}
}
