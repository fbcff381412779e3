package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlqsclient"
)

// TestPageEndpoints drives the binary's page endpoints as a script would,
// on the memory store, Redis exact and local-first:
// the status, a refused bucket after traffic (its descriptor value markup
// sent back as the same text), and a reset refused from another origin
// but done from the page's own.
func TestPageEndpoints(t *testing.T) {
	for _, s := range []struct {
		name, mode, store string
		args              []string
	}{
		{"Memory", "exact", "memory", nil},
		{"RedisExact", "exact", "redis", []string{"-store", "redis"}},
		{"LocalFirst", "local-first", "redis", []string{"-store", "redis", "-sync-interval", "1s"}},
	} {
		t.Run(s.name, func(t *testing.T) {
			args := s.args
			if s.store == "redis" {
				args = append(args, "-redis-url", redistest.Start(t).URL())
			}
			checkPageEndpoints(t, s.mode, s.store, args)
		})
	}
}

func checkPageEndpoints(t *testing.T, mode, store string, args []string) {
	admin := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	p := launch(t, "", admin, append([]string{"-config", "../../config"}, args...)...)
	base := "http://" + admin

	var status struct {
		Version string `json:"version"`
		Mode    string `json:"mode"`
		Store   struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"store"`
		Config struct {
			Domains    int    `json:"domains"`
			LastReload string `json:"last_reload"`
		} `json:"config"`
	}
	pageWait(t, admin)
	pageGet(t, base+"/ui/status", &status)
	if status.Version == "" || status.Mode != mode || status.Store.Name != store || !status.Store.OK || status.Config.Domains == 0 || status.Config.LastReload == "" {
		t.Errorf("status %+v", status)
	}

	const value = "<b>x</b>"
	refused := pageCalls(t, p.grpcAddr, 70, "user="+value)
	var top struct {
		Buckets []struct {
			Domain     string `json:"domain"`
			Descriptor []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"descriptor"`
			Limit   string `json:"limit"`
			Refused int    `json:"refused"`
		} `json:"buckets"`
	}
	pageGet(t, base+"/ui/refused", &top)
	if len(top.Buckets) != 1 || top.Buckets[0].Refused != refused || len(top.Buckets[0].Descriptor) != 1 || top.Buckets[0].Descriptor[0].Value != value {
		t.Fatalf("refused buckets %+v, want user=%s refused %d times", top.Buckets, value, refused)
	}
	var limits struct {
		Domains []struct {
			Name   string `json:"name"`
			Limits []struct {
				Label   string `json:"label"`
				Refused []int  `json:"refused"`
			} `json:"limits"`
		} `json:"domains"`
	}
	time.Sleep(time.Second) // the last second full
	pageGet(t, base+"/ui/limits", &limits)
	counted := 0
	for _, d := range limits.Domains {
		for _, l := range d.Limits {
			if d.Name == "api" && l.Label == "user" {
				for _, n := range l.Refused {
					counted += n
				}
			}
		}
	}
	if counted != refused {
		t.Errorf("limit user of api: %d refused in /ui/limits, want %d", counted, refused)
	}

	reset := base + "/buckets?domain=api&descriptor=" + url.QueryEscape("user="+value)
	if code := pageDelete(t, reset, "http://evil.example", "cross-site"); code != http.StatusForbidden {
		t.Errorf("a cross-origin DELETE /buckets: %d, want 403", code)
	}
	// It drips one a second: of 5 calls at once, one may pass.
	if n := pageCalls(t, p.grpcAddr, 5, "user="+value); n < 4 {
		t.Fatalf("after a refused reset, %d of 5 calls refused", n)
	}
	if code := pageDelete(t, reset, base, "same-origin"); code != http.StatusOK {
		t.Errorf("a same-origin DELETE /buckets: %d, want 200", code)
	}
	if n := pageCalls(t, p.grpcAddr, 30, "user="+value); n != 0 {
		t.Errorf("after the reset, %d of 30 calls refused", n)
	}
}

// pageWait waits until the admin address listens.
// TestPageRLQS: while an emulated Envoy reports, GET /ui/rlqs lists its
// stream and the level its bucket meets.
func TestPageRLQS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlqsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	p := launch(t, "", admin, "-config", dir)
	pageWait(t, admin)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	envoy := rlqsclient.Start(context.Background(), conn, rlqsclient.Options{Domain: "edge", ReportInterval: rlqsInterval})
	defer envoy.Close()
	var quotas struct {
		Streams []struct {
			Peer, Domain string
			Buckets      int
			LastReport   string `json:"last_report"`
		} `json:"streams"`
		Levels []struct {
			Level       string  `json:"level"`
			Subscribers int     `json:"subscribers"`
			Demand      float64 `json:"demand"`
		} `json:"levels"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		envoy.Request(rlqsAlice)
		pageGet(t, "http://"+admin+"/ui/rlqs", &quotas)
		if len(quotas.Streams) == 1 && quotas.Streams[0].Domain == "edge" && quotas.Streams[0].Buckets == 1 && quotas.Streams[0].LastReport != "" &&
			quotas.Streams[0].Peer != "" && len(quotas.Levels) == 1 && quotas.Levels[0].Subscribers == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /ui/rlqs after 10 s of reports: %+v", quotas)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pageWait(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin address %s does not listen: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pageGet(t *testing.T, target string, v any) {
	t.Helper()
	resp, err := http.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s %s", target, resp.Status, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
}

func pageDelete(t *testing.T, target, origin, site string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Sec-Fetch-Site", site)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pageCalls makes n calls of one descriptor in domain api and returns how
// many were refused.
func pageCalls(t *testing.T, addr string, n int, pairs ...string) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	refused := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ShouldRateLimit(ctx, request(pairs))
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
	}
	return refused
}
