package rls

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/health"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// do sends one request to h and returns the status and body.
func do(t *testing.T, h http.Handler, method, target, body string) (int, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, target, strings.NewReader(body)))
	b, err := io.ReadAll(rr.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rr.Code, string(b)
}

func bucketsURL(domain string, descs ...string) string {
	q := url.Values{"domain": {domain}}
	for _, d := range descs {
		q.Add("descriptor", d)
	}
	return "/buckets?" + q.Encode()
}

// TestAdminEndpoints: POST /explain charges nothing, GET /buckets shows
// what a descriptor's buckets hold, DELETE /buckets empties them so that
// a call passes again, on the memory store.
func TestAdminEndpoints(t *testing.T) {
	svc, _, _ := shopService(t, Options{})
	h := AdminHandler(svc, false, true)
	ctx := context.Background()
	cart := request("shop", desc("user=alice", "path=/cart/1"))
	for range 2 {
		svc.ShouldRateLimit(ctx, cart)
	}
	body := `{"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "alice"}, {"key": "path", "value": "/cart/1"}]}]}`
	for range 3 {
		code, out := do(t, h, "POST", "/explain", body)
		var e Explanation
		if err := json.Unmarshal([]byte(out), &e); code != 200 || err != nil {
			t.Fatalf("POST /explain: %d %v\n%s", code, err, out)
		}
		if e.Code != "OVER_LIMIT" || e.Descriptors[0].Deciding.Name != "cart" {
			t.Fatalf("POST /explain: %s", out)
		}
	}

	code, out := do(t, h, "GET", bucketsURL("shop", "user=alice,path=/cart/1"), "")
	var b Buckets
	if err := json.Unmarshal([]byte(out), &b); code != 200 || err != nil {
		t.Fatalf("GET /buckets: %d %v\n%s", code, err, out)
	}
	got := b.Descriptors[0].Buckets
	if len(got) != 3 || got[0].Key != "shop|user=alice" || got[0].Remaining != 1 || !got[0].AdmitsOne ||
		got[1].Label != "cart" || got[1].Remaining != 0 || got[1].AdmitsOne || got[1].Reset == "" {
		t.Fatalf("GET /buckets after 2 of 2 carts (and 3 explanations, which charge nothing):\n%s", out)
	}

	if resp, _ := svc.ShouldRateLimit(ctx, cart); render(resp) == "" || resp.GetOverallCode().String() != "OVER_LIMIT" {
		t.Fatalf("before the reset: %s", render(resp))
	}
	code, out = do(t, h, "DELETE", bucketsURL("shop", "user=alice,path=/cart/1"), "")
	var r Reset
	if err := json.Unmarshal([]byte(out), &r); code != 200 || err != nil || len(r.Keys) != 3 {
		t.Fatalf("DELETE /buckets: %d %v\n%s", code, err, out)
	}
	if resp, _ := svc.ShouldRateLimit(ctx, cart); resp.GetOverallCode().String() != "OK" {
		t.Fatalf("after the reset: %s", render(resp))
	}
	// Other buckets are left alone.
	svc.ShouldRateLimit(ctx, request("shop", desc("user=bob")))
	do(t, h, "DELETE", bucketsURL("shop", "user=alice"), "")
	_, out = do(t, h, "GET", bucketsURL("shop", "user=bob", "client=internal"), "")
	if !strings.Contains(out, `"remaining": 2`) || !strings.Contains(out, `"unlimited": true`) {
		t.Errorf("bob's bucket, and an allow-listed descriptor, after alice's reset:\n%s", out)
	}
}

