package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// rlqsResult is the merged measurement of an rlqs run: the reports made
// while measuring, and their answers (those that came within the grace).
type rlqsResult struct {
	elapsed                 time.Duration
	messages, bucketReports int64
	allowed, denied         uint64
	answered                int64
	servedMessages          int64           // answers that came while measuring
	servedBuckets           int64           // the bucket reports of those answers
	latencies               []time.Duration // sorted
	actions                 map[string]int64
	short, unknown, extra   int64
	streams, streamErrors   int64
	firstErr                error
	usage                   costs
	reassigned              []time.Duration // sorted
	notReassigned           int64           // streams ended in error, and no answer on another since
}

func mergeRLQS(envoys []*rlqsEnvoy, elapsed time.Duration) *rlqsResult {
	r := &rlqsResult{elapsed: elapsed, actions: map[string]int64{}}
	for _, e := range envoys {
		e.mu.Lock()
		st := e.st
		r.messages += st.messages
		r.bucketReports += st.bucketReports
		r.allowed += st.allowed
		r.denied += st.denied
		r.answered += st.answered
		r.servedMessages += st.servedMessages
		r.servedBuckets += st.servedBuckets
		r.latencies = append(r.latencies, st.latencies...)
		for k, n := range st.actions {
			r.actions[k] += n
		}
		r.short += st.short
		r.unknown += st.unknown
		r.extra += st.extra
		r.streams += st.streams
		r.streamErrors += st.streamErrors
		r.reassigned = append(r.reassigned, st.reassigned...)
		if !e.endedAt.IsZero() {
			r.notReassigned++
		}
		if r.firstErr == nil {
			r.firstErr = st.firstErr
		}
		e.mu.Unlock()
	}
	slices.Sort(r.latencies)
	slices.Sort(r.reassigned)
	return r
}

// scriptCommands are the commands that run a script: what envoy-rls sends
// Redis (the rest, but a closed stream's HDELs, run inside the scripts).
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// rlqsJSON is the json format, and the fields of the tsv one. Figures
// that were not measured (no -pid, no -redis) are absent.
type rlqsJSON struct {
	Instances         int     `json:"instances"`
	Buckets           int     `json:"buckets"`
	IntervalS         float64 `json:"interval_s"`
	Disjoint          bool    `json:"disjoint"`
	RequestsPerReport float64 `json:"requests_per_bucket_report"` // asked for; the mean drawn is governed / bucket_reports
	Seconds           float64 `json:"seconds"`
	// Messages and BucketReports were sent while measuring; Served and
	// ServedMessages are those whose answers came while measuring, what
	// the costs are divided by (the same in a steady state; fewer when the
	// service falls behind).
	Messages          int64            `json:"messages"`
	BucketReports     int64            `json:"bucket_reports"`
	BucketReportsPerS float64          `json:"bucket_reports_per_s"`
	ServedMessages    int64            `json:"served_messages"`
	Served            int64            `json:"served_bucket_reports"`
	ServedPerS        float64          `json:"served_bucket_reports_per_s"`
	Answered          int64            `json:"answered"` // of the messages sent while measuring
	Unanswered        int64            `json:"unanswered"`
	ShortAnswers      int64            `json:"short_answers"`
	UnknownActions    int64            `json:"unknown_actions"`
	Actions           map[string]int64 `json:"actions"`
	P50us             float64          `json:"p50_us"`
	P90us             float64          `json:"p90_us"`
	P99us             float64          `json:"p99_us"`
	MaxUs             float64          `json:"max_us"`
	Allowed           uint64           `json:"allowed"`
	Denied            uint64           `json:"denied"`
	GovernedPerS      float64          `json:"governed_per_s"` // requests the reports sent counted, a second
	Streams           int64            `json:"streams"`
	StreamErrors      int64            `json:"stream_errors"`
	// Reassigned counts, over the whole run, the Envoys whose stream ended
	// before the run did (in error or not) and that were answered on
	// another since, and how long that took; NotReassigned those not
	// answered again by the end.
	Reassigned      int64              `json:"reassigned"`
	ReassignedP50ms float64            `json:"reassigned_p50_ms"`
	ReassignedP99ms float64            `json:"reassigned_p99_ms"`
	ReassignedMaxMs float64            `json:"reassigned_max_ms"`
	NotReassigned   int64              `json:"not_reassigned"`
	LoadCPUus       float64            `json:"load_cpu_us_per_bucket_report"` // per bucket report sent
	ServerCPUus     *float64           `json:"server_cpu_us_per_bucket_report,omitempty"`
	ServerCPUmsgUs  *float64           `json:"server_cpu_us_per_message,omitempty"`
	ServerCPUns     *float64           `json:"server_cpu_ns_per_governed,omitempty"`
	RedisCalls      *float64           `json:"redis_calls_per_message,omitempty"` // script calls
	RedisCmds       *float64           `json:"redis_cmds_per_message,omitempty"`  // every command but INFO, the scripts' own included
	RedisCommands   map[string]float64 `json:"redis_commands_per_message,omitempty"`
	RedisCPUus      *float64           `json:"redis_cpu_us_per_bucket_report,omitempty"`
	RedisCPUns      *float64           `json:"redis_cpu_ns_per_governed,omitempty"`
	FirstError      string             `json:"first_error,omitempty"`
}

