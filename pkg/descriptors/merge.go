package descriptors

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Merging the files of one domain (Options.MergeDomains, envoyproxy/
// ratelimit's MERGE_DOMAIN_CONFIG): each file adds its top-level
// descriptors to the domain, as the reference adds each file's to the
// domain it has already. As there, a top-level descriptor (its key and
// value) in two files is an error, even when their children differ: the
// levels below it are not merged. The files must also agree on the
// settings that hold for the whole domain (match, rate_limit_algorithm,
// calendar, time_zone, charge, over_limit_body), since a limit sent by
// Envoy for the domain takes them.

// domainSetting is one of those settings, as written in a problem.
type domainSetting struct {
	field string
	value func(*Domain) string
}

var domainSettings = []domainSetting{
	{"match", func(d *Domain) string {
		if d.leaf {
			return "leaf"
		}
		return "all"
	}},
	{"rate_limit_algorithm", func(d *Domain) string { return d.RateLimitAlgorithm.String() }},
	{"calendar", func(d *Domain) string { return strconv.FormatBool(d.RateLimitCalendar) }},
	{"time_zone", func(d *Domain) string { return strconv.Quote(d.TimeZone) }},
	{"charge", func(d *Domain) string { return d.Charge.String() }},
	{"over_limit_body", func(d *Domain) string { return strconv.Quote(clip(d.OverLimitBody)) }},
}

// merge returns d with the top-level descriptors of more, the same domain
// compiled from a later file whose domain field is on line, or the problems
// that keep them apart. d and more are not changed.
func merge(d, more *Domain, line int) (*Domain, []Problem) {
	var errs []Problem
	for _, s := range domainSettings {
		if was, is := s.value(d), s.value(more); was != is {
			errs = append(errs, Problem{File: more.File, Line: line, Field: s.field,
				Msg: fmt.Sprintf("%s here, %s in %s: the files of domain %q are merged, and must agree on it (given or by default)", is, was, d.File, clip(d.Name))})
		}
	}
	first := map[[2]string]*node{}
	for _, n := range d.root.nodes() {
		first[[2]string{n.key, n.value}] = n
	}
	for i, n := range more.root.nodes() {
		if f := first[[2]string{n.key, n.value}]; f != nil {
			errs = append(errs, Problem{File: more.File, Line: int(n.line), Field: "descriptors[" + strconv.Itoa(i) + "]",
				Msg: fmt.Sprintf("duplicate descriptor: key %q with %s is already defined in %s:%d (the files of domain %q are merged at the top level only)",
					clip(n.key), describeValue(n.value), d.fileOf(f), f.line, clip(d.Name))})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	m := *d
	if top := append(slices.Clip(d.root.nodes()), more.root.nodes()...); len(top) > 0 {
		m.root = indexLevel(top)
	}
	m.rules = append(slices.Clip(d.rules), more.rules...)
	m.replaces = d.replaces || more.replaces
	m.files = append(slices.Clip(d.Files()), more.File)
	m.origin = maps.Clone(d.origin)
	if m.origin == nil {
		m.origin = map[*node]string{}
	}
	for _, n := range more.root.nodes() {
		m.origin[n] = more.File
	}
	return &m, nil
}

// nodes returns the level's nodes as written; none for a nil level.
func (lv *level) nodes() []*node {
	if lv == nil {
		return nil
	}
	return lv.order
}
