package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// checkClaims reads each bucket's claims in every region (its first
// replica's): divided, and adding up to no more than the limit.
func (res *regionsResult) checkClaims(cfg regionsConfig, reps []*benchReplica) {
	firsts := make([]*region.Exchange, cfg.regions)
	for _, r := range reps {
		if firsts[r.region] == nil {
			firsts[r.region] = r.x
		}
	}
	l := regionsLimit(cfg.interval)
	res.meanShare, res.meanSize = make([]float64, cfg.regions), make([]float64, cfg.regions)
	for b := range cfg.buckets {
		key := bucketKey(b)
		size, share, held := 0.0, 0.0, 0.0
		for i, x := range firsts {
			v := x.Bucket(key, l)
			if v.Divided {
				res.divided++
			}
			size += v.Size
			share += v.Share
			res.meanShare[i] += v.Share / float64(cfg.buckets)
			res.meanSize[i] += v.Size / float64(cfg.buckets)
			if i == 0 {
				for _, p := range v.Parts {
					held += p.Usage + p.Demand*cfg.interval.Seconds()/2
				}
			}
		}
		// Their sizes add up to no more than the limit's, or than what the
		// regions hold (the store under them admits everything): what they
		// count, and what they may admit until the claims take over (their
		// demand over half an interval, at most).
		if size > max(float64(l.Size), held)+1e-9 || share > 1+1e-9 {
			res.over++
		}
	}
}

// regionsJSON is the report's JSON; the text report says the same.
type regionsJSON struct {
	Regions            int     `json:"regions"`
	Replicas           int     `json:"replicas"`
	Buckets            int     `json:"buckets"`
	IntervalS          float64 `json:"interval_s"`
	Intervals          int     `json:"intervals"`
	Seconds            float64 `json:"seconds"`
	BaselineSeconds    float64 `json:"baseline_seconds"`
	BaselineFedPerS    float64 `json:"baseline_fed_per_s"`
	BaselineCores      float64 `json:"baseline_cores"`
	FeedNsPerBucket    float64 `json:"feed_ns_per_bucket"`
	FedPerS            float64 `json:"fed_per_s"`
	ProcessCores       float64 `json:"process_cores"`
	ExchangeCores      float64 `json:"exchange_cores"`
	RegionCores        float64 `json:"exchange_cores_per_region"`
	ReportBytes        int64   `json:"report_bytes"`
	PublishP50ms       float64 `json:"publish_p50_ms"`
	PublishP99ms       float64 `json:"publish_p99_ms"`
	DivideP50ms        float64 `json:"divide_p50_ms"`
	DivideP99ms        float64 `json:"divide_p99_ms"`
	ExchangeP50ms      float64 `json:"exchange_p50_ms"`
	ExchangeP99ms      float64 `json:"exchange_p99_ms"`
	ExchangeMaxMs      float64 `json:"exchange_max_ms"`
	Redis              []redisJSON
	ExchangesOK        int64     `json:"exchanges_ok"`
	ExchangesFailed    int64     `json:"exchanges_failed"`
	FailedInWarmup     int64     `json:"exchanges_failed_in_warmup"`
	Divided            int64     `json:"buckets_divided"`
	OverLimit          int64     `json:"buckets_over_limit"`
	MeanShare          []float64 `json:"mean_share"`
	MeanSize           []float64 `json:"mean_size"`
	HeapMiB            float64   `json:"heap_mib"`
	ReportedBuckets    []int     `json:"reported_buckets"`
	ReportedDemandPerS []float64 `json:"reported_demand_per_s"`
}

type redisJSON struct {
	Region            string  `json:"region"`
	Cores             float64 `json:"cores"`
	CallsPerInterval  float64 `json:"script_calls_per_interval"`
	InBytesPerInterv  float64 `json:"in_bytes_per_interval"`
	OutBytesPerInterv float64 `json:"out_bytes_per_interval"`
}

