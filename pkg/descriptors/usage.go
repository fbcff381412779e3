package descriptors

import (
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Charge says when a limit's hits are charged.
type Charge uint8

const (
	// ChargeAdmitted charges a limit only when the request is admitted:
	// every bucket of it had room (all or nothing). The default.
	ChargeAdmitted Charge = iota
	// ChargeAlways charges every call's hits whether or not the request is
	// admitted, past the limit if need be: usage already spent, such as the
	// tokens of a response that Envoy charges at stream end. A check (0
	// hits) is then OVER_LIMIT until the debt has gone.
	ChargeAlways
)

// String returns the charge as the config writes it.
func (c Charge) String() string {
	if c == ChargeAlways {
		return "always"
	}
	return "admitted"
}

// ParseCharge parses a charge as the config and the -charge flag write it.
func ParseCharge(s string) (Charge, error) {
	switch s {
	case "admitted":
		return ChargeAdmitted, nil
	case "always":
		return ChargeAlways, nil
	}
	return 0, fmt.Errorf("%q: want admitted (only admitted requests are charged, all or nothing) or always (every call's hits, past the limit if need be)", clip(s))
}

// chargeField reads a charge field.
func (r *reader) chargeField(n *yaml.Node, p *fieldPath) (Charge, bool) {
	s, ok := r.text(n, p)
	if !ok {
		return 0, false
	}
	c, err := ParseCharge(s)
	if err != nil {
		r.errorf(n, p, "%v", err)
		return 0, false
	}
	return c, true
}

// scopeField reads a scope field: global (the default: with -region,
// one limit across the regions) or region (each region's own).
func (r *reader) scopeField(n *yaml.Node, p *fieldPath) (regional bool, ok bool) {
	s, ok := r.text(n, p)
	if !ok {
		return false, false
	}
	switch s {
	case "global":
		return false, true
	case "region":
		return true, true
	}
	r.errorf(n, p, "%q: want global (one limit across the regions, the default) or region (each region's own)", clip(s))
	return false, false
}

// Metadata bounds: a node's metadata is a mapping of at most
// maxMetadataValues values nested at most maxMetadataDepth deep (what
// Envoy's dynamic metadata takes comfortably). Aliases share one reading,
// so a mapping repeated through them costs its size once.
const (
	maxMetadataValues = 10_000
	maxMetadataDepth  = 32
)

// metadata reads a node's metadata: a mapping whose values are strings,
// numbers (as float64, as protobuf's Struct holds them), booleans, null,
// lists and mappings. The result is shared by every Rule of the node and
// must not be changed.
func (r *reader) metadata(n *yaml.Node, p *fieldPath) (map[string]any, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		r.errorf(n, p, "must be a mapping of keys to values, got %s", kindName(n))
		return nil, false
	}
	if m, ok := r.metadataRead[n]; ok {
		return m, true
	}
	values := 0
	v, ok := r.metadataValue(n, p, 0, &values)
	if !ok {
		return nil, false
	}
	m := v.(map[string]any)
	if r.metadataRead == nil {
		r.metadataRead = map[*yaml.Node]map[string]any{}
	}
	r.metadataRead[n] = m
	return m, true
}

func (r *reader) metadataValue(n *yaml.Node, p *fieldPath, depth int, values *int) (any, bool) {
	n = deref(n)
	if *values++; *values > maxMetadataValues {
		r.errorf(n, p, "holds more than %d values: metadata is for routing hints, not data", maxMetadataValues)
		return nil, false
	}
	if depth > maxMetadataDepth {
		r.errorf(n, p, "is nested more than %d levels deep", maxMetadataDepth)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := deref(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				r.errorf(k, p, "has a key that is %s: keys are strings", kindName(k))
				return nil, false
			}
			if _, dup := m[k.Value]; dup {
				r.errorf(k, p, "has the key %q twice", clip(k.Value))
				return nil, false
			}
			fp := p.field(k.Value)
			v, ok := r.metadataValue(n.Content[i+1], &fp, depth+1, values)
			if !ok {
				return nil, false
			}
			m[k.Value] = v
		}
		return m, true
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			ip := p.item(i)
			v, ok := r.metadataValue(c, &ip, depth+1, values)
			if !ok {
				return nil, false
			}
			l[i] = v
		}
		return l, true
	}
	switch n.Tag {
	case "!!null":
		return nil, true
	case "!!bool":
		return r.boolean(n, p)
	case "!!int", "!!float":
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return f, true
		}
		var f float64
		if err := n.Decode(&f); err == nil {
			return f, true
		}
	}
	return n.Value, true
}