// per returns n / d, or 0 when d is 0.
func per(n, d float64) float64 {
	if d == 0 {
		return 0
	}
	return n / d
}

func ptr(v float64) *float64 { return &v }

// report does the arithmetic. Rates are over the measured span. The
// service's and Redis's costs are per bucket report and per message
// served in it, and per request governed: a bucket report governs the
// requests it counts, which Envoy decided locally, so a request costs a
// bucket report's share over the requests a bucket report counts on
// average (governed / bucket reports sent).
func (r *rlqsResult) report(cfg rlqsConfig) rlqsJSON {
	secs := r.elapsed.Seconds()
	governed := float64(r.allowed + r.denied)
	perReport := per(governed, float64(r.bucketReports)) // requests a bucket report counts
	served, servedMsgs := float64(r.servedBuckets), float64(r.servedMessages)
	j := rlqsJSON{
		Instances: cfg.instances, Buckets: cfg.buckets, IntervalS: cfg.interval.Seconds(), Disjoint: cfg.disjoint,
		RequestsPerReport: cfg.requests, Seconds: secs,
		Messages: r.messages, BucketReports: r.bucketReports, BucketReportsPerS: per(float64(r.bucketReports), secs),
		ServedMessages: r.servedMessages, Served: r.servedBuckets, ServedPerS: per(served, secs),
		Answered: r.answered, Unanswered: r.messages - r.answered, ShortAnswers: r.short, UnknownActions: r.unknown,
		Actions: r.actions,
		P50us:   micros(percentile(r.latencies, 5000)), P90us: micros(percentile(r.latencies, 9000)),
		P99us: micros(percentile(r.latencies, 9900)), MaxUs: micros(maxOf(r.latencies)),
		Allowed: r.allowed, Denied: r.denied, GovernedPerS: per(governed, secs),
		Streams: r.streams, StreamErrors: r.streamErrors,
		Reassigned: int64(len(r.reassigned)), NotReassigned: r.notReassigned,
		ReassignedP50ms: millis(percentile(r.reassigned, 5000)), ReassignedP99ms: millis(percentile(r.reassigned, 9900)),
		ReassignedMaxMs: millis(maxOf(r.reassigned)),
		LoadCPUus:       per(micros(r.usage.self), float64(r.bucketReports)),
	}
	if j.Actions == nil {
		j.Actions = map[string]int64{}
	}
	if u := r.usage; u.hasService {
		j.ServerCPUus = ptr(per(micros(u.service), served))
		j.ServerCPUmsgUs = ptr(per(micros(u.service), servedMsgs))
		j.ServerCPUns = ptr(per(per(float64(u.service), served), perReport))
	}
	if u := r.usage; u.hasRedis {
		var scripts, all int64
		j.RedisCommands = map[string]float64{}
		for name, n := range u.redisCalls {
			if name == "info" {
				continue // this tool's own
			}
			all += n
			if slices.Contains(scriptCommands, name) {
				scripts += n
			}
			j.RedisCommands[name] = per(float64(n), servedMsgs)
		}
		j.RedisCalls = ptr(per(float64(scripts), servedMsgs))
		j.RedisCmds = ptr(per(float64(all), servedMsgs))
		j.RedisCPUus = ptr(per(micros(u.redisCPU), served))
		j.RedisCPUns = ptr(per(per(float64(u.redisCPU), served), perReport))
	}
	if r.firstErr != nil {
		j.FirstError = r.firstErr.Error()
	}
	return j
}

func maxOf(sorted []time.Duration) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)-1]
}

// rlqsTSVColumns are the tsv format's columns; new ones go at the end.
var rlqsTSVColumns = []string{"instances", "buckets", "interval_s", "seconds", "messages", "bucket_reports",
	"bucket_reports_per_s", "served_bucket_reports_per_s", "answered", "unanswered", "short_answers", "stream_errors",
	"p50_us", "p90_us", "p99_us", "max_us", "allowed", "denied", "governed_per_s",
	"load_cpu_us_per_bucket_report", "server_cpu_us_per_bucket_report", "server_cpu_us_per_message", "server_cpu_ns_per_governed",
	"redis_calls_per_message", "redis_cmds_per_message", "redis_cpu_us_per_bucket_report", "redis_cpu_ns_per_governed"}

