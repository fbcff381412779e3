package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
)

// startNull runs "rls-bench null -listen 127.0.0.1:0" in-process and returns
// the address it printed.
func startNull(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- runContext(ctx, []string{"null", "-listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading null's address: %v", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("null printed %q, want \"listening on ADDR\"", line)
	}
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != exitOK {
			t.Errorf("null exited %d, want 0", code)
		}
	})
	return addr
}

func runLoadJSON(t *testing.T, args ...string) jsonReport {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(append([]string{"load", "-format", "json"}, args...), &stdout, &stderr); code != exitOK {
		t.Fatalf("load exited %d; stderr:\n%s", code, stderr.String())
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("parsing report %q: %v", stdout.String(), err)
	}
	return rep
}

func TestLoadAgainstNull(t *testing.T) {
	addr := startNull(t)
	rep := runLoadJSON(t, "-addr", addr, "-n", "2000", "-c", "8", "-conns", "2", "-warmup", "0")
	if rep.Requests != 2000 || rep.OK != 2000 || len(rep.Errors) != 0 {
		t.Errorf("requests %d ok %d errors %v, want 2000, 2000, none", rep.Requests, rep.OK, rep.Errors)
	}
	if rep.RPS <= 0 || rep.Seconds <= 0 {
		t.Errorf("rps %v seconds %v, want > 0", rep.RPS, rep.Seconds)
	}
	if !(0 < rep.P50us && rep.P50us <= rep.P90us && rep.P90us <= rep.P99us &&
		rep.P99us <= rep.P999us && rep.P999us <= rep.MaxUs) {
		t.Errorf("latencies not ordered: p50 %v p90 %v p99 %v p99.9 %v max %v",
			rep.P50us, rep.P90us, rep.P99us, rep.P999us, rep.MaxUs)
	}
}

