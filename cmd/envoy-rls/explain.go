package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

const explainUsage = "Usage: envoy-rls explain [-config PATH | -admin HOST:PORT] [-bucket] [-rate-limit-algorithm NAME] [-charge admitted|always] [-match all|leaf] [-merge-domains] [-config-dotfiles] [-o text|json] DOMAIN key=value[,key=value...]..."

// explain walks descriptors through the config alone, as the service
// would, and prints each level it reaches, its limits and bucket keys, and
// what is skipped and why: POST /explain without the buckets' state. With
// -admin it asks a running service's POST /explain instead, which knows
// the config in force wherever it came from (an xDS server's, say) and
// the buckets' state. Each argument after the domain is one descriptor.
// Flags may come anywhere.
func (a *app) explain(args []string) int {
	fs := flag.NewFlagSet("envoy-rls explain", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	config := fs.String("config", "config", "YAML config file or directory")
	admin := fs.String("admin", "", "explain on a running service instead: its admin address (-admin-addr), host:port or an http(s) URL; the config in force there, and the buckets' state")
	bucket := fs.Bool("bucket", false, "each argument after the domain is an RLQS BucketId: its pairs in any order, walked in the order the domain's tree asks for them")
	cf := newConfigFlags(fs)
	format := choice[string]{"text", []option[string]{{"text", "text"}, {"json", "json"}}}
	fs.Var(&format, "o", "output: text, or json (POST /explain's JSON, without state)")
	fs.Usage = func() {
		fmt.Fprintln(a.stderr, explainUsage)
		fs.PrintDefaults()
	}
	var positional []string
	for {
		if err := parseArgs(fs, args); err != nil {
			return a.flagsFailed("explain", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if err := applyEnv(fs, a.lookupEnv); err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls explain: %v\n", err)
		return exitUsage
	}
	if len(positional) < 2 {
		fs.Usage()
		return exitUsage
	}
	req := &rlsv3.RateLimitRequest{Domain: positional[0]}
	for _, d := range positional[1:] {
		es, err := rls.ParseDescriptor(d)
		if err != nil {
			fmt.Fprintf(a.stderr, "envoy-rls explain: %v\n", err)
			return exitUsage
		}
		desc := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range es {
			desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}

	var e *rls.Explanation
	var err error
	switch {
	case *admin != "" && *bucket && len(req.Descriptors) > 1:
		err = errors.New("-admin explains one bucket at a time")
	case *admin != "" && *bucket:
		e, err = explainRemoteBucket(*admin, req)
	case *admin != "":
		e, err = explainRemote(*admin, req)
	default:
		e, err = explainFile(*config, cf, req, *bucket, a.stderr)
	}
	if err != nil {
		if err != errReported {
			fmt.Fprintf(a.stderr, "envoy-rls explain: %v\n", err)
		}
		return exitError
	}
	if format.value == "json" {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(e); err != nil {
			fmt.Fprintf(a.stderr, "envoy-rls explain: %v\n", err)
			return exitError
		}
		return exitOK
	}
	writeExplanation(a.stdout, e)
	return exitOK
}

// errReported is an error explainFile has printed already.
var errReported = errors.New("reported")

// explainFile explains req from the config at path alone; with buckets,
// each descriptor is a BucketId's pairs, ordered as the domain's tree asks
// for them first.
func explainFile(path string, cf *configFlags, req *rlsv3.RateLimitRequest, buckets bool, stderr io.Writer) (*rls.Explanation, error) {
	cfg, _, err := cf.options().Load(path)
	if err != nil {
		var cfgErr *descriptors.Error
		if errors.As(err, &cfgErr) {
			for _, p := range cfgErr.Problems {
				printProblem(stderr, p)
			}
		} else {
			fmt.Fprintln(stderr, err)
		}
		return nil, errReported
	}
	if buckets {
		if err := orderBuckets(cfg, req); err != nil {
			return nil, err
		}
	}
	return rls.ExplainConfig(cfg, req, false)
}

// orderBuckets puts the entries of each descriptor of req, an RLQS
// BucketId's pairs, in the order the service reads them
// (descriptors.Domain.BucketEntries).
func orderBuckets(cfg *descriptors.Config, req *rlsv3.RateLimitRequest) error {
	d := cfg.Domain(req.GetDomain())
	if d == nil {
		return nil // ExplainConfig says so
	}
	for i, desc := range req.Descriptors {
		pairs := map[string]string{}
		for _, e := range desc.GetEntries() {
			if _, dup := pairs[e.GetKey()]; dup {
				return fmt.Errorf("bucket %d names key %q twice: a BucketId is a map", i+1, e.GetKey())
			}
			pairs[e.GetKey()] = e.GetValue()
		}
		var entries []*ratelimitv3.RateLimitDescriptor_Entry
		for _, e := range d.BucketEntries(pairs) {
			entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		desc.Entries = entries
	}
	return nil
}

// writeExplanation prints an explanation for people: per descriptor, each
// node reached with its file and line, each of its limits with its bucket
// key or why it is skipped, and where the walk stopped.
func writeExplanation(w io.Writer, e *rls.Explanation) {
	fmt.Fprintf(w, "domain %s (%s)\n", e.Domain, e.File)
	if e.Code != "" {
		fmt.Fprintf(w, "at %s the call would be %s\n", e.At, e.Code)
	}
	for i, d := range e.Descriptors {
		var es []string
		for _, en := range d.Entries {
			es = append(es, en.Key+"="+en.Value)
		}
		fmt.Fprintf(w, "\ndescriptor %d: %s\n", i+1, strings.Join(es, ", "))
		var checked, shadow int
		count := func(l rls.LimitExplanation) {
			switch {
			case l.Bucket == nil:
			case l.Bucket.Shadow:
				shadow++
			default:
				checked++
			}
		}
		for _, st := range d.Walk {
			where := e.File
			if st.File != "" {
				where = st.File
			}
			if st.Line > 0 {
				where += fmt.Sprintf(":%d", st.Line)
			}
			en := d.Entries[st.Entry]
			fmt.Fprintf(w, "  %s  %s  (matches %s=%s: %s)\n", where, st.Path, en.Key, en.Value, st.Match)
			if st.Unlimited {
				fmt.Fprintln(w, "      unlimited: allow-lists the descriptor, no limit on its walk applies")
			}
			if len(st.Limits) == 0 && !st.Unlimited {
				fmt.Fprintln(w, "      no limit here")
			}
			for _, l := range st.Limits {
				writeLimit(w, l)
				count(l)
			}
		}
		if d.Code != "" {
			fmt.Fprintf(w, "  status %s", d.Code)
			if d.Remaining != nil {
				fmt.Fprintf(w, ", remaining %d", *d.Remaining)
			}
			if d.DurationUntilReset != "" {
				fmt.Fprintf(w, ", reset in %s", d.DurationUntilReset)
			}
			fmt.Fprintln(w)
		}
		if s := d.Stopped; s != nil {
			fmt.Fprintf(w, "  entry %d, %s=%s: %s; the walk stops\n", s.Entry+1, s.Key, s.Value, s.Reason)
		}
		if o := d.LimitSentByEnvoy; o != nil {
			fmt.Fprintln(w, "  limit sent by Envoy with the descriptor")
			writeLimit(w, *o)
			count(*o)
		}
		switch {
		case d.Unlimited:
			fmt.Fprintln(w, "  => unlimited: every call passes")
		case checked == 0 && shadow > 0:
			fmt.Fprintln(w, "  => only shadow limits: every call passes, and is counted against them")
		case checked == 0:
			fmt.Fprintln(w, "  => no limit applies: every call passes")
		case checked == 1:
			fmt.Fprintln(w, "  => 1 bucket checked: a call passes if it has room")
		default:
			fmt.Fprintf(w, "  => %d buckets checked: a call passes only if every one has room, and only then are all charged\n", checked)
		}
	}
}

// writeLimit prints one limit of a level.
func writeLimit(w io.Writer, l rls.LimitExplanation) {
	shadow := ""
	if l.ShadowMode {
		shadow = ", shadow mode: never rejects"
	}
	fmt.Fprintf(w, "      %s: %s (%s%s)\n", l.Label, limitParams(l.LimitDescription), l.Reported, shadow)
	if l.Charge != "" {
		fmt.Fprintf(w, "        charge: %s\n", l.Charge)
	}
	if l.QuotaMode {
		fmt.Fprintln(w, "        quota mode: over its limit, it rejects the call only if every quota-mode descriptor of it is over")
	}
	if l.Metadata != nil {
		md, _ := json.Marshal(l.Metadata)
		fmt.Fprintf(w, "        metadata (in the dynamic metadata when it passes): %s\n", md)
	}
	switch {
	case l.Skipped == "replaces":
		fmt.Fprintf(w, "        skipped: replaced by %s (replaces)\n", l.ReplacedBy)
	case l.Skipped != "":
		fmt.Fprintf(w, "        skipped: %s\n", l.Skipped)
	case l.Bucket != nil:
		fmt.Fprintf(w, "        bucket %s\n", l.Bucket.Key)
		if st := l.Bucket.State; st != nil {
			fmt.Fprintf(w, "        now: admits %d hits: %v, remaining %d, clear in %s", l.Bucket.Hits, st.Admits, st.Remaining, st.Clear)
			if st.Reset != "" {
				fmt.Fprintf(w, ", reset in %s", st.Reset)
			}
			fmt.Fprintln(w)
			if p := st.Period; p != nil {
				fmt.Fprintf(w, "        period: %s to %s (%s)\n", p.Start, p.End, p.TimeZone)
			}
		}
	}
}

// limitParams writes a limit's algorithm and parameters.
func limitParams(l descriptors.LimitDescription) string {
	switch l.Algorithm {
	case "sliding_window":
		return fmt.Sprintf("sliding_window limit=%d window=%s resolution=%s", deref(l.Limit), l.Window, l.Resolution)
	case "fixed_window":
		if l.Calendar != "" {
			return fmt.Sprintf("fixed_window limit=%d calendar=%s time_zone=%s", deref(l.Limit), l.Calendar, l.TimeZone)
		}
		return fmt.Sprintf("fixed_window limit=%d window=%s", deref(l.Limit), l.Window)
	}
	return fmt.Sprintf("leaky_bucket size=%d drip_rate=%s drip_size=%d", deref(l.Size), l.DripRate, l.DripSize)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
