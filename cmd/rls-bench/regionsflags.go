package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// regionsConfig is the parsed and checked command line of regions.
type regionsConfig struct {
	urls     []string // a Redis per region
	addrs    []string // their host:port, for INFO
	regions  int
	replicas int
	buckets  int
	interval time.Duration
	silence  time.Duration
	duration time.Duration
	baseline time.Duration
	warmup   time.Duration
	prefix   string
	format   string
	profile  string
}

type regionsFlags struct {
	cfg  regionsConfig
	urls string
}

func newRegionsFlags(stderr io.Writer) (*flag.FlagSet, *regionsFlags) {
	f := &regionsFlags{}
	fs := flag.NewFlagSet("rls-bench regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	fs.StringVar(&f.urls, "redis", "", "each region's Redis, `URL,URL,...` (redis://host:port/db, single servers); the run writes the regions' reports there under -prefix")
	fs.IntVar(&c.regions, "regions", 0, "regions; 0: one for each -redis URL, as many as it must name")
	fs.IntVar(&c.replicas, "replicas", 1, "replicas of each region, each with its own exchange and its own connections, each fed every bucket")
	fs.IntVar(&c.buckets, "buckets", 100000, "buckets each replica uses every interval: the same in every region, each once an interval")
	fs.DurationVar(&c.interval, "interval", time.Second, "the exchanges' interval (-region-interval)")
	fs.DurationVar(&c.silence, "silence", time.Minute, "how long a region may be silent (-region-silence)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "how long to measure the exchanges, in whole intervals, after the warmup")
	fs.DurationVar(&c.baseline, "baseline", 10*time.Second, "how long to measure the feeding alone, without the exchanges: half before them, half after")
	fs.DurationVar(&c.warmup, "warmup", 0, "how long the exchanges run before they are measured (default five intervals)")
	fs.StringVar(&c.prefix, "prefix", redis.DefaultPrefix, "the Redis key prefix (-redis-key-prefix)")
	fs.StringVar(&c.format, "format", "text", "report format: text or json")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile of the measured exchanges to `file`")
	return fs, f
}

// parseRegionsArgs parses and checks the flags of regions.
func parseRegionsArgs(args []string, stderr io.Writer) (regionsConfig, error) {
	fs, f := newRegionsFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return regionsConfig{}, err
	}
	c := f.cfg
	for _, u := range splitComma(f.urls) {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "redis" || p.Host == "" {
			return c, fmt.Errorf("-redis: %q is not a redis://host:port URL", u)
		}
		host := p.Host
		if p.Port() == "" {
			host += ":6379"
		}
		c.urls, c.addrs = append(c.urls, u), append(c.addrs, host)
	}
	if c.regions == 0 {
		c.regions = len(c.urls)
	}
	switch {
	case len(c.urls) == 0:
		return c, errors.New("-redis must name each region's Redis")
	case c.regions < 2:
		return c, fmt.Errorf("-regions must be at least 2, got %d", c.regions)
	case len(c.urls) != c.regions:
		return c, fmt.Errorf("-redis names %d Redis for %d regions: one each", len(c.urls), c.regions)
	case c.replicas < 1:
		return c, fmt.Errorf("-replicas must be at least 1, got %d", c.replicas)
	case c.buckets < 1 || c.buckets > region.MaxReportBuckets:
		return c, fmt.Errorf("-buckets must be from 1 to %d (what a report holds), got %d", region.MaxReportBuckets, c.buckets)
	case c.interval < 10*time.Millisecond:
		return c, fmt.Errorf("-interval must be at least 10ms, got %v", c.interval)
	case c.silence < c.interval:
		return c, fmt.Errorf("-silence (%v) must be at least -interval (%v)", c.silence, c.interval)
	case c.duration < c.interval:
		return c, fmt.Errorf("-duration must be at least an interval, got %v", c.duration)
	case c.baseline <= 0:
		return c, fmt.Errorf("-baseline must be positive, got %v", c.baseline)
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup must not be negative, got %v", c.warmup)
	case c.format != "text" && c.format != "json":
		return c, fmt.Errorf("-format must be text or json, got %q", c.format)
	}
	warmupSet := false
	fs.Visit(func(fl *flag.Flag) { warmupSet = warmupSet || fl.Name == "warmup" })
	if !warmupSet {
		c.warmup = 5 * c.interval
	}
	return c, nil
}

func splitComma(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
