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

	"google.golang.org/grpc/codes"
)

// result is the merged measurement of a run. Latencies cover every measured
// call, failed ones included, so timeouts show in the tail.
type result struct {
	requests          int64
	sent              int64         // calls made, warmup included
	cpu               time.Duration // this process's CPU time over the run, warmup included
	elapsed           time.Duration
	latencies         []time.Duration // sorted
	ok, over, unknown int64
	errs              map[codes.Code]int64
	firstErr          error
}

func mergeStats(stats []*workerStats, elapsed time.Duration) *result {
	r := &result{elapsed: elapsed, errs: map[codes.Code]int64{}}
	var firstAt int64
	for _, st := range stats {
		r.latencies = append(r.latencies, st.latencies...)
		r.sent += st.sent
		r.ok += st.ok
		r.over += st.over
		r.unknown += st.unknown
		for c, n := range st.errs {
			r.errs[c] += n
		}
		if st.firstErr != nil && (r.firstErr == nil || st.firstErrAtUnixNano < firstAt) {
			r.firstErr, firstAt = st.firstErr, st.firstErrAtUnixNano
		}
	}
	slices.Sort(r.latencies)
	r.requests = int64(len(r.latencies))
	return r
}

func (r *result) errorCount() int64 {
	var n int64
	for _, c := range r.errs {
		n += c
	}
	return n
}

func (r *result) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.requests) / r.elapsed.Seconds()
}

// percentile returns the nearest-rank percentile of sorted latencies: the
// smallest value with at least q/10000 of the values at or below it (q in
// basis points so p99.9 is exact integer arithmetic: 9990).
func percentile(sorted []time.Duration, q int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := (q*n + 9999) / 10000 // ceil(q*n/10000), 1-based
	return sorted[max(rank, 1)-1]
}

// quantiles are the reported percentiles, in basis points.
var quantiles = []struct {
	name string
	q    int
}{{"p50", 5000}, {"p90", 9000}, {"p99", 9900}, {"p99.9", 9990}}

func (r *result) max() time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[len(r.latencies)-1]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// jsonReport is the json format, and the field list of the tsv one.
type jsonReport struct {
	Requests   int64            `json:"requests"`
	Seconds    float64          `json:"seconds"`
	RPS        float64          `json:"rps"`
	P50us      float64          `json:"p50_us"`
	P90us      float64          `json:"p90_us"`
	P99us      float64          `json:"p99_us"`
	P999us     float64          `json:"p999_us"`
	MaxUs      float64          `json:"max_us"`
	OK         int64            `json:"ok"`
	OverLimit  int64            `json:"over_limit"`
	Unknown    int64            `json:"unknown"`
	Errors     map[string]int64 `json:"errors"`
	Sent       int64            `json:"sent"`
	CPUus      float64          `json:"cpu_us_per_call"` // the load tool's own CPU per call sent
	Pick       string           `json:"pick"`            // how keys were picked: uniform, turn or zipf1.1 (with its exponent)
	FirstError string           `json:"first_error,omitempty"`
}

func (r *result) report() jsonReport {
	j := jsonReport{
		Requests:  r.requests,
		Seconds:   r.elapsed.Seconds(),
		RPS:       r.rps(),
		P50us:     micros(percentile(r.latencies, 5000)),
		P90us:     micros(percentile(r.latencies, 9000)),
		P99us:     micros(percentile(r.latencies, 9900)),
		P999us:    micros(percentile(r.latencies, 9990)),
		MaxUs:     micros(r.max()),
		OK:        r.ok,
		OverLimit: r.over,
		Unknown:   r.unknown,
		Errors:    map[string]int64{},
		Sent:      r.sent,
	}
	if r.sent > 0 {
		j.CPUus = micros(r.cpu) / float64(r.sent)
	}
	for c, n := range r.errs {
		j.Errors[c.String()] = n
	}
	if r.firstErr != nil {
		j.FirstError = r.firstErr.Error()
	}
	return j
}

func writeReport(w io.Writer, cfg loadConfig, r *result) error {
	j := r.report()
	j.Pick = cfg.pick.String()
	switch cfg.format {
	case "json":
		return json.NewEncoder(w).Encode(j)
	case "tsv":
		// New columns go at the end, so that a reader that counts columns
		// rather than reading the header still finds the old ones.
		_, err := fmt.Fprintf(w,
			"requests\tseconds\trps\tp50_us\tp90_us\tp99_us\tp999_us\tmax_us\tok\tover_limit\tunknown\terrors\tsent\tcpu_us_per_call\tpick\n"+
				"%d\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\n",
			j.Requests, j.Seconds, j.RPS, j.P50us, j.P90us, j.P99us, j.P999us, j.MaxUs,
			j.OK, j.OverLimit, j.Unknown, r.errorCount(), j.Sent, j.CPUus, j.Pick)
		return err
	default:
		return writeText(w, cfg, r)
	}
}

func writeText(w io.Writer, cfg loadConfig, r *result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "target\t%s  domain %s  descriptors %d  keys %d  pick %s  c %d  conns %d\n",
		cfg.addr, cfg.domain, len(cfg.patterns), cfg.keys, cfg.pick, cfg.workers, cfg.conns)
	fmt.Fprintf(tw, "requests\t%d in %.2fs = %.0f req/s\n", r.requests, r.elapsed.Seconds(), r.rps())
	var lat []string
	for _, q := range quantiles {
		lat = append(lat, q.name+" "+fmtDuration(percentile(r.latencies, q.q)))
	}
	lat = append(lat, "max "+fmtDuration(r.max()))
	fmt.Fprintf(tw, "latency\t%s\n", strings.Join(lat, "  "))
	fmt.Fprintf(tw, "codes\tOK %d  OVER_LIMIT %d  UNKNOWN %d\n", r.ok, r.over, r.unknown)
	errs := "none"
	if len(r.errs) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(r.errs)) {
			parts = append(parts, fmt.Sprintf("%s: %d", c, r.errs[c]))
		}
		errs = strings.Join(parts, ", ")
	}
	fmt.Fprintf(tw, "errors\t%s\n", errs)
	return tw.Flush()
}

// fmtDuration prints a latency with about three significant digits.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", micros(d))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
}
