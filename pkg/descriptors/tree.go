package descriptors

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

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

// Domain is the compiled, immutable descriptor tree of one domain.
type Domain struct {
	// Name is the domain as requests name it.
	Name string
	// File is the file the domain was loaded from.
	File string
	// OverLimitBody is sent to clients on OVER_LIMIT (as the response's
	// raw_body), with OverLimitBodyRetryAfter replaced by whole seconds;
	// "" sends none.
	OverLimitBody string
	// RateLimitAlgorithm is what the file's rate_limit blocks became, and
	// what a limit sent by Envoy for this domain becomes.
	RateLimitAlgorithm limit.Algorithm

	prefix string // the domain's key component
	root   *level
	rules  []*Rule // every rule of the tree, in file order
	leaf   bool    // match: leaf
	// replaces tells whether a rule has replaces: requests need the
	// replacement pass only then.
	replaces bool
}

// OverLimitBodyRetryAfter is the placeholder of OverLimitBody that is
// replaced by the whole seconds until a retry can pass.
const OverLimitBodyRetryAfter = "{retry_after}"

// Leaf reports whether the domain applies only the deepest matching limit
// (match: leaf) instead of every level on the path.
func (d *Domain) Leaf() bool { return d.leaf }

// HasReplaces reports whether some limit of the domain replaces others.
func (d *Domain) HasReplaces() bool { return d.replaces }

// Rules returns every limit of the domain in file order.
func (d *Domain) Rules() []*Rule { return d.rules }

// level holds the children of one node, indexed for matching.
type level struct {
	// byKey indexes a large level; nil for a small one, whose nodes are
	// searched in small: most levels have a few nodes, for which maps
	// would be most of a large config's memory.
	byKey map[string]*candidates
	small []*node // a small level in matching precedence, as candidates
	order []*node // as written, for Describe
}

// smallLevel is the most nodes a level searches rather than indexes.
const smallLevel = 8

// candidates are the nodes of one level with the same key, in matching
// precedence: exact value, then wildcards (most literal characters first),
// then the node for any value.
type candidates struct {
	exact     map[string]*node
	wildcards []*node
	any       *node
}

type node struct {
	key   string
	value string   // as written; "" for any value
	parts []string // a wildcard's value split at '*'; nil otherwise
	// component is the node's fixed part of a bucket key; "" when the key
	// takes the request's value (any value, or a wildcard not shared).
	component      string
	rules          []*Rule // the node's limits, in file order
	list           bool    // written as a limits list
	unlimited      bool
	detailedMetric bool // as written, for Describe
	valueToMetric  bool
	line           int32 // in the domain's file, for Explain; beside the flags, so that a node stays 112 bytes
	children       *level
}

// precedence orders the nodes of one key: exact value, wildcards with the
// most literal characters first, any value.
func (n *node) precedence() int {
	switch {
	case n.parts != nil:
		return 1<<30 - literalLen(n.parts)
	case n.value == "":
		return 1 << 31
	}
	return 0
}

// compileBudget bounds the bytes of the strings that compiling a file of
// size bytes makes: each limit's path and each level's part of bucket keys
// repeat the levels above them, and each repeat of a node through an
// alias, so that a small file (a long value above many nodes) could ask
// for gigabytes. A config as written uses a small fraction of this.
func compileBudget(size int) int { return 64<<20 + 4*size }

// compiler builds the tree of one parsed domain within a budget of bytes.
type compiler struct {
	d      *Domain
	budget int
	over   *rawNode // the node that overran the budget
}

// compile builds the tree of one parsed domain, or says where the strings
// it would make overran budget bytes.
func compile(file string, raw *rawDomain, budget int) (*Domain, *Problem) {
	c := compiler{d: &Domain{Name: raw.name, File: file, OverLimitBody: raw.overLimitBody, RateLimitAlgorithm: raw.algorithm,
		prefix: escape(raw.name), leaf: raw.leaf}, budget: budget}
	c.d.root = c.level(raw.descriptors, parent{})
	if n := c.over; n != nil {
		return nil, &Problem{File: file, Line: max(n.line, 1), Field: n.path(),
			Msg: fmt.Sprintf("the descriptors' paths and keys add up to more than %d MB here: values too long under too many descriptors, or repeated too often through aliases", budget>>20)}
	}
	return c.d, nil
}

// parent is what a node inherits from the nodes above it. It is passed by
// value: a pointer to it would move each node's to the heap.
type parent struct {
	path   string // "" at the top
	values bool   // a level above takes the request's value in metrics
}

func (c *compiler) level(raws []*rawNode, up parent) *level {
	if len(raws) == 0 {
		return nil
	}
	lv := &level{order: make([]*node, 0, len(raws))}
	for _, raw := range raws {
		n := c.node(raw, up)
		if c.over != nil {
			return nil // over budget: the tree is not used
		}
		lv.order = append(lv.order, n)
	}
	if len(raws) <= smallLevel {
		byPrecedence := func(a, b *node) int { return cmp.Compare(a.precedence(), b.precedence()) }
		lv.small = lv.order // shared when already in order (both are read only)
		if !slices.IsSortedFunc(lv.small, byPrecedence) {
			lv.small = slices.Clone(lv.order)
			slices.SortStableFunc(lv.small, byPrecedence)
		}
		return lv
	}
	lv.byKey = map[string]*candidates{}
	for _, n := range lv.order {
		cs := lv.byKey[n.key]
		if cs == nil {
			cs = &candidates{}
			lv.byKey[n.key] = cs
		}
		switch {
		case n.parts != nil:
			cs.wildcards = append(cs.wildcards, n)
		case n.value == "":
			cs.any = n
		default:
			if cs.exact == nil {
				cs.exact = map[string]*node{}
			}
			cs.exact[n.value] = n
		}
	}
	for _, cs := range lv.byKey {
		slices.SortStableFunc(cs.wildcards, func(a, b *node) int { return cmp.Compare(a.precedence(), b.precedence()) })
	}
	return lv
}

