package descriptors

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// descriptorList reads the list of descriptors below up (nil: the file's
// own) and reports siblings that match the same key and value.
//
// The paths of the descriptors read are their rawNodes, not fieldPaths on
// the stack: the compiler moves to the heap what the recursion passes on.
func (r *reader) descriptorList(n *yaml.Node, up *rawNode) []*rawNode {
	p := fieldPath{node: up, name: "descriptors"}
	items, ok := r.sequence(n, &p)
	if !ok || len(items) == 0 {
		return nil
	}
	nodes := make([]*rawNode, 0, len(items))
	var seen map[[2]string]*rawNode // for long lists; short ones are searched
	if len(items) > 8 {
		seen = make(map[[2]string]*rawNode, len(items))
	}
	for i, item := range items {
		item = deref(item)
		d := r.descriptor(item, up, i)
		if d == nil {
			continue
		}
		id := [2]string{d.key, d.value}
		first := seen[id]
		if seen == nil {
			for _, s := range nodes {
				if s.key == d.key && s.value == d.value {
					first = s
					break
				}
			}
		}
		if first != nil {
			r.errorf(item, &fieldPath{node: d}, "duplicate descriptor: key %q with %s is already defined on line %d", clip(d.key), describeValue(d.value), first.line)
			continue
		}
		if seen != nil {
			seen[id] = d
		}
		nodes = append(nodes, d)
	}
	r.checkShadowedByStar(nodes, seen)
	return nodes
}

// checkShadowedByStar warns of a descriptor without a value beside one of
// the same key with value "*": the "*" wildcard matches every value first,
// so the other never applies (envoyproxy/ratelimit reads them alike).
func (r *reader) checkShadowedByStar(nodes []*rawNode, seen map[[2]string]*rawNode) {
	for _, n := range nodes {
		if n.value != "" {
			continue
		}
		star := seen[[2]string{n.key, "*"}]
		if seen == nil {
			for _, s := range nodes {
				if s.key == n.key && s.value == "*" {
					star = s
				}
			}
		}
		if star != nil {
			r.addWarning(Problem{Line: n.line, Field: n.path(),
				Msg: fmt.Sprintf("never applies: its sibling with value \"*\" (line %d) matches every value of key %q first, as in envoyproxy/ratelimit", star.line, clip(n.key))})
		}
	}
}

func describeValue(v string) string {
	if v == "" {
		return "any value"
	}
	return fmt.Sprintf("value %q", clip(v))
}

// descriptorObject is a descriptor's fields. The envoyproxy/ratelimit
// fields this service does not act on are accepted with a warning.
var descriptorObject *object[*rawNode]

// init makes descriptorObject, whose descriptors field reads descriptors.
func init() {
	descriptorObject = newObject(append([]objectField[*rawNode]{
		requiredField("key", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			var ok bool
			if d.key, ok = r.text(f.value, p); ok && d.key == "" {
				r.errorf(f.value, p, "must not be empty")
				return false
			}
			return ok
		}),
		fieldOf("value", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			var ok bool
			// "*" is a wildcard that matches every value, as in
			// envoyproxy/ratelimit: it comes before a sibling without a
			// value, and share_threshold makes its values share a bucket.
			d.value, ok = r.text(f.value, p)
			return ok
		}),
		fieldOf("limits", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			d.list = f.key
			return r.limitsList(f, p, d)
		}),
		fieldOf("descriptors", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			d.children = r.descriptorList(f.value, d)
			return true
		}),
		flagField("share_threshold", func(d *rawNode) *bool { return &d.shareThreshold }),
		flagField("detailed_metric", func(d *rawNode) *bool { return &d.detailedMetric }),
		flagField("value_to_metric", func(d *rawNode) *bool { return &d.valueToMetric }),
		flagField("quota_mode", func(d *rawNode) *bool { return &d.quotaMode }),
		fieldOf("metadata", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			var ok bool
			d.metadata, ok = r.metadata(f.value, p)
			return ok
		}),
		fieldOf("charge", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			c, ok := r.chargeField(f.value, p)
			d.charge = &c
			return ok
		}),
		fieldOf("scope", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			var ok bool
			d.regional, ok = r.scopeField(f.value, p)
			return ok
		}),
	}, limitFields(func(d *rawNode) *limitReading { return &d.one })...)...)
}

// flagField is a true-or-false field of a descriptor.
func flagField(name string, at func(*rawNode) *bool) objectField[*rawNode] {
	return fieldOf(name, func(r *reader, f field, p *fieldPath, d *rawNode) bool {
		var ok bool
		*at(d), ok = r.boolean(f.value, p)
		return ok
	})
}

// descriptor reads one descriptor mapping, item index of the list of up's
// children (nil: the file's list); nil if it is unusable.
func (r *reader) descriptor(n *yaml.Node, up *rawNode, index int) *rawNode {
	d := &rawNode{up: up, index: index, line: n.Line}
	p := &fieldPath{node: d}
	var buf fieldsBuf
	fields, ok := descriptorObject.read(r, n, p, d, buf[:0])
	if fields == nil && !ok {
		return nil
	}
	d.unlimited = d.one.unlimited != nil
	if d.list != nil {
		r.checkBesideLimits(d, fields, p)
		if d.one.shadow {
			for _, l := range d.limits {
				l.shadow = true // the descriptor's shadow_mode covers each of its limits
			}
		}
	} else if l := r.finishLimit(n, p, &d.one, -1); l != nil {
		d.limits = []*rawLimit{l}
	}
	for _, l := range d.limits {
		if l.name == "" {
			continue
		}
		// Requests that reach this limit would drop it: it would never apply.
		for i, name := range l.replaces {
			if name == l.name {
				r.addError(Problem{Line: l.replacesLines[i], Field: replacesField(d, l, i),
					Msg: fmt.Sprintf("%q is the name of this limit: a limit cannot replace itself (it would never apply)", clip(name))})
			}
		}
	}
	if d.shareThreshold && !strings.Contains(d.value, "*") {
		fp := p.field("share_threshold")
		r.warnf(n, &fp, "has no effect: value %q has no '*' wildcard", clip(d.value))
	}
	if d.unlimited && limitBelow(d.children) {
		r.warnf(n, p, "the limits below this unlimited descriptor never apply: a descriptor that reaches it is not limited")
	}
	if len(d.limits) == 0 && !d.unlimited {
		// What applies to a node's limits does nothing without one.
		for _, f := range fields {
			switch f.name {
			case "shadow_mode", "quota_mode", "charge", "metadata", "scope":
				fp := p.field(f.name)
				r.warnOnce(f.key, &fp, f.name, "has no effect: the descriptor has no limit")
			}
		}
	}
	return d
}

// checkBesideLimits reports the one-limit fields next to a limits list:
// a limit beside it, or a name (each item names its own).
func (r *reader) checkBesideLimits(d *rawNode, fields []field, p *fieldPath) {
	for _, f := range fields {
		fp := p.field(f.name)
		switch {
		case slices.Contains(algorithmFields, f.name):
			r.errorf(f.key, &fp, "is a limit beside limits (line %d): make it an item of limits", d.list.Line)
		case f.name == "name":
			r.errorf(f.key, &fp, "names one limit, but the descriptor has limits (line %d): give each item its name", d.list.Line)
		}
	}
}

// limitBelow reports whether any of nodes or their descendants has a limit.
func limitBelow(nodes []*rawNode) bool {
	for _, n := range nodes {
		if len(n.limits) > 0 || limitBelow(n.children) {
			return true
		}
	}
	return false
}
