package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/region"
)

type downStore struct{ calls int }

func (s *downStore) Check(context.Context) error {
	s.calls++
	return errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func newTestHandler(t *testing.T, o Options) http.Handler {
	t.Helper()
	h, err := Handler(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(t *testing.T, h http.Handler, path string, v any) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	resp := rec.Result()
	if v != nil {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("GET %s: Content-Type %q", path, ct)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp
}

func TestEndpoints(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	cfg := loadConfig(t)
	a := NewActivity(func() time.Time { return now }, 16)
	store := &downStore{}
	reloads := &Reloads{}
	reloads.LoadedAt(t0.Add(-time.Minute), errors.New("api.yaml:3: unknown field"))
	h := newTestHandler(t, Options{Version: "v1.2.3", Mode: "local-first", SyncInterval: time.Second, StoreName: "redis", Store: store,
		ConfigSource: "files: /etc/envoy-rls", Config: func() *descriptors.Config { return cfg }, Reloads: reloads,
		Started: t0.Add(-time.Hour), Activity: a, Now: func() time.Time { return now }})

	var st Status
	get(t, h, "/ui/status", &st)
	get(t, h, "/ui/status", &st) // cached: the store is asked once
	if st.Version != "v1.2.3" || st.Mode != "local-first" || st.SyncInterval != "1s" || st.Store.OK || !strings.Contains(st.Store.Error, "refused") ||
		st.Config.Domains != 1 || st.Config.LastError == "" || st.Config.LastReload != "2023-11-14T22:12:20Z" || st.UptimeSeconds != 3600 || store.calls != 1 {
		t.Errorf("status %+v, store asked %d times", st, store.calls)
	}

	hostile := "<b>x</b>"
	l := levels(t, cfg, descriptors.Entry{Key: "user", Value: hostile})[0]
	for range 3 {
		a.Limit("api", l.Rule, l.Key, 1, refused, false)
	}
	a.Limit("api", l.Rule, l.Key, 1, admitted, false)
	now = t0.Add(time.Second)
	var lim Limits
	get(t, h, "/ui/limits?seconds=2", &lim)
	if lim.End != t0.Unix() || len(lim.Domains) != 1 || len(lim.Domains[0].Limits) != 2 {
		t.Fatalf("limits %+v", lim)
	}
	user := lim.Domains[0].Limits[0]
	if user.Label != "user" || user.Rate != "60/minute" || user.Algorithm != "leaky_bucket" || user.Allowed[1] != 1 || user.Refused[1] != 3 || len(user.Allowed) != 2 {
		t.Errorf("limit user %+v", user)
	}
	if resp := get(t, h, "/ui/limits?seconds=301", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("seconds=301: %d", resp.StatusCode)
	}

	var ref Refused
	get(t, h, "/ui/refused", &ref)
	if len(ref.Buckets) != 1 {
		t.Fatalf("refused %+v", ref)
	}
	b := ref.Buckets[0]
	// JSON escapes <, > as text: decoded, it is the value as sent.
	if b.Domain != "api" || b.Refused != 3 || b.Limit != "user" || len(b.Descriptor) != 1 || b.Descriptor[0].Value != hostile || b.ResetSeconds != 0.5 {
		t.Errorf("refused bucket %+v", b)
	}

	var q Quotas
	get(t, h, "/ui/rlqs", &q)
	if q.Streams == nil || q.Levels == nil {
		t.Errorf("rlqs idle: %+v, want empty lists", q)
	}

	resp := get(t, h, "/", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestSameOrigin(t *testing.T) {
	reached := 0
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })
	for _, c := range []struct {
		addr, method, host, origin, site string
		ok                               bool
	}{
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "http://127.0.0.1:6070", "same-origin", true},
		{"127.0.0.1:6070", "DELETE", "localhost:6070", "http://localhost:6070", "same-origin", true},
		{"127.0.0.1:6070", "POST", "127.0.0.1:6070", "", "", true}, // curl
		{"127.0.0.1:6070", "POST", "127.0.0.1:6070", "", "none", true},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "http://evil.example", "cross-site", false},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "http://evil.example", "", false},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "", "same-site", false},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "http://localhost:6071", "", false},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "null", "", false},
		{"127.0.0.1:6070", "DELETE", "127.0.0.1:6070", "https://127.0.0.1:6070", "", false},
		{"0.0.0.0:6070", "DELETE", "rls.internal:6070", "http://rls.internal:6070", "same-origin", true},
		{"0.0.0.0:6070", "DELETE", "rls.internal:6070", "http://other.internal:6070", "", false},
		{"10.0.0.5:6070", "DELETE", "10.0.0.5:6070", "http://localhost:6070", "", false},
		{"127.0.0.1:6070", "GET", "127.0.0.1:6070", "http://evil.example", "cross-site", true}, // reads change nothing
	} {
		reached = 0
		h := newTestHandler(t, Options{Admin: admin, Origins: Origins{Addr: c.addr}})
		req := httptest.NewRequest(c.method, "http://"+c.host+"/buckets?domain=api&descriptor=user=a", nil)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			req.Header.Set("Sec-Fetch-Site", c.site)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := reached == 1; got != c.ok {
			t.Errorf("%s on %s from %q (Sec-Fetch-Site %q): passed %v, want %v", c.method, c.addr, c.origin, c.site, got, c.ok)
		}
		if !c.ok && (rec.Code != http.StatusForbidden || rec.Header().Get("Content-Type") != "application/json") {
			t.Errorf("%s from %q: %d %s, want 403 in JSON", c.method, c.origin, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}

// TestLimitsBounded: a config of more than MaxLimits limits lists the
// first MaxLimits, and says so.
func TestLimitsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range MaxLimits + 100 {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
	}
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "big.yaml", Data: []byte(b.String())})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, Options{Config: func() *descriptors.Config { return cfg }, Activity: NewActivity(nil, 8)})
	var lim Limits
	get(t, h, "/ui/limits?seconds=1", &lim)
	if !lim.Truncated || len(lim.Domains) != 1 || len(lim.Domains[0].Limits) != MaxLimits {
		t.Errorf("truncated %v, %d domains", lim.Truncated, len(lim.Domains))
	}
}

// TestStatusShowsRegions: GET /ui/status lists the regions when there are
// some, as the exchange gives them, and leaves them out otherwise.
func TestStatusShowsRegions(t *testing.T) {
	var st map[string]any
	get(t, newTestHandler(t, Options{}), "/ui/status", &st)
	if _, ok := st["regions"]; ok {
		t.Fatalf("without regions: %v", st)
	}
	regions := []region.Status{{Region: "eu", Own: true, State: "fresh"}, {Region: "us", State: "late", LastExchangeSeconds: 4.5, FailedExchanges: 3}}
	var got Status
	get(t, newTestHandler(t, Options{Regions: func() []region.Status { return regions }}), "/ui/status", &got)
	if len(got.Regions) != 2 || got.Regions[1] != regions[1] || !got.Regions[0].Own {
		t.Fatalf("regions %+v, want %+v", got.Regions, regions)
	}
}
