package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }

// TestRLQSArithmetic: rates over the measured span; costs per bucket
// report and per message served, and per request governed; Redis's
// script calls apart from the commands the scripts run, INFO left out.
func TestRLQSArithmetic(t *testing.T) {
	cfg := rlqsConfig{instances: 4, buckets: 100, interval: time.Second, requests: 50}
	r := &rlqsResult{
		elapsed:  10 * time.Second,
		messages: 40, bucketReports: 4000, allowed: 180000, denied: 20000, // 50 requests a bucket report
		answered: 38, servedMessages: 40, servedBuckets: 4000,
		latencies: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond},
		usage: costs{self: 8 * time.Millisecond, service: 200 * time.Millisecond, hasService: true,
			redisCPU: 100 * time.Millisecond, hasRedis: true,
			redisCalls: map[string]int64{"evalsha": 120, "hgetall": 16000, "get": 8000, "info": 2}},
	}
	j := r.report(cfg)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"bucket reports/s", j.BucketReportsPerS, 400},
		{"served/s", j.ServedPerS, 400},
		{"governed/s", j.GovernedPerS, 20000},
		{"unanswered", float64(j.Unanswered), 2},
		{"load µs/bucket report", j.LoadCPUus, 2},
		{"service µs/bucket report", *j.ServerCPUus, 50},
		{"service µs/message", *j.ServerCPUmsgUs, 5000},
		{"service ns/governed request", *j.ServerCPUns, 1000}, // 50 µs over 50 requests
		{"redis script calls/message", *j.RedisCalls, 3},
		{"redis commands/message", *j.RedisCmds, 603},
		{"hgetall/message", j.RedisCommands["hgetall"], 400},
		{"redis µs/bucket report", *j.RedisCPUus, 25},
		{"redis ns/governed request", *j.RedisCPUns, 500},
		{"p50 µs", j.P50us, 2000},
		{"p99 µs", j.P99us, 40000},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if _, ok := j.RedisCommands["info"]; ok {
		t.Errorf("INFO, the tool's own, counted: %v", j.RedisCommands)
	}

	// Behind: costs go to what was served, not to what was sent.
	r.servedMessages, r.servedBuckets = 20, 2000
	if j := r.report(cfg); !near(*j.ServerCPUus, 100) || !near(*j.RedisCalls, 6) || !near(*j.ServerCPUns, 2000) || !near(j.ServedPerS, 200) {
		t.Errorf("half served: service %v µs/bucket report, %v calls/message, %v ns/request, %v served/s; want 100, 6, 2000, 200",
			*j.ServerCPUus, *j.RedisCalls, *j.ServerCPUns, j.ServedPerS)
	}

	// Not measured: absent, "-" in the tsv, whose columns match its header.
	r.usage = costs{}
	var b strings.Builder
	if err := writeRLQSReport(&b, rlqsConfig{format: "tsv", interval: time.Second}, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	head, vals := strings.Split(lines[0], "\t"), strings.Split(lines[1], "\t")
	if len(lines) != 2 || len(head) != len(vals) {
		t.Fatalf("tsv of %d lines, %d columns and %d values:\n%s", len(lines), len(head), len(vals), b.String())
	}
	for i, h := range head {
		if (strings.HasPrefix(h, "server_") || strings.HasPrefix(h, "redis_")) != (vals[i] == "-") {
			t.Errorf("tsv column %s = %q", h, vals[i])
		}
	}
}

func TestProcCPU(t *testing.T) {
	// The command name may hold spaces and parentheses.
	stat := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, err := procCPU(stat)
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("procCPU = %v, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "4242 a S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 75 0"} {
		if _, err := procCPU(bad); err == nil {
			t.Errorf("procCPU(%q): no error", bad)
		}
	}
	// This very process: a real /proc.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", os.Getpid()))
	if err != nil {
		t.Skip("no /proc:", err)
	}
	if _, err := procCPU(string(b)); err != nil {
		t.Errorf("own /proc stat: %v", err)
	}
}

const infoText = "# Server\r\nredis_version:7.0.15\r\n\r\n# Stats\r\ntotal_net_input_bytes:1234\r\ntotal_net_output_bytes:56789\r\n\r\n# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n" +
	"used_cpu_sys_children:9.000000\r\n\r\n# Commandstats\r\n" +
	"cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"