func TestLoadTextAndTSV(t *testing.T) {
	addr := startNull(t)
	var stdout, stderr strings.Builder
	if code := run([]string{"load", "-addr", addr, "-duration", "200ms", "-warmup", "50ms", "-c", "2", "-format", "tsv"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("tsv: exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("tsv has %d lines, want 2:\n%s", len(lines), stdout.String())
	}
	head, vals := strings.Split(lines[0], "\t"), strings.Split(lines[1], "\t")
	if len(head) != len(vals) || head[0] != "requests" || head[11] != "errors" || head[12] != "sent" || head[13] != "cpu_us_per_call" ||
		head[14] != "pick" || vals[14] != "uniform" {
		t.Fatalf("tsv header %q values %q", head, vals)
	}
	n, err := strconv.Atoi(vals[0])
	sent, _ := strconv.Atoi(vals[12])
	cpu, _ := strconv.ParseFloat(vals[13], 64)
	if err != nil || n <= 0 || vals[11] != "0" || sent <= n || cpu <= 0 {
		t.Errorf("tsv values %q: want requests > 0, 0 errors, more sent (warmup) and CPU used", vals)
	}

	stdout.Reset()
	if code := run([]string{"load", "-addr", addr, "-n", "100", "-warmup", "0"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"requests  100 in", "req/s", "p99.9", "OK 100", "errors    none", "keys 10000  pick uniform  c 64"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// oddServer answers OVER_LIMIT for odd key indexes and OK for even ones,
// recording what it received.
type oddServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64

	mu      sync.Mutex
	domains map[string]int
	ndesc   map[int]int // descriptors per request -> requests
	entries map[string]int
	hits    map[uint32]int
	indexes map[int]int // key index -> requests
	peers   map[string]bool
	bad     []string
}

func (s *oddServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.domains[req.GetDomain()]++
	s.ndesc[len(req.GetDescriptors())]++
	s.hits[req.GetHitsAddend()]++
	if p, ok := peer.FromContext(ctx); ok {
		s.peers[p.Addr.String()] = true
	}
	idx := -1
	for _, d := range req.GetDescriptors() {
		var keys []string
		for _, e := range d.GetEntries() {
			keys = append(keys, e.GetKey())
			if e.GetKey() == "user" {
				n, err := strconv.Atoi(strings.TrimPrefix(e.GetValue(), "u"))
				if err != nil || (idx >= 0 && n != idx) {
					s.bad = append(s.bad, e.GetValue())
				}
				idx = n
			}
		}
		s.entries[strings.Join(keys, ",")]++
	}
	s.indexes[idx]++
	code := rlsv3.RateLimitResponse_OK
	if idx%2 == 1 {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

func startOddServer(t *testing.T) (*oddServer, string) {
	t.Helper()
	s := &oddServer{domains: map[string]int{}, ndesc: map[int]int{}, entries: map[string]int{},
		hits: map[uint32]int{}, indexes: map[int]int{}, peers: map[string]bool{}}
	return s, grpctest.Serve(t, func(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) })
}

func TestLoadCountsCodesAndSendsDescriptors(t *testing.T) {
	s, addr := startOddServer(t)
	rep := runLoadJSON(t, "-addr", addr, "-n", "1000", "-c", "6", "-conns", "3",
		"-warmup", "0", "-keys", "50", "-domain", "bench", "-hits", "3",
		"-descriptor", "user=u%d,action=a%d", "-descriptor", "user=u%d")

	calls := s.calls.Load()
	if rep.Requests != 1000 || calls != 1000 {
		t.Errorf("requests %d, server calls %d, want 1000", rep.Requests, calls)
	}
	if rep.OK+rep.OverLimit != calls || rep.OK == 0 || rep.OverLimit == 0 || len(rep.Errors) != 0 {
		t.Errorf("ok %d + over_limit %d (errors %v), server calls %d: want both > 0 summing to calls",
			rep.OK, rep.OverLimit, rep.Errors, calls)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.domains["bench"] != 1000 || len(s.domains) != 1 {
		t.Errorf("domains = %v, want bench only", s.domains)
	}
	if s.ndesc[2] != 1000 || len(s.ndesc) != 1 {
		t.Errorf("descriptors per request = %v, want 2 always", s.ndesc)
	}
	if s.entries["user,action"] != 1000 || s.entries["user"] != 1000 {
		t.Errorf("descriptor keys = %v", s.entries)
	}
	if s.hits[3] != 1000 {
		t.Errorf("hits_addend = %v, want 3", s.hits)
	}
	if len(s.bad) > 0 {
		t.Errorf("bad user values: %q", s.bad)
	}
	if len(s.peers) != 3 {
		t.Errorf("server saw %d client connections, want 3", len(s.peers))
	}
}

func TestWarmupNotCounted(t *testing.T) {
	s, addr := startOddServer(t)
	rep := runLoadJSON(t, "-addr", addr, "-n", "200", "-c", "2", "-warmup", "200ms")
	if rep.Requests != 200 || rep.OK+rep.OverLimit != 200 {
		t.Errorf("requests %d ok+over_limit %d, want 200", rep.Requests, rep.OK+rep.OverLimit)
	}
	calls := s.calls.Load()
	if calls <= 200 {
		t.Errorf("server saw %d calls, want more than the 200 measured (warmup)", calls)
	}
	if rep.Sent != calls {
		t.Errorf("sent %d, server saw %d calls", rep.Sent, calls)
	}
}

func TestLoadClosedPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	var stdout, stderr strings.Builder
	code := run([]string{"load", "-addr", addr, "-n", "50", "-c", "2", "-warmup", "0"}, &stdout, &stderr)
	if code != exitError {
		t.Errorf("exit %d, want 1", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "every call failed") || !strings.Contains(msg, "Unavailable") {
		t.Errorf("stderr = %q, want the first error", msg)
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout or stderr
	}{
		{nil, exitOK, "Usage:"},
		{[]string{"help"}, exitOK, "-descriptor"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"load", "-descriptor", "user"}, exitUsage, `descriptor pattern "user"`},
		{[]string{"load", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"load", "-c", "x"}, exitUsage, "invalid value"},
		{[]string{"load", "-format", "xml"}, exitUsage, "-format"},
		{[]string{"load", "-pick", "random"}, exitUsage, `-pick must be uniform, turn or zipf, got "random"`},
		{[]string{"load", "-pick", "zipf", "-zipf-s", "1"}, exitUsage, "-zipf-s must be greater than 1, got 1"},
		{[]string{"load", "-pick", "zipf", "-zipf-s", "0.5"}, exitUsage, "-zipf-s must be greater than 1, got 0.5"},
		{[]string{"load", "-pick", "zipf", "-zipf-s", "NaN"}, exitUsage, "-zipf-s must be greater than 1, got NaN"},
		{[]string{"load", "-pick", "zipf", "-zipf-s", "+Inf"}, exitUsage, "-zipf-s must be finite, got +Inf"},
		{[]string{"load", "-pick", "turn", "-zipf-s", "2"}, exitUsage, "-zipf-s is the exponent of -pick zipf; it makes no sense with -pick turn"},
		// Given, even at its default value, -zipf-s asks for zipf.
		{[]string{"load", "-zipf-s", "1.1"}, exitUsage, "makes no sense with -pick uniform"},
		{[]string{"help"}, exitOK, "-zipf-s"},
		{[]string{"null", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"regions"}, exitUsage, "-redis must name each region's Redis"},
		{[]string{"regions", "-redis", "redis://a:1,redis://b:2", "-regions", "3"}, exitUsage, "-redis names 2 Redis for 3 regions"},
		{[]string{"regions", "-redis", "redis://a:1"}, exitUsage, "-regions must be at least 2"},
		{[]string{"regions", "-redis", "http://a:1,redis://b:2"}, exitUsage, `"http://a:1" is not a redis://host:port URL`},
		{[]string{"regions", "-redis", "redis://a:1,redis://b:2", "-silence", "100ms"}, exitUsage, "-silence (100ms) must be at least -interval (1s)"},
		{[]string{"regions", "-redis", "redis://a:1,redis://b:2", "-buckets", "0"}, exitUsage, "-buckets must be from 1"},
		{[]string{"help"}, exitOK, "Flags of regions:"},
	} {
		var stdout, stderr strings.Builder
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("run(%q) = %d, output %q; want %d and %q", tc.args, code, stdout.String()+stderr.String(), tc.code, tc.out)
		}
	}
}

// TestOTLPSink: the otlp command takes spans over OTLP/gRPC and prints
// their number when it stops.
func TestOTLPSink(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		exited <- runContext(ctx, []string{"otlp", "-listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	out := bufio.NewReader(pr)
	line, _ := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("otlp printed %q, want \"listening on ADDR\"", line)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &collectortracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{
		{Spans: []*tracepb.Span{{Name: "a"}, {Name: "b"}}}, {Spans: []*tracepb.Span{{Name: "c"}}}}}}}
	for range 2 {
		if _, err := collectortracepb.NewTraceServiceClient(conn).Export(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if line, _ := out.ReadString('\n'); line != "received 6 spans\n" {
		t.Errorf("otlp printed %q at the end, want 6 spans", line)
	}
	if code := <-exited; code != exitOK {
		t.Errorf("otlp exited %d", code)
	}
}
