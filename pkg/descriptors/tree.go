package descriptors

import (
	"sort"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// Rule is a limit of the config: what one matched node contributes.
type Rule struct {
	// Name is the limit's configured name, or "".
	Name string
	// Path is the node's place in its domain, e.g. "user/action=trade":
	// a key alone for a node that matches any value.
	Path string
	// Limit is the bucket.
	Limit leaky.Limit
	// Rate is the limit in requests per unit, for the response's
	// current_limit: as written for a rate_limit, derived for a leaky_bucket.
	Rate leaky.Rate
	// Shadow marks a limit that is reported but never rejects.
	Shadow bool
	// Replaces names the limits this one removes from a request that
	// matches both (envoyproxy/ratelimit's replaces).
	Replaces []string

	label  string       // the metric label: Name, or Path
	metric []metricPart // per level of Path, when some take the request's value
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
		return r.label
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

	prefix string // the domain's key component
	root   *level
	rules  []*Rule // every rule of the tree, in file order
	leaf   bool    // match: leaf
	// replaces tells whether a rule has replaces: requests need the
	// replacement pass only then.
	replaces bool
}

// Leaf reports whether the domain applies only the deepest matching limit
// (match: leaf) instead of every level on the path.
func (d *Domain) Leaf() bool { return d.leaf }

// HasReplaces reports whether some limit of the domain replaces others.
func (d *Domain) HasReplaces() bool { return d.replaces }

// Rules returns every limit of the domain in file order.
func (d *Domain) Rules() []*Rule { return d.rules }

// level holds the children of one node, indexed for matching.
type level struct {
	byKey map[string]*candidates
	order []*node // as written, for Describe
}

// candidates are the nodes of one level with the same key, in matching
// precedence: exact value, then wildcards (most literal characters first),
// then the node for any value.
type candidates struct {
	exact     map[string]*node
	wildcards []*node
	any       *node
}

type node struct {
	raw   *rawNode // as written, for Describe
	key   string
	value string   // as written; "" for any value
	parts []string // a wildcard's value split at '*'; nil otherwise
	// component is the node's fixed part of a bucket key; "" when the key
	// takes the request's value (any value, or a wildcard not shared).
	component string
	rule      *Rule
	unlimited bool
	children  *level
}

// compile builds the tree of one parsed domain.
func compile(file string, raw *rawDomain) *Domain {
	d := &Domain{Name: raw.name, File: file, prefix: escape(raw.name), leaf: raw.leaf}
	d.root = d.level(raw.descriptors, parent{})
	return d
}

// parent is what a node inherits from the nodes above it.
type parent struct {
	path   string
	metric []metricPart
}

func (d *Domain) level(raws []*rawNode, up parent) *level {
	if len(raws) == 0 {
		return nil
	}
	lv := &level{byKey: map[string]*candidates{}}
	for _, raw := range raws {
		n := d.node(raw, up)
		lv.order = append(lv.order, n)
		c := lv.byKey[raw.key]
		if c == nil {
			c = &candidates{exact: map[string]*node{}}
			lv.byKey[raw.key] = c
		}
		switch {
		case n.parts != nil:
			c.wildcards = append(c.wildcards, n)
		case n.value == "":
			c.any = n
		default:
			c.exact[n.value] = n
		}
	}
	for _, c := range lv.byKey {
		sort.SliceStable(c.wildcards, func(i, j int) bool {
			return literalLen(c.wildcards[i].parts) > literalLen(c.wildcards[j].parts)
		})
	}
	return lv
}

func (d *Domain) node(raw *rawNode, up parent) *node {
	n := &node{raw: raw, key: raw.key, value: raw.value, unlimited: raw.unlimited}
	segment := raw.key
	if raw.value != "" {
		segment += "=" + raw.value
	}
	here := parent{
		path:   segment,
		metric: append(up.metric[:len(up.metric):len(up.metric)], metricPart{text: segment, withValue: raw.valueToMetric}),
	}
	if up.path != "" {
		here.path = up.path + "/" + segment
	}
	path := here.path
	switch {
	case strings.Contains(raw.value, "*"):
		n.parts = strings.Split(raw.value, "*")
		if raw.shareThreshold {
			n.component = wildcardComponent(raw.key, n.parts)
		}
	case raw.value != "":
		n.component = component(raw.key, raw.value)
	}
	if raw.limit != nil && !raw.unlimited {
		r := &Rule{Name: raw.name, Path: path, Limit: *raw.limit, Shadow: raw.shadow, Replaces: raw.replaces, label: raw.name}
		d.replaces = d.replaces || len(raw.replaces) > 0
		if r.label == "" {
			r.label = path
		}
		if raw.rate != nil {
			r.Rate = *raw.rate
		} else {
			r.Rate = raw.limit.Rate()
		}
		r.metric = metricParts(here.metric, raw.detailedMetric)
		n.rule = r
		d.rules = append(d.rules, r)
	}
	n.children = d.level(raw.children, here)
	return n
}

// metricParts returns the parts of a metric label that takes values, or
// nil when no level does (the label is then fixed).
func metricParts(parts []metricPart, detailed bool) []metricPart {
	values := detailed
	for _, p := range parts {
		values = values || p.withValue
	}
	if !values {
		return nil
	}
	out := make([]metricPart, len(parts))
	for i, p := range parts {
		out[i] = metricPart{text: p.text, withValue: p.withValue || detailed}
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
