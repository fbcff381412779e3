package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/metrics"
)

func TestMemcachedEnvErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MEMCACHE_HOST_PORT": "mc"}, `MEMCACHE_HOST_PORT: "mc": want host:port`},
		{map[string]string{"MEMCACHE_HOST_PORT": "mc:1", "MEMCACHE_SRV": "_m._tcp.x"}, "MEMCACHE_SRV: MEMCACHE_HOST_PORT is set too"},
		{map[string]string{"MEMCACHE_SRV": "mc.example"}, `MEMCACHE_SRV: "mc.example": want _service._proto.name`},
		{map[string]string{"MEMCACHE_SRV": "_m._tcp.x", "MEMCACHE_SRV_REFRESH": "often"}, `MEMCACHE_SRV_REFRESH: "often"`},
		{map[string]string{"MEMCACHE_HOST_PORT": "mc:1", "MEMCACHE_MAX_IDLE_CONNS": "many"}, `MEMCACHE_MAX_IDLE_CONNS: "many"`},
		{map[string]string{"MEMCACHE_HOST_PORT": "mc:1", "EXPIRATION_JITTER_MAX_SECONDS": "-1"}, `EXPIRATION_JITTER_MAX_SECONDS: "-1"`},
		{map[string]string{"MEMCACHE_HOST_PORT": "mc:1", "MEMCACHE_TLS": "yes please"}, `MEMCACHE_TLS="yes please"`},
		{map[string]string{"MEMCACHE_HOST_PORT": "mc:1", "CACHE_KEY_PREFIX": "a b"}, `CACHE_KEY_PREFIX: "a b"`},
	} {
		c.env["BACKEND_TYPE"] = "memcache"
		_, err := readEnvoyproxyEnv(lookupIn(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.env, err, c.want)
		}
	}
}

func TestMemcachedFlags(t *testing.T) {
	env := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1,b:2", "-failure-mode", "local"}, ""},
		{[]string{"-store", "memcached", "-memcached-srv", "_m._tcp.x", "-memcached-srv-refresh", "30s"}, ""},
		{[]string{"-store", "memcached"}, "-memcached-addrs or -memcached-srv"},
		{[]string{"-memcached-addrs", "a:1"}, "-memcached-addrs: set for the memcached store"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-memcached-srv", "_m._tcp.x"}, "one or the other"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-memcached-srv-refresh", "1s"}, "-memcached-srv-refresh needs -memcached-srv"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-memcached-tls-ca", "ca.pem"}, "need -memcached-tls"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-memcached-timeout", "0s"}, "-memcached-timeout"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-sync-interval", "1s"}, "-sync-interval"},
		{[]string{"-store", "memcached", "-memcached-addrs", "a:1", "-memory-snapshot", "s.snap"}, "-memory-snapshot"},
	} {
		_, err := parseFlags(c.args, env, io.Discard, false)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// TestMemcachedStoreOpens: -store memcached opens the memcached store, and
// with -failure-mode local the fallback store in front of it; no Redis
// store comes with it (RLQS divides in process).
func TestMemcachedStoreOpens(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for mode, want := range map[string]string{"unavailable": "*memcached.Store", "local": "*fallback.Store"} {
		s, err := parseFlags([]string{"-store", "memcached", "-memcached-addrs", "127.0.0.1:1", "-failure-mode", mode}, func(string) (string, bool) { return "", false }, io.Discard, false)
		if err != nil {
			t.Fatal(err)
		}
		st, red, err := openStore(s, metrics.New(0.8), log)
		if err != nil {
			t.Fatalf("-failure-mode %s: %v", mode, err)
		}
		if got := fmt.Sprintf("%T", st); got != want || red != nil {
			t.Errorf("-failure-mode %s: store %s (Redis %v), want %s and no Redis", mode, got, red, want)
		}
		if s.mode() != "exact: every request decided on memcached" {
			t.Errorf("mode %q", s.mode())
		}
		st.Close()
	}
}
