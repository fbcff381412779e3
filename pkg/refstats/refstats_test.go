package refstats

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/statsdtest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// recording is a Sink that writes down what it is given.
type recording struct{ lines []string }

func (r *recording) Count(name string, n uint64) {
	r.lines = append(r.lines, name+":"+strconv.FormatUint(n, 10)+"|c")
}
func (r *recording) Time(name string, d time.Duration) {
	r.lines = append(r.lines, name+":"+d.String()+"|ms")
}

const config = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: header
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
`

// levels resolves a descriptor of the config.
func levels(t *testing.T, pairs ...string) []descriptors.Level {
	t.Helper()
	c, _, err := descriptors.Parse(descriptors.Source{Name: "a.yaml", Data: []byte(config)})
	if err != nil {
		t.Fatal(err)
	}
	var entries []descriptors.Entry
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		entries = append(entries, descriptors.Entry{Key: k, Value: v})
	}
	return c.Domain("api").Resolve(entries, nil, nil)
}

// TestObserverNames: the reference's names for each decision.
func TestObserverNames(t *testing.T) {
	rec := &recording{}
	o := NewObserver(rec, 0.8)
	trade := levels(t, "user=alice", "action=trade")
	o.Limit("api", trade[0].Rule, trade[0].Key, 3, &limit.Result{Admitted: true, Remaining: 7}, false)
	o.Limit("api", trade[1].Rule, trade[1].Key, 3, &limit.Result{Admitted: false}, false)
	o.Limit("api", trade[1].Rule, trade[1].Key, 1, &limit.Result{Admitted: false}, true)
	o.Limit("api", trade[0].Rule, trade[0].Key, 1, &limit.Result{Admitted: true, Remaining: 1}, false) // 9 of 10 used: near
	o.Limit("api", trade[0].Rule, trade[0].Key, 0, &limit.Result{Admitted: true}, false)               // a check: not counted
	h := levels(t, "header=x-user-id")
	o.Limit("api", h[0].Rule, h[0].Key, 1, &limit.Result{Admitted: true, Remaining: 0}, false)
	o.Call("api", "OK", 1500*time.Microsecond)
	o.Store("redis", "apply", 0, io.EOF)
	o.ConfigReload(true)
	want := []string{
		"ratelimit.service.rate_limit.api.user.total_hits:3|c",
		"ratelimit.service.rate_limit.api.user.within_limit:3|c",
		"ratelimit.service.rate_limit.api.user.action_trade.total_hits:3|c",
		"ratelimit.service.rate_limit.api.user.action_trade.over_limit:3|c",
		"ratelimit.service.rate_limit.api.user.action_trade.total_hits:1|c",
		"ratelimit.service.rate_limit.api.user.action_trade.over_limit:1|c",
		"ratelimit.service.rate_limit.api.user.action_trade.shadow_mode:1|c",
		"ratelimit.service.rate_limit.api.user.total_hits:1|c",
		"ratelimit.service.rate_limit.api.user.within_limit:1|c",
		"ratelimit.service.rate_limit.api.user.near_limit:1|c",
		"ratelimit.service.rate_limit.api.header_x-user-id.total_hits:1|c",
		"ratelimit.service.rate_limit.api.header_x-user-id.within_limit:1|c",
		"ratelimit.service.rate_limit.api.header_x-user-id.near_limit:1|c",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c",
		"ratelimit_server.ShouldRateLimit.response_time:1.5ms|ms",
		"ratelimit.service.call.should_rate_limit.redis_error:1|c",
		"ratelimit.service.config_load_success:1|c",
	}
	if !slices.Equal(rec.lines, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(rec.lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestStatsDOverTCPAndUDP: a flush sends each counter's increase and each
// timing, as StatsD lines, over either protocol.
func TestStatsDOverTCPAndUDP(t *testing.T) {
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			var addr string
			var lines <-chan string
			if network == "tcp" {
				tcpLines := make(chan string, 100)
				lines = tcpLines
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer lis.Close()
				addr = lis.Addr().String()
				go func() {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					sc := bufio.NewScanner(c)
					for sc.Scan() {
						tcpLines <- sc.Text()
					}
				}()
			} else {
				addr, lines = statsdtest.ListenUDP(t, 100)
			}
			s, err := NewStatsD(addr, network, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			s.Count("a.b", 2)
			s.Count("a.b", 3)
			s.Time("t", 2*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx, 50*time.Millisecond); close(done) }()
			got := []string{<-lines, <-lines}
			cancel()
			<-done
			slices.Sort(got)
			if want := []string{"a.b:5|c", "t:2|ms"}; !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// TestPrometheusNames: with the default mapping, the stats are served as
// envoyproxy/ratelimit's Prometheus metrics; with a mapping file (as Envoy
// Gateway gives the reference), as that file names them.
func TestPrometheusNames(t *testing.T) {
	scrape := func(p *Prometheus) string {
		rr := httptest.NewRecorder()
		p.Handler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
		return rr.Body.String()
	}
	p, err := NewPrometheus("", false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o := NewObserver(p, 0.8)
	trade := levels(t, "user=alice", "action=trade")
	o.Limit("default/eg/http", trade[1].Rule, trade[1].Key, 2, &limit.Result{}, false)
	o.Limit("default/eg/http", trade[0].Rule, trade[0].Key, 2, &limit.Result{Admitted: true, Remaining: 5}, false)
	o.Call("default/eg/http", "OK", 3*time.Millisecond)
	o.ConfigReload(false)
	body := scrape(p)
	for _, want := range []string{
		`ratelimit_service_rate_limit_over_limit{domain="default/eg/http",key1="user",key2="action_trade"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="default/eg/http",key1="user",key2=""} 2`,
		`ratelimit_service_rate_limit_within_limit{domain="default/eg/http",key1="user",key2=""} 2`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 1`,
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 0.003`,
		`ratelimit_service_config_load_error 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("no %s in:\n%s", want, body)
		}
	}

	// A mapping file like Envoy Gateway's: two levels of key, and a name
	// it does not map, served escaped.
	file := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(file, []byte(`mappings:
  - match: "ratelimit.service.rate_limit.*.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = NewPrometheus(file, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o = NewObserver(p, 0.8)
	h := levels(t, "header=x-user-id")
	o.Limit("eg", trade[1].Rule, trade[1].Key, 1, &limit.Result{}, false)
	o.Limit("eg", h[0].Rule, h[0].Key, 1, &limit.Result{}, false)
	body = scrape(p)
	for _, want := range []string{
		`ratelimit_service_rate_limit_over_limit{domain="eg",key1="user",key2="action_trade"} 1`,
		`ratelimit_service_rate_limit_eg_header_x_user_id_over_limit 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("no %s in:\n%s", want, body)
		}
	}
	if _, err := NewPrometheus(filepath.Join(t.TempDir(), "missing.yaml"), false, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a missing mapping file was accepted")
	}

	// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: the response time unscaled.
	p, err = NewPrometheus("", true, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	NewObserver(p, 0.8).Call("eg", "OK", 3*time.Millisecond)
	if body, want := scrape(p), `ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 3`; !strings.Contains(body, want+"\n") {
		t.Errorf("no %s in:\n%s", want, body)
	}
}