// TestResetReachesOverLimitCaches: a reset drops the buckets from the
// over-limit cache of the replica that made it, and ForgetOverLimit (what
// the Redis store's messages call) from another's, which would otherwise
// keep rejecting.
func TestResetReachesOverLimitCaches(t *testing.T) {
	store, err := memory.New(memory.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a, c := newService(t, Options{Store: store, OverLimitCacheSize: 100})
	b, err := New(Options{Store: store, Config: a.Config(), OverLimitCacheSize: 100, Clock: c.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	trade := request("api", desc("user=alice", "action=trade"))
	for _, svc := range []*Service{a, b, a, b} {
		svc.ShouldRateLimit(ctx, trade)
	}
	if got := b.config.Load().cache.bytes(); got == 0 {
		t.Fatal("replica b caches nothing: the test tests nothing")
	}
	// Each replica's explanation says whether its own cache rejects.
	for _, c := range []struct {
		svc  *Service
		want bool
	}{{a, false}, {b, true}} {
		e, err := c.svc.Explain(ctx, trade)
		if err != nil {
			t.Fatal(err)
		}
		tr := e.Descriptors[0].Walk[1].Limits[0].Bucket.State
		if e.CacheRejects != c.want || tr.CachedOverLimit != c.want || e.Code != "OVER_LIMIT" {
			t.Fatalf("explanation with the trade bucket cached as over: %s", mustJSON(t, e))
		}
	}
	if _, err := a.ResetBuckets(ctx, "api", [][]descriptors.Entry{{{Key: "user", Value: "alice"}, {Key: "action", Value: "trade"}}}); err != nil {
		t.Fatal(err)
	}
	if resp, _ := a.ShouldRateLimit(ctx, trade); resp.GetOverallCode().String() != "OK" {
		t.Fatalf("replica a after its reset: %s", render(resp))
	}
	e, err := b.Explain(ctx, trade)
	if err != nil {
		t.Fatal(err)
	}
	if !e.CacheRejects || e.Code != "OK" {
		t.Fatalf("replica b, not told, explains: %s", mustJSON(t, e))
	}
	if resp, _ := b.ShouldRateLimit(ctx, trade); resp.GetOverallCode().String() != "OVER_LIMIT" {
		t.Fatalf("replica b, not told, should still reject from its cache: %s", render(resp))
	}
	b.ForgetOverLimit([]string{"api|user=alice|action=trade"})
	if resp, _ := b.ShouldRateLimit(ctx, trade); resp.GetOverallCode().String() != "OK" {
		t.Fatalf("replica b once told: %s", render(resp))
	}
	b.ShouldRateLimit(ctx, trade) // full again: 3 of 3
	b.ShouldRateLimit(ctx, trade) // cached
	store.Reset(ctx, []string{"api|user=alice|action=trade"})
	b.ForgetOverLimit(nil)
	if resp, _ := b.ShouldRateLimit(ctx, trade); resp.GetOverallCode().String() != "OK" {
		t.Fatalf("replica b told to forget everything: %s", render(resp))
	}
}

// TestAdminHostileInput: malformed requests to the admin endpoints are
// 400 (413 for a body over MaxJSONBody, as POST /json) with a message
// naming what is wrong, and nothing is charged or reset.
func TestAdminHostileInput(t *testing.T) {
	svc, _, store := shopService(t, Options{})
	h := AdminHandler(svc, false, true)
	ctx := context.Background()
	svc.ShouldRateLimit(ctx, request("shop", desc("user=alice")))
	many := `{"domain": "shop", "descriptors": [` + strings.Repeat(`{"entries": [{"key": "a", "value": "b"}]},`, 65)
	many = strings.TrimSuffix(many, ",") + "]}"
	cases := []struct {
		method, target, body string
		code                 int
		want                 string
	}{
		{"POST", "/explain", "", 400, "not a RateLimitRequest"},
		{"POST", "/explain", "{", 400, "not a RateLimitRequest"},
		{"POST", "/explain", `{"domain": "shop", "descriptors": [{"entries": [{"key": "user"}]}], "nope": 1}`, 400, "nope"},
		{"POST", "/explain", `{"domain": "shop"}`, 400, "request has no descriptors"},
		{"POST", "/explain", `{"domain": "nope", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}`, 400, `unknown domain \"nope\"`},
		{"POST", "/explain", `{"domain": "shop", "descriptors": [{"entries": [{"key": "", "value": "a"}]}]}`, 400, "descriptors[0].entries[0] has an empty key"},
		{"POST", "/explain", many, 400, "request has 65 descriptors: at most 64 allowed"},
		{"POST", "/explain", `{"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.Repeat("x", MaxJSONBody) + `"}]}]}`, 413, "larger than"},
		{"POST", "/explain", `{"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.Repeat("x", 5000) + `"}]}]}`, 400, "at most 4096 allowed"},
		{"GET", "/buckets?domain=shop", "", 400, "no descriptor"},
		{"GET", bucketsURL("shop", ""), "", 400, "the descriptor is empty"},
		{"GET", bucketsURL("shop", "user"), "", 400, `entry 0 (\"user\") has no '='`},
		{"GET", bucketsURL("shop", "user=a,,path=x"), "", 400, "entry 1"},
		{"GET", bucketsURL("shop", "=a"), "", 400, "descriptors[0].entries[0] has an empty key"},
		{"GET", bucketsURL("", "user=a"), "", 400, "domain is empty"},
		{"DELETE", bucketsURL("nope", "user=alice"), "", 400, `unknown domain \"nope\"`},
		{"DELETE", bucketsURL("shop", "user="+strings.Repeat("x", 5000)), "", 400, "at most 4096 allowed"},
		{"DELETE", bucketsURL("shop", strings.Repeat("a=b,", 40)+"a=b"), "", 400, "41 entries: at most 32 allowed"},
		{"PUT", "/buckets", "", 405, ""},
		{"GET", "/explain", "", 405, ""},
	}
	for _, c := range cases {
		code, out := do(t, h, c.method, c.target, c.body)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%s %.80s: %d %.300s, want %d with %q", c.method, c.target, code, out, c.code, c.want)
		}
	}
	// Random bytes, in the body and the query: never a panic, never 5xx.
	rng := rand.New(rand.NewPCG(14, 4))
	for range 500 {
		junk := make([]byte, rng.IntN(200))
		const alphabet = "{}[]\":,=%&a1 \x00\xff"
		for i := range junk {
			junk[i] = alphabet[rng.IntN(len(alphabet))]
		}
		for _, r := range []struct{ method, target, body string }{
			{"POST", "/explain", string(junk)},
			{"GET", "/buckets?domain=shop&descriptor=" + url.QueryEscape(string(junk)), ""},
			{"DELETE", "/buckets?" + url.QueryEscape(string(junk)), ""},
		} {
			if code, out := do(t, h, r.method, r.target, r.body); code >= 500 {
				t.Fatalf("%s %q: %d %s", r.method, r.target, code, out)
			}
		}
	}
	if store.Len() != 1 {
		t.Errorf("the store holds %d buckets after the hostile requests, want alice's 1", store.Len())
	}
}

// TestAdminEndpointsOnlyOnAdminPort: the HTTP port serves none of the
// admin endpoints, whatever the method.
func TestAdminEndpointsOnlyOnAdminPort(t *testing.T) {
	svc, _, _ := shopService(t, Options{})
	public := HTTPHandler(svc, health.NewServer(), nil, true)
	admin := AdminHandler(svc, false, true)
	for _, r := range []struct{ method, target, body string }{
		{"POST", "/explain", `{"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}`},
		{"GET", bucketsURL("shop", "user=a"), ""},
		{"DELETE", bucketsURL("shop", "user=a"), ""},
		{"GET", "/config", ""},
	} {
		if code, _ := do(t, admin, r.method, r.target, r.body); code != 200 {
			t.Errorf("admin %s %s: %d, want 200", r.method, r.target, code)
		}
		if code, out := do(t, public, r.method, r.target, r.body); code != http.StatusNotFound {
			t.Errorf("HTTP port %s %s: %d %s, want 404", r.method, r.target, code, out)
		}
	}
}

// fakeQuotas shows one subscriber of every bucket, naming what it was
// asked for, and whether all were asked for.
type fakeQuotas struct{}

func (fakeQuotas) Subscribers(domain string, bucket map[string]string, all bool) any {
	return []string{fmt.Sprintf("%s %s all=%v", domain, bucket["user"], all)}
}

// TestExplainBucketShowsSubscribers: POST /explain of an RLQS bucket shows
// the walk and the bucket's subscribers, as GET /buckets?bucket= does: a
// summary, or all of them when asked; anything else asked is a 400.
func TestExplainBucketShowsSubscribers(t *testing.T) {
	svc, _, _ := shopService(t, Options{Quotas: fakeQuotas{}})
	h := AdminHandler(svc, false, true)
	for _, c := range []struct{ method, target, body, want string }{
		{"POST", "/explain", `{"domain": "shop", "bucket_id": {"bucket": {"user": "alice"}}}`, "shop alice all=false"},
		{"POST", "/explain", `{"domain": "shop", "bucket_id": {"bucket": {"user": "alice"}}, "subscribers": "all"}`, "shop alice all=true"},
		{"GET", "/buckets?domain=shop&bucket=user=alice", "", "shop alice all=false"},
		{"GET", "/buckets?domain=shop&bucket=user=alice&subscribers=summary", "", "shop alice all=false"},
		{"GET", "/buckets?domain=shop&bucket=user=alice&subscribers=all", "", "shop alice all=true"},
	} {
		code, out := do(t, h, c.method, c.target, c.body)
		var got struct {
			Code        string            `json:"code"`
			Bucket      map[string]string `json:"bucket_id"`
			Subscribers []string          `json:"subscribers"`
		}
		if err := json.Unmarshal([]byte(out), &got); code != 200 || err != nil {
			t.Fatalf("%s %s: %d %v\n%s", c.method, c.target, code, err, out)
		}
		if got.Bucket["user"] != "alice" || len(got.Subscribers) != 1 || got.Subscribers[0] != c.want {
			t.Errorf("%s %s: bucket %v, subscribers %v, want alice's and [%s]\n%s", c.method, c.target, got.Bucket, got.Subscribers, c.want, out)
		}
		if c.method == "POST" && got.Code != "OK" {
			t.Errorf("POST /explain: code %q, want the walk's OK\n%s", got.Code, out)
		}
	}
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/explain", `{"domain": "shop", "bucket_id": {"bucket": {"user": "alice"}}, "subscribers": "some"}`},
		{"GET", "/buckets?domain=shop&bucket=user=alice&subscribers=some", ""},
	} {
		if code, out := do(t, h, c.method, c.target, c.body); code != http.StatusBadRequest || !strings.Contains(out, "subscribers") {
			t.Errorf("%s %s: %d %s, want 400 naming subscribers", c.method, c.target, code, out)
		}
	}
}