// spend takes the bytes of a node's strings from the budget, or records
// the node that overran it.
func (c *compiler) spend(raw *rawNode, bytes int) bool {
	if c.budget -= bytes; c.budget < 0 {
		c.over = raw
		return false
	}
	return true
}

func (c *compiler) node(raw *rawNode, up parent) *node {
	// The path, and at most the escaped key and value, before they are made.
	if !c.spend(raw, len(up.path)+1+3*(len(raw.key)+1+len(raw.value))) {
		return nil
	}
	n := &node{key: raw.key, value: raw.value, line: int32(min(raw.line, math.MaxInt32)), unlimited: raw.unlimited,
		detailedMetric: raw.detailedMetric, valueToMetric: raw.valueToMetric}
	here := parent{path: joinPath(up.path, raw.key, raw.value), values: up.values || raw.valueToMetric}
	switch {
	case strings.Contains(raw.value, "*"):
		n.parts = strings.Split(raw.value, "*")
		if raw.shareThreshold {
			n.component = wildcardComponent(raw.key, n.parts)
		}
	case raw.value != "":
		n.component = component(raw.key, raw.value)
	}
	n.list = raw.list != nil
	if !raw.unlimited {
		marks := limitMarks(raw.limits)
		for i, l := range raw.limits {
			if n.rules = append(n.rules, c.rule(raw, l, here, marks[i])); c.over != nil {
				return nil
			}
		}
	}
	if n.children = c.level(raw.children, here); c.over != nil {
		return nil
	}
	return n
}

// rule makes the Rule of one limit of a node.
func (c *compiler) rule(raw *rawNode, l *rawLimit, here parent, mark string) *Rule {
	d := c.d
	r := &Rule{Name: l.name, Path: here.path, Limit: l.limit, Shadow: l.shadow, Replaces: l.replaces, label: l.name, mark: mark}
	d.replaces = d.replaces || len(l.replaces) > 0
	if r.label == "" {
		r.label = here.path
		if len(raw.limits) > 1 {
			r.label += "/limits[" + strconv.Itoa(l.item) + "]"
		}
	}
	if l.rate != nil {
		r.Rate = *l.rate
	} else {
		r.Rate = l.limit.Rate()
	}
	if here.values || raw.detailedMetric {
		// The label's parts repeat the path.
		if !c.spend(raw, 2*len(here.path)) {
			return nil
		}
		r.metric = metricParts(raw, raw.detailedMetric)
	}
	if !c.spend(raw, len(here.path)) {
		return nil
	}
	r.statKey = statKey(raw)
	d.rules = append(d.rules, r)
	return r
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

// limitMarks returns the key mark of each limit of a node: "" for the
// first leaky bucket, "|#lbN" for the Nth after it, "|#sw<window>/<resolution>"
// for a sliding window and "|#fw<window>" for a fixed one, with "~<item>"
// added where two limits would have the same.
func limitMarks(limits []*rawLimit) []string {
	marks := make([]string, len(limits))
	buckets := 0
	for i, l := range limits {
		var m string
		switch l.limit.Algorithm {
		case limit.SlidingWindow:
			w := l.limit.Sliding()
			m = "|#sw" + compactDuration(w.Window) + "/" + compactDuration(w.Resolution)
		case limit.FixedWindow:
			m = "|#fw" + compactDuration(l.limit.Window)
		default:
			if buckets++; buckets > 1 {
				m = "|#lb" + strconv.Itoa(buckets)
			}
		}
		if slices.Contains(marks[:i], m) {
			m += "~" + strconv.Itoa(i)
		}
		marks[i] = m
	}
	return marks
}

// compactDuration writes d in its largest whole unit: 1d, 2h, 30m, 5s,
// 250ms or 7us.
func compactDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Microseconds(), 10) + "us"
}

// joinPath returns the path of a node below the one at path: "key" or
// "key=value", after a '/'.
func joinPath(path, key, value string) string {
	var sep, eq string
	if path != "" {
		sep = "/"
	}
	if value != "" {
		eq = "="
	}
	return path + sep + key + eq + value // one allocation
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

func literalLen(parts []string) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// match returns the child for one request entry, or nil.
func (lv *level) match(key, value string) *node {
	if lv == nil {
		return nil
	}
	if lv.byKey == nil {
		for _, n := range lv.small {
			if n.key == key && n.matches(value) {
				return n
			}
		}
		return nil
	}
	c := lv.byKey[key]
	if c == nil {
		return nil
	}
	if n, ok := c.exact[value]; ok {
		return n
	}
	for _, n := range c.wildcards {
		if globMatch(n.parts, value) {
			return n
		}
	}
	return c.any
}

// matches reports whether the node matches a request's value.
func (n *node) matches(value string) bool {
	switch {
	case n.parts != nil:
		return globMatch(n.parts, value)
	case n.value == "":
		return true
	}
	return n.value == value
}

// globMatch reports whether value matches the pattern whose literal parts,
// split at each '*', are parts.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