func TestParseRedisInfo(t *testing.T) {
	info, err := parseRedisInfo(infoText)
	if err != nil {
		t.Fatal(err)
	}
	if info.cpu != 3750*time.Millisecond || info.calls["evalsha"] != 12 || info.calls["client|setinfo"] != 2 || len(info.calls) != 2 ||
		info.netIn != 1234 || info.netOut != 56789 {
		t.Errorf("info = %+v; want 3.75s (children left out), evalsha 12, client|setinfo 2, 1234 bytes in, 56789 out", info)
	}
	if _, err := parseRedisInfo("# Commandstats\r\ncmdstat_get:calls=1\r\n"); err == nil {
		t.Error("INFO without CPU: no error")
	}
	if _, err := parseRedisInfo("used_cpu_sys:x\r\nused_cpu_user:1\r\n"); err == nil {
		t.Error("INFO with a bad CPU: no error")
	}
	before := reading{redis: redisInfo{cpu: time.Second, calls: map[string]int64{"evalsha": 10, "get": 5}}, hasRedis: true}
	after := reading{redis: redisInfo{cpu: 3 * time.Second, calls: map[string]int64{"evalsha": 15, "get": 5, "hset": 4}}, hasRedis: true}
	c := after.minus(before)
	if c.redisCPU != 2*time.Second || c.redisCalls["evalsha"] != 5 || c.redisCalls["hset"] != 4 || len(c.redisCalls) != 2 || c.hasService {
		t.Errorf("minus = %+v", c)
	}
}

func TestReadBulk(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"$5\r\nhello\r\n", "hello", ""},
		{"$0\r\n\r\n", "", ""},
		{"-NOAUTH Authentication required.\r\n", "", "NOAUTH"},
		{"+OK\r\n", "", "not a bulk string"},
		{"$9\r\nshort\r\n", "", "EOF"},
	} {
		got, err := readBulk(bufio.NewReader(strings.NewReader(c.in)))
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("readBulk(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
}

func tokenBucketAction(maxTokens, perFill uint32, fill time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}}}}
}

// TestQuota: an interval's requests are split by the assignment in force.
func TestQuota(t *testing.T) {
	var q quota
	if a, d := q.decide(30, 1); a != 30 || d != 0 {
		t.Errorf("no assignment: %d allowed, %d denied; want all allowed", a, d)
	}
	if k := q.apply(tokenBucketAction(50, 100, 10*time.Second)); k != kindTokenBucket { // 10/s, starts full
		t.Fatalf("kind %q", k)
	}
	if a, d := q.decide(80, 1); a != 50 || d != 30 { // full: 50 (the 1 s refill is capped at the size)
		t.Errorf("first: %d allowed, %d denied; want 50, 30", a, d)
	}
	if a, d := q.decide(80, 2); a != 20 || d != 60 { // 2 s at 10/s
		t.Errorf("second: %d allowed, %d denied; want 20, 60", a, d)
	}
	q.decide(0, 2.5) // 25 tokens
	q.apply(tokenBucketAction(50, 100, 10*time.Second))
	if a, _ := q.decide(100, 0); a != 25 {
		t.Errorf("the same bucket sent again: %d allowed, want the 25 tokens kept", a)
	}
	q.decide(0, 2.5) // 25 tokens of 50
	q.apply(tokenBucketAction(20, 100, 10*time.Second))
	if a, _ := q.decide(100, 0); a != 10 {
		t.Errorf("a new bucket: %d allowed, want 10 (half full, as the old one)", a)
	}
	q.apply(tokenBucketAction(20, 100, 500*time.Millisecond))
	if a, d := q.decide(1000, 1); a != 1000 || d != 0 {
		t.Errorf("a sub-second fill: %d allowed, %d denied; want all (Envoy's bucket never runs out)", a, d)
	}
	deny := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{RateLimitStrategy: &typev3.RateLimitStrategy{
			Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}}}}
	if k := q.apply(deny); k != kindDenyAll {
		t.Errorf("kind %q", k)
	}
	if a, d := q.decide(7, 1); a != 0 || d != 7 {
		t.Errorf("deny all: %d allowed, %d denied", a, d)
	}
	abandon := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{}}
	if k := q.apply(abandon); k != kindAbandon || q.kind != "" {
		t.Errorf("abandon: kind %q, quota %+v", k, q)
	}
}

func TestRLQSCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"rlqs", "-instances", "0"}, "-instances must be at least 1"},
		{[]string{"rlqs", "-buckets", "0"}, "-buckets must be at least 1"},
		{[]string{"rlqs", "-interval", "1ms"}, "-interval must be at least 10ms"},
		{[]string{"rlqs", "-requests", "NaN"}, "-requests must be a number"},
		{[]string{"rlqs", "-bucket", "user=u%d,user=v%d"}, `key "user" twice`},
		{[]string{"rlqs", "-bucket", "user"}, "has no '='"},
		{[]string{"rlqs", "-format", "xml"}, "-format"},
		{[]string{"rlqs", "extra"}, "unexpected argument"},
	} {
		var stdout, stderr strings.Builder
		if code := run(tc.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.out) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.out)
		}
	}
	cfg, err := parseRLQSArgs([]string{"-interval", "2s", "-instances", "3", "-conns", "8"}, &strings.Builder{})
	if err != nil || cfg.warmup != 6*time.Second || cfg.conns != 3 {
		t.Errorf("defaults: warmup %v, conns %d, %v; want three intervals, one connection per Envoy", cfg.warmup, cfg.conns, err)
	}
}
