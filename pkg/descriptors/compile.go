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

// compileBudget bounds the bytes of the strings that compiling a file of
// size bytes makes: each limit's path and each level's part of bucket keys
// repeat the levels above them, and each repeat of a node through an
// alias, so that a small file (a long value above many nodes) could ask
// for gigabytes. A config as written uses a small fraction of this.
func compileBudget(size int) int { return 64<<20 + 4*size }

// compiler builds the tree of one parsed domain within a budget of bytes.
type compiler struct {
	d      *Domain
	charge Charge // the file's
	budget int
	over   *rawNode // the node that overran the budget
}

// compile builds the tree of one parsed domain, or says where the strings
// it would make overran budget bytes.
func compile(file string, raw *rawDomain, budget int) (*Domain, *Problem) {
	c := compiler{d: &Domain{Name: raw.name, File: file, OverLimitBody: raw.overLimitBody, RateLimitAlgorithm: raw.algorithm, Charge: raw.charge,
		RateLimitCalendar: raw.calendar.on, TimeZone: raw.calendar.zone, prefix: escape(raw.name), leaf: raw.leaf}, budget: budget, charge: raw.charge}
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
	order := make([]*node, 0, len(raws))
	for _, raw := range raws {
		n := c.node(raw, up)
		if c.over != nil {
			return nil // over budget: the tree is not used
		}
		order = append(order, n)
	}
	return indexLevel(order)
}

// indexLevel makes the level of nodes, indexed for matching.
func indexLevel(order []*node) *level {
	lv := &level{order: order}
	if len(order) <= smallLevel {
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
	r := &Rule{Name: l.name, Path: here.path, Limit: l.limit, Shadow: l.shadow, Replaces: l.replaces, label: l.name, mark: mark,
		Always: c.charge == ChargeAlways, QuotaMode: raw.quotaMode, Metadata: raw.metadata, Regional: raw.regional}
	if raw.charge != nil {
		r.Always = *raw.charge == ChargeAlways
	}
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

// limitMarks returns the key mark of each limit of a node: "" for the
// first leaky bucket, "|#lbN" for the Nth after it, "|#sw<window>/<resolution>"
// for a sliding window, "|#fw<window>" for a fixed one and "|#fw<period>"
// ("|#fwmonth") for a calendar window, with "~<item>" added where two
// limits would have the same.
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
			if l.limit.IsCalendar() {
				m = "|#fw" + l.limit.Calendar.String() // its zone not: a zone corrected keeps the period's count where the periods overlap
			}
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