// opt formats a figure that may not have been measured: "-" then.
func opt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func writeRLQSReport(w io.Writer, cfg rlqsConfig, r *rlqsResult) error {
	j := r.report(cfg)
	switch cfg.format {
	case "json":
		return json.NewEncoder(w).Encode(j)
	case "tsv":
		vals := []string{fmt.Sprint(j.Instances), fmt.Sprint(j.Buckets), fmt.Sprintf("%g", j.IntervalS), fmt.Sprintf("%.3f", j.Seconds),
			fmt.Sprint(j.Messages), fmt.Sprint(j.BucketReports), fmt.Sprintf("%.1f", j.BucketReportsPerS), fmt.Sprintf("%.1f", j.ServedPerS),
			fmt.Sprint(j.Answered), fmt.Sprint(j.Unanswered), fmt.Sprint(j.ShortAnswers), fmt.Sprint(j.StreamErrors),
			fmt.Sprintf("%.1f", j.P50us), fmt.Sprintf("%.1f", j.P90us), fmt.Sprintf("%.1f", j.P99us), fmt.Sprintf("%.1f", j.MaxUs),
			fmt.Sprint(j.Allowed), fmt.Sprint(j.Denied), fmt.Sprintf("%.1f", j.GovernedPerS),
			fmt.Sprintf("%.2f", j.LoadCPUus), opt(j.ServerCPUus, "%.2f"), opt(j.ServerCPUmsgUs, "%.1f"), opt(j.ServerCPUns, "%.2f"),
			opt(j.RedisCalls, "%.3f"), opt(j.RedisCmds, "%.1f"), opt(j.RedisCPUus, "%.2f"), opt(j.RedisCPUns, "%.2f")}
		_, err := fmt.Fprintf(w, "%s\n%s\n", strings.Join(rlqsTSVColumns, "\t"), strings.Join(vals, "\t"))
		return err
	default:
		return writeRLQSText(w, cfg, j)
	}
}

func writeRLQSText(w io.Writer, cfg rlqsConfig, j rlqsJSON) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	sharing := "the same buckets"
	if cfg.disjoint {
		sharing = "buckets of their own"
	}
	fmt.Fprintf(tw, "target\t%s  domain %s  %d Envoys × %d buckets (%s), a report every %v, %g requests per bucket report\n",
		cfg.addr, cfg.domain, j.Instances, j.Buckets, sharing, cfg.interval, j.RequestsPerReport)
	fmt.Fprintf(tw, "reports\t%d messages, %d bucket reports sent in %.2fs = %.0f bucket reports/s; served %.0f/s (%d messages)\n",
		j.Messages, j.BucketReports, j.Seconds, j.BucketReportsPerS, j.ServedPerS, j.ServedMessages)
	fmt.Fprintf(tw, "answers\tof those sent: %d answered, %d not, %d short; latency p50 %s  p90 %s  p99 %s  max %s\n", j.Answered, j.Unanswered, j.ShortAnswers,
		fmtDuration(time.Duration(j.P50us*1e3)), fmtDuration(time.Duration(j.P90us*1e3)), fmtDuration(time.Duration(j.P99us*1e3)), fmtDuration(time.Duration(j.MaxUs*1e3)))
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(j.Actions)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, j.Actions[k]))
	}
	if j.UnknownActions > 0 {
		kinds = append(kinds, fmt.Sprintf("for unknown buckets %d", j.UnknownActions))
	}
	if len(kinds) == 0 {
		kinds = []string{"none"}
	}
	fmt.Fprintf(tw, "actions\t%s\n", strings.Join(kinds, "  "))
	fmt.Fprintf(tw, "governed\t%d requests (%d allowed, %d denied) = %.0f req/s\n", j.Allowed+j.Denied, j.Allowed, j.Denied, j.GovernedPerS)
	fmt.Fprintf(tw, "streams\t%d opened, %d errors\n", j.Streams, j.StreamErrors)
	if j.Reassigned+j.NotReassigned > 0 {
		fmt.Fprintf(tw, "reassigned\t%d Envoys answered on another stream after theirs ended, p50 %s  p99 %s  max %s after; %d not answered again\n",
			j.Reassigned, fmtDuration(time.Duration(j.ReassignedP50ms*1e6)), fmtDuration(time.Duration(j.ReassignedP99ms*1e6)),
			fmtDuration(time.Duration(j.ReassignedMaxMs*1e6)), j.NotReassigned)
	}
	cpu := fmt.Sprintf("load %.2f µs/bucket report", j.LoadCPUus)
	if j.ServerCPUus != nil {
		cpu += fmt.Sprintf("; service %.2f µs/bucket report, %.0f µs/message, %.2f ns/governed request", *j.ServerCPUus, *j.ServerCPUmsgUs, *j.ServerCPUns)
	}
	fmt.Fprintf(tw, "CPU\t%s\n", cpu)
	if j.RedisCalls != nil {
		var cmds []string
		for _, name := range slices.Sorted(maps.Keys(j.RedisCommands)) {
			cmds = append(cmds, fmt.Sprintf("%s %.2f", name, j.RedisCommands[name]))
		}
		fmt.Fprintf(tw, "Redis\t%.2f script calls/message, %.1f commands/message (%s); CPU %.2f µs/bucket report, %.2f ns/governed request\n",
			*j.RedisCalls, *j.RedisCmds, strings.Join(cmds, ", "), *j.RedisCPUus, *j.RedisCPUns)
	}
	if j.FirstError != "" {
		fmt.Fprintf(tw, "first error\t%s\n", j.FirstError)
	}
	return tw.Flush()
}
