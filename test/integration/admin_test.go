package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// adminDo sends one request to an admin handler and returns the status
// and body.
func adminDo(t *testing.T, h http.Handler, method, target, body string) (int, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, target, strings.NewReader(body)))
	b, _ := io.ReadAll(rr.Result().Body)
	return rr.Code, string(b)
}

// TestAdminOnRedis: on single Redis and a Cluster, in both modes, POST
// /explain tells the call's answer and charges nothing (the stored states
// are the same before and after), GET /buckets shows the buckets, and
// DELETE /buckets resets them so that the call passes again. The request
// has buckets in two Cluster slots.
func TestAdminOnRedis(t *testing.T) {
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "service.yaml", Data: []byte(serviceConfig)})
	if err != nil {
		t.Fatal(err)
	}
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			connect := start(t)
			for _, mode := range []redis.Mode{redis.ScriptMode, redis.TransactionsMode} {
				t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
					// As serve wires it (-redis-mode, -redis-key-prefix),
					// for the store's states to be read beside the handler.
					ro := servedRedis(connect, false)
					ro.Mode, ro.Prefix = mode, fmt.Sprintf("admin%d:", mode)
					store, err := redis.New(ro)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { store.Close() })
					opts := rls.Options{Store: store, Config: cfg, Logger: slog.New(slog.DiscardHandler)}
					asServed(&opts)
					svc, err := rls.New(opts)
					if err != nil {
						t.Fatal(err)
					}
					adminOnStore(t, svc, store)
				})
			}
		})
	}
}

func adminOnStore(t *testing.T, svc *rls.Service, store *redis.Store) {
	ctx := context.Background()
	h := rls.AdminHandler(svc, false, true)
	req := request([]string{"v=1", "w=1"}, []string{"user=alice", "action=trade"})
	call := func() string {
		t.Helper()
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode().String()
	}
	if got := call(); got != "OK" {
		t.Fatalf("first call: %s", got)
	}
	buckets := []limit.Bucket{{Key: "api|v=1"}, {Key: "api|v=1|w=1"}, {Key: "api|user=alice"}, {Key: "api|user=alice|action=trade"}}
	stored := func() []limit.State {
		t.Helper()
		states := make([]limit.State, len(buckets))
		if _, err := store.State(ctx, time.Now(), buckets, states); err != nil {
			t.Fatal(err)
		}
		return states
	}
	before := stored()
	for i, st := range before {
		if st.Counter != 1 {
			t.Fatalf("bucket %s after one call: %+v", buckets[i].Key, st)
		}
	}
	body := `{"domain": "api", "descriptors": [{"entries": [{"key": "v", "value": "1"}, {"key": "w", "value": "1"}]}, {"entries": [{"key": "user", "value": "alice"}, {"key": "action", "value": "trade"}]}]}`
	for range 3 {
		code, out := adminDo(t, h, "POST", "/explain", body)
		var e rls.Explanation
		if err := json.Unmarshal([]byte(out), &e); code != 200 || err != nil {
			t.Fatalf("POST /explain: %d %v\n%s", code, err, out)
		}
		if e.Code != "OVER_LIMIT" || e.Descriptors[0].Code != "OVER_LIMIT" || e.Descriptors[0].Deciding.Path != "v" || e.Descriptors[1].Code != "OK" {
			t.Fatalf("POST /explain, v=1 being full:\n%s", out)
		}
		if at, err := time.Parse(time.RFC3339Nano, e.At); err != nil || time.Since(at).Abs() > time.Minute {
			t.Errorf("explained at %q (%v): not the Redis server's time", e.At, err)
		}
	}
	if after := stored(); !slices.EqualFunc(before, after, limit.State.Equal) {
		t.Fatalf("explanations changed the buckets from %+v to %+v", before, after)
	}
	if got := call(); got != "OVER_LIMIT" {
		t.Fatalf("the call after explanations saying OVER_LIMIT: %s", got)
	}

	q := url.Values{"domain": {"api"}, "descriptor": {"v=1,w=1", "user=alice,action=trade"}}.Encode()
	code, out := adminDo(t, h, "GET", "/buckets?"+q, "")
	var b rls.Buckets
	if err := json.Unmarshal([]byte(out), &b); code != 200 || err != nil || len(b.Descriptors) != 2 {
		t.Fatalf("GET /buckets: %d %v\n%s", code, err, out)
	}
	if v := b.Descriptors[0].Buckets[0]; v.Key != "api|v=1" || v.AdmitsOne || v.Remaining != 0 {
		t.Errorf("GET /buckets, bucket v=1: %+v", v)
	}
	if tr := b.Descriptors[1].Buckets[1]; tr.Label != "trades" || !tr.AdmitsOne || tr.Remaining != 4 {
		t.Errorf("GET /buckets, trades: %+v", tr)
	}

	if code, out := adminDo(t, h, "DELETE", "/buckets?"+q, ""); code != 200 || !strings.Contains(out, `"api|user=alice|action=trade"`) {
		t.Fatalf("DELETE /buckets: %d\n%s", code, out)
	}
	for i, st := range stored() {
		if st.Counter != 0 {
			t.Errorf("bucket %s after DELETE: %+v", buckets[i].Key, st)
		}
	}
	if got := call(); got != "OK" {
		t.Fatalf("the call after DELETE /buckets: %s", got)
	}
}

// resetConfig has a bucket that stays full for an hour: a replica's
// over-limit cache would reject it that long.
const resetConfig = `domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 2, drip_rate: 1h}
`

// TestResetAcrossReplicas runs two replicas of the binary on one Redis.
// Replica b rejects a full bucket from its over-limit cache, for an hour
// by the cache's own reckoning; DELETE /buckets on replica a resets the
// bucket and, through Redis, has b forget it: b admits at once.
func TestResetAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(resetConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	replica := func() (*process, string) {
		admin := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		return startBinary(t, "-config", dir, "-store", "redis", "-redis-url", srv.URL(), "-admin-addr", admin), admin
	}
	a, aAdmin := replica()
	b, _ := replica()
	// Both subscribed before the reset is sent.
	admin := srv.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := admin.PubSubNumSub(context.Background(), "rls:resets").Result()
		if err == nil && n["rls:resets"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 replicas, %v subscribed to rls:resets after 10s (%v); output:\n%s\n%s", n, err, a.out, b.out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	conn, err := grpc.NewClient(b.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, request([]string{"user=alice"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode().String()
	}
	for i, want := range []string{"OK", "OK", "OVER_LIMIT", "OVER_LIMIT"} {
		if got := call(); got != want {
			t.Fatalf("call %d through b: %s, want %s", i, got, want)
		}
	}
	if hits := scrape(t, b.httpAddr, "envoy_rls_local_cache_hits_total"); hits < 1 {
		t.Fatalf("b answered no call from its over-limit cache (%v): the test tests nothing", hits)
	}

	r, err := http.NewRequest("DELETE", "http://"+aAdmin+"/buckets?domain=api&descriptor=user=alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("DELETE /buckets on a: %d %s", resp.StatusCode, out)
	}
	reset := time.Now()
	for call() != "OK" {
		if time.Since(reset) > 2*time.Second {
			t.Fatalf("b still rejects 2s after the reset through a; output of b:\n%s", b.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("b admits %v after the reset through a", time.Since(reset))
}

// scrape returns the value of a metric on an HTTP address, or -1.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
