package descriptors

import (
	"slices"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Rule is a limit of the config: what one matched node contributes.
type Rule struct {
	// Name is the limit's configured name, or "".
	Name string
	// Path is the node's place in its domain, e.g. "user/action=trade":
	// a key alone for a node that matches any value.
	Path string
	// Limit is the bucket.
	Limit limit.Limit
	// Rate is the limit in requests per unit, for the response's
	// current_limit: as written for a rate_limit, derived for a leaky_bucket.
	Rate limit.Rate
	// Shadow marks a limit that is reported but never rejects.
	Shadow bool
	// Replaces names the limits this one removes from a request that
	// matches both (envoyproxy/ratelimit's replaces).
	Replaces []string
	// Always charges the limit's hits whatever the request's answer, past
	// the limit if need be (charge: always).
	Always bool
	// Regional keeps the limit to each region (scope: region): with
	// -region, regions do not divide it, each admitting all of it.
	Regional bool
	// QuotaMode makes the limit a quota (envoyproxy/ratelimit's
	// quota_mode): a descriptor over it rejects the request only when every
	// quota descriptor of the request is over.
	QuotaMode bool
	// Metadata is the node's metadata, or nil: merged into the response's
	// dynamic metadata when the descriptor passes. Shared by every request:
	// never to be changed.
	Metadata map[string]any

	label   string       // the metric label: Name, or Path (with the item of limits)
	metric  []metricPart // per level of Path, when some take the request's value
	statKey string       // StatKey without the request's values
	// mark follows the node's part of a bucket key: it names the
	// algorithm (a window's parameters too), so that no two limits of a
	// node, nor one limit before and after a reload that changes its
	// algorithm, share a bucket. "" for a node's first leaky bucket, whose
	// key is the node's own.
	mark string
}

// Label returns the limit's name, or else its path (with its place in the
// node's limits list when it is one of several): how metrics and the IETF
// headers name it.
func (r *Rule) Label() string {
	switch {
	case r.label != "":
		return r.label
	case r.Name != "":
		return r.Name
	}
	return r.Path // a rule made outside the config, such as a limit sent by Envoy
}

// SecondUnit reports whether the limit counts per second: its rate's unit
// (as written for a rate_limit or sent by Envoy, derived for another form)
// is second. A store may keep such buckets apart (a per-second Redis).
func (r *Rule) SecondUnit() bool { return r.Rate.Unit == limit.Second }

// metricPart is one level of a metric label: the text of the rule's path,
// or the request's key=value there (detailed_metric, value_to_metric).
type metricPart struct {
	text      string
	withValue bool
}

// MetricLabel returns the label of this limit in metrics, given the key of
// the level it was resolved to: its name, or else its path, so that the
// number of labels stays bounded by the config. Where the config asks for
// values (detailed_metric on the node, value_to_metric on a level of its
// path), those levels show the request's key=value instead, as in
// "user=alice/action=trade".
func (r *Rule) MetricLabel(levelKey string) string {
	if r.metric == nil {
		return r.Label()
	}
	parts := strings.Split(levelKey, "|")[1:] // after the domain
	var b strings.Builder
	for i, m := range r.metric {
		if i > 0 {
			b.WriteByte('/')
		}
		if m.withValue && i < len(parts) {
			b.WriteString(parts[i])
		} else {
			b.WriteString(m.text)
		}
	}
	return b.String()
}

// statKey is envoyproxy/ratelimit's name for the path down to raw: each
// level's key, or key_value, joined by '.'.
func statKey(raw *rawNode) string {
	var parts []string
	for n := raw; n != nil; n = n.up {
		parts = append(parts, statPart(joinPath("", n.key, n.value)))
	}
	slices.Reverse(parts)
	return strings.Join(parts, ".")
}

// statPart turns a level's "key=value" into envoyproxy/ratelimit's
// "key_value".
func statPart(s string) string {
	return StatName(strings.Replace(s, "=", "_", 1))
}

var statReplacer = strings.NewReplacer(":", "_", "|", "_")

// StatName is a part of a stat's name as envoyproxy/ratelimit writes it:
// ':' and '|' as '_'.
func StatName(s string) string { return statReplacer.Replace(s) }

// StatKey returns the name envoyproxy/ratelimit counts this limit's stats
// under, below its domain, such as "user_alice.action_trade" or "user":
// each level's key, or key_value, joined by '.', with the request's values
// where the config asks for them (detailed_metric, value_to_metric), read
// from levelKey, the key of the level's bucket.
func (r *Rule) StatKey(levelKey string) string {
	if r.metric == nil {
		return r.statKey
	}
	parts := strings.Split(levelKey, "|")[1:] // after the domain
	out := make([]string, len(r.metric))
	for i, m := range r.metric {
		if m.withValue && i < len(parts) {
			out[i] = statPart(parts[i])
		} else {
			out[i] = statPart(m.text)
		}
	}
	return strings.Join(out, ".")
}

// metricParts returns the parts of the metric label of raw's limit, one
// per level from the top down to raw.
func metricParts(raw *rawNode, detailed bool) []metricPart {
	depth := 0
	for n := raw; n != nil; n = n.up {
		depth++
	}
	out := make([]metricPart, depth)
	for n := raw; n != nil; n = n.up {
		depth--
		out[depth] = metricPart{text: joinPath("", n.key, n.value), withValue: n.valueToMetric || detailed}
	}
	return out
}
