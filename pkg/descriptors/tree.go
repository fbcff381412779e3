package descriptors

import (
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Domain is the compiled, immutable descriptor tree of one domain.
type Domain struct {
	// Name is the domain as requests name it.
	Name string
	// File is the file the domain was loaded from; the first of them when
	// several are merged (Options.MergeDomains): see Files.
	File string
	// OverLimitBody is sent to clients on OVER_LIMIT (as the response's
	// raw_body), with OverLimitBodyRetryAfter replaced by whole seconds;
	// "" sends none.
	OverLimitBody string
	// RateLimitAlgorithm is what the file's rate_limit blocks became, and
	// what a limit sent by Envoy for this domain becomes.
	RateLimitAlgorithm limit.Algorithm
	// RateLimitCalendar and TimeZone are the file's calendar: true and
	// time_zone: its rate_limits of a day or more, and a limit of a day or
	// more sent by Envoy for this domain, are then calendar windows.
	RateLimitCalendar bool
	TimeZone          string
	// Charge is the file's charge: its limits' unless a node says
	// otherwise, and a limit sent by Envoy's.
	Charge Charge

	prefix string // the domain's key component
	root   *level
	rules  []*Rule // every rule of the tree, in file order
	leaf   bool    // match: leaf
	// replaces tells whether a rule has replaces: requests need the
	// replacement pass only then.
	replaces bool
	// files are File and the files merged into the domain after it; nil
	// for a domain of one file. origin is the file of each top-level node
	// of those merged in (a node's descendants are in its file).
	files  []string
	origin map[*node]string
}

// Files returns the files the domain was loaded from, in load order: File,
// then those merged into it (Options.MergeDomains).
func (d *Domain) Files() []string {
	if d.files == nil {
		return []string{d.File}
	}
	return d.files
}

// fileOf returns the file a top-level node was loaded from.
func (d *Domain) fileOf(top *node) string {
	if f, ok := d.origin[top]; ok {
		return f
	}
	return d.File
}

// OverLimitBodyRetryAfter is the placeholder of OverLimitBody that is
// replaced by the whole seconds until a retry can pass.
const OverLimitBodyRetryAfter = "{retry_after}"

// Leaf reports whether the domain applies only the deepest matching limit
// (match: leaf) instead of every level on the path.
func (d *Domain) Leaf() bool { return d.leaf }

// HasReplaces reports whether some limit of the domain replaces others.
func (d *Domain) HasReplaces() bool { return d.replaces }

// Rules returns every limit of the domain in file order (files merged into
// it: in load order).
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
