package main

import (
	"encoding/json"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/refstats"
)

// dogStatsD reads USE_DOG_STATSD (on: the reference's stats as DogStatsD,
// over UDP, to STATSD_HOST:STATSD_PORT) and its mogrifiers:
// USE_DOG_STATSD_MOGRIFIERS lists names, and DOG_STATSD_MOGRIFIER_<NAME>_PATTERN,
// _NAME and _TAGS define each, tried in the order listed.
func (r *envoyReader) dogStatsD(on bool) {
	names := r.get("USE_DOG_STATSD_MOGRIFIERS", "")
	if !on {
		if names != "" {
			r.warn("USE_DOG_STATSD_MOGRIFIERS", "not read without USE_DOG_STATSD=true, as in envoyproxy/ratelimit")
		}
		return
	}
	r.set("statsd-addr", net.JoinHostPort(r.get("STATSD_HOST", "localhost"), r.get("STATSD_PORT", "8125")))
	r.set("statsd-protocol", "udp")
	r.set("statsd-dogstatsd", "true")
	r.copy("STATS_FLUSH_INTERVAL", "statsd-flush-interval")
	if strings.TrimSpace(names) == "" {
		return
	}
	var specs []mogrifierSpec
	for _, name := range strings.Split(names, ",") {
		// The reference's variable names are upper case whatever the
		// list's case.
		prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
		spec := mogrifierSpec{Pattern: r.get(prefix+"PATTERN", ""), Name: r.get(prefix+"NAME", ""), Tags: r.get(prefix+"TAGS", "")}
		if _, err := refstats.NewMogrifier(spec.Pattern, spec.Name, spec.Tags); err != nil {
			r.fail("USE_DOG_STATSD_MOGRIFIERS", "mogrifier %q (%sPATTERN, %sNAME, %sTAGS): %v", name, prefix, prefix, prefix, err)
			continue
		}
		specs = append(specs, spec)
	}
	b, err := json.Marshal(specs) // JSON is YAML: -statsd-mogrifiers reads it
	if err != nil {
		r.fail("USE_DOG_STATSD_MOGRIFIERS", "%v", err)
		return
	}
	r.set("statsd-mogrifiers", string(b))
}

// extraTags reads EXTRA_TAGS, "key:value,key2:value2", as the reference
// does: each pair holds one ':'; a pair with an empty key or value is not
// sent (its stats library drops it), and a key given twice keeps its last
// value. The tags go on the StatsD stats.
func (r *envoyReader) extraTags() {
	v := r.get("EXTRA_TAGS", "")
	if strings.TrimSpace(v) == "" {
		return
	}
	tags := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		kv := strings.Split(pair, ":")
		switch {
		case len(kv) != 2:
			r.fail("EXTRA_TAGS", "%q: want key:value pairs, comma-separated", pair)
			return
		case kv[0] == "" || kv[1] == "":
			r.warn("EXTRA_TAGS", "%q: a tag without a key or a value is not sent, as in envoyproxy/ratelimit", pair)
			continue
		}
		tags[kv[0]] = kv[1]
	}
	if _, ok := r.out.flags["reference-metrics-addr"]; ok {
		r.warn("EXTRA_TAGS", "not added to the Prometheus metrics of USE_PROMETHEUS: the tags go on the StatsD stats only")
	}
	if _, ok := r.out.flags["statsd-addr"]; !ok || len(tags) == 0 {
		return
	}
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		pairs = append(pairs, k+":"+tags[k])
	}
	r.set("statsd-tags", strings.Join(pairs, ","))
}