func (res *regionsResult) report(cfg regionsConfig) regionsJSON {
	secs := res.elapsed.Seconds()
	feedPer := per(float64(res.baseCPU), float64(res.baseFed)) // ns a bucket fed
	exchange := float64(res.cpu) - feedPer*float64(res.fed)    // ns
	intervals := float64(res.intervals)
	j := regionsJSON{
		Regions: cfg.regions, Replicas: cfg.replicas, Buckets: cfg.buckets, IntervalS: cfg.interval.Seconds(),
		Intervals: res.intervals, Seconds: secs,
		BaselineSeconds: res.baseElapsed.Seconds(), BaselineFedPerS: per(float64(res.baseFed), res.baseElapsed.Seconds()),
		BaselineCores: per(res.baseCPU.Seconds(), res.baseElapsed.Seconds()), FeedNsPerBucket: feedPer,
		FedPerS: per(float64(res.fed), secs), ProcessCores: per(res.cpu.Seconds(), secs),
		ExchangeCores: per(exchange/1e9, secs), RegionCores: per(exchange/1e9, secs) / float64(cfg.regions),
		ReportBytes:  9 + 40*int64(cfg.buckets),
		PublishP50ms: millis(percentile(res.publish, 5000)), PublishP99ms: millis(percentile(res.publish, 9900)),
		DivideP50ms: millis(percentile(res.divide, 5000)), DivideP99ms: millis(percentile(res.divide, 9900)),
		ExchangeP50ms: millis(percentile(res.both, 5000)), ExchangeP99ms: millis(percentile(res.both, 9900)),
		ExchangeMaxMs: millis(maxOf(res.both)),
		ExchangesOK:   res.exchanges, ExchangesFailed: res.failed, FailedInWarmup: res.failedBefore, Divided: res.divided, OverLimit: res.over,
		MeanShare: res.meanShare, MeanSize: res.meanSize, HeapMiB: float64(res.heap) / (1 << 20),
	}
	for i, c := range res.redis {
		var calls int64
		for name, n := range c.redisCalls {
			if slices.Contains(scriptCommands, name) {
				calls += n
			}
		}
		j.Redis = append(j.Redis, redisJSON{Region: res.names[i], Cores: per(c.redisCPU.Seconds(), secs),
			CallsPerInterval: per(float64(calls), intervals), InBytesPerInterv: per(float64(c.redisNetIn), intervals),
			OutBytesPerInterv: per(float64(c.redisNetOut), intervals)})
	}
	for _, s := range res.statuses {
		j.ReportedBuckets = append(j.ReportedBuckets, s.Buckets)
		j.ReportedDemandPerS = append(j.ReportedDemandPerS, s.Demand)
	}
	return j
}

func writeRegionsReport(w io.Writer, cfg regionsConfig, res *regionsResult) error {
	j := res.report(cfg)
	if cfg.format == "json" {
		return json.NewEncoder(w).Encode(j)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	mb := func(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }
	fmt.Fprintf(tw, "regions\t%d regions × %d replicas, each replica using %d buckets every %v (region i asked i hits of each), limit %s\n",
		j.Regions, j.Replicas, j.Buckets, cfg.interval, regionsLimit(cfg.interval))
	fmt.Fprintf(tw, "baseline\tfeeding alone %.0f buckets/s for %.1fs: %.3f cores, %.0f ns a bucket (Asked and the store wrapper's Apply)\n",
		j.BaselineFedPerS, j.BaselineSeconds, j.BaselineCores, j.FeedNsPerBucket)
	fmt.Fprintf(tw, "exchanging\tfeeding %.0f buckets/s for %d intervals (%.1fs): process %.3f cores\n", j.FedPerS, j.Intervals, j.Seconds, j.ProcessCores)
	fmt.Fprintf(tw, "service\tthe exchanges %.3f cores, %.3f cores a region (%d replicas)\n", j.ExchangeCores, j.RegionCores, j.Replicas)
	fmt.Fprintf(tw, "wall\ta replica's exchange an interval: publish p50 %s p99 %s; divide p50 %s p99 %s; both p50 %s p99 %s max %s\n",
		fmtMs(j.PublishP50ms), fmtMs(j.PublishP99ms), fmtMs(j.DivideP50ms), fmtMs(j.DivideP99ms), fmtMs(j.ExchangeP50ms), fmtMs(j.ExchangeP99ms), fmtMs(j.ExchangeMaxMs))
	fmt.Fprintf(tw, "report\t%s a replica's report (%d bytes)\n", mb(float64(j.ReportBytes)), j.ReportBytes)
	for _, r := range j.Redis {
		fmt.Fprintf(tw, "Redis %s\tCPU %.3f cores; an interval: %.1f script calls, %s in, %s out\n", r.Region, r.Cores, r.CallsPerInterval,
			mb(r.InBytesPerInterv), mb(r.OutBytesPerInterv))
	}
	var shares []string
	for i, s := range j.MeanShare {
		shares = append(shares, fmt.Sprintf("%s %.3f (size %.2f)", res.names[i], s, j.MeanSize[i]))
	}
	fmt.Fprintf(tw, "claims\tafter a last exchange in step: %d of %d buckets divided over the regions, %d adding up to more than the limit (or what the regions hold); mean share %s\n",
		j.Divided, int64(j.Buckets)*int64(j.Regions), j.OverLimit, strings.Join(shares, ", "))
	var seen []string
	for i, s := range res.statuses {
		seen = append(seen, fmt.Sprintf("%s %s %d buckets %.0f/s", s.Region, s.State, j.ReportedBuckets[i], j.ReportedDemandPerS[i]))
	}
	fmt.Fprintf(tw, "last division\t(r1's first replica) %s\n", strings.Join(seen, "; "))
	fmt.Fprintf(tw, "exchanges\t%d with a region's Redis; %d failed while measuring, %d in the warmup; heap in use %.0f MiB at the end\n",
		j.ExchangesOK, j.ExchangesFailed, j.FailedInWarmup, j.HeapMiB)
	return tw.Flush()
}

// heapInUse is the bytes of heap spans in use.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func fmtMs(ms float64) string { return fmtDuration(time.Duration(ms * 1e6)) }
