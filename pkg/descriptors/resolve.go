package descriptors

import (
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key, Value string
}

// Level is one bucket that a request descriptor is checked against.
type Level struct {
	// Key identifies the bucket; see the package documentation.
	Key string
	// Rule is the limit; shared, never to be modified.
	Rule *Rule
}

// Resolve walks the tree along a request descriptor and appends to dst one
// Level for every node on the walk that has a limit, from the shallowest to
// the deepest; in a domain with match: leaf, only for the node that matched
// the descriptor's last entry, as envoyproxy/ratelimit does. The walk follows the entries in order and stops at the first
// one no node matches; at each level it takes the exact value, else the
// wildcard with the most literal characters, else the node for any value.
//
// A node with rate_limit {unlimited: true} on the walk makes the descriptor
// unlimited: Resolve appends nothing. A non-nil override (a limit sent by
// Envoy with the descriptor) replaces the limit of the deepest level, in a
// bucket of its own: the level's key marked with the limit. When no level
// has a limit, the override is the descriptor's one level, keyed by all its
// entries.
//
// The keys of all levels share one allocation; nothing else is allocated
// for descriptors of up to 16 entries.
func (d *Domain) Resolve(entries []Entry, override *Rule, dst []Level) []Level {
	return d.resolve(entries, override, dst, nil)
}

// resolve is Resolve, writing down in rec, if not nil, how each level came
// about (Explain): one code path decides and explains.
func (d *Domain) resolve(entries []Entry, override *Rule, dst []Level, rec *Walk) []Level {
	var nodeBuf [16]*node
	nodes, first, unlimited := d.walk(entries, nodeBuf[:0])
	start := len(dst)
	if rec != nil {
		rec.steps(d, entries, nodes, first, unlimited)
	}
	if unlimited {
		return dst
	}

	// Which walked nodes give levels, and how many key parts to write. An
	// override takes the place of the deepest level, or is the only one.
	levels, parts, replaced := 0, 0, -1
	for i := first; i < len(nodes); i++ {
		if len(nodes[i].rules) > 0 {
			levels++
			parts = i + 1
		}
	}
	if override != nil {
		if levels > 0 {
			replaced = parts - 1
		} else {
			levels, parts = 1, len(entries)
		}
	}
	if levels == 0 {
		return dst
	}

	var b strings.Builder
	var marker []byte
	size := len(d.prefix)
	for i := range parts {
		size += 1 + partLen(nodes, entries, i)
	}
	if override != nil {
		marker = appendRate(make([]byte, 0, 32), override)
		size += len(marker)
	}
	b.Grow(size)
	b.WriteString(d.prefix)
	var endBuf [16]int
	ends := endBuf[:0]
	for i := range parts {
		b.WriteByte('|')
		writePart(&b, nodes, entries, i)
		ends = append(ends, b.Len())
	}
	b.Write(marker)
	key := b.String()

	for i, n := range nodes[:min(parts, len(nodes))] {
		switch {
		case i < first:
		case i == replaced:
			dst = append(dst, Level{Key: key, Rule: override})
			if rec != nil {
				rec.replaced(i, len(dst)-1-start)
			}
		default:
			for j, r := range n.rules {
				k := key[:ends[i]]
				if r.mark != "" {
					k += r.mark // a key of its own
				}
				dst = append(dst, Level{Key: k, Rule: r})
				if rec != nil {
					rec.Steps[i].Limits[j].Level = len(dst) - 1 - start
				}
			}
		}
	}
	if override != nil && replaced < 0 {
		dst = append(dst, Level{Key: key, Rule: override})
		if rec != nil {
			rec.Override = len(dst) - 1 - start
		}
	}
	return dst
}

// walk follows the entries down the tree, appending each node matched to
// nodes, and returns them with the first whose limits apply (in leaf mode
// only the last entry's node, if the walk got that far) and whether an
// unlimited node makes the descriptor unlimited.
func (d *Domain) walk(entries []Entry, nodes []*node) (_ []*node, first int, unlimited bool) {
	lv := d.root
	for _, e := range entries {
		n := lv.match(e.Key, e.Value)
		if n == nil {
			break
		}
		unlimited = unlimited || n.unlimited
		nodes = append(nodes, n)
		lv = n.children
	}
	if d.leaf {
		first = len(nodes)
		if len(nodes) == len(entries) {
			first = len(nodes) - 1
			unlimited = nodes[first].unlimited
		}
	}
	return nodes, first, unlimited
}

// Unlimited reports whether a descriptor is allow-listed: a node with
// rate_limit {unlimited: true} is on its walk (in leaf mode, is the node of
// its last entry), so that no level of it is checked.
func (d *Domain) Unlimited(entries []Entry) bool {
	var nodeBuf [16]*node
	_, _, unlimited := d.walk(entries, nodeBuf[:0])
	return unlimited
}

// partLen returns the length of the key part of entry i: the node's own
// part where it has one, else the entry escaped.
func partLen(nodes []*node, entries []Entry, i int) int {
	if i < len(nodes) && nodes[i].component != "" {
		return len(nodes[i].component)
	}
	return escapedLen(entries[i].Key) + 1 + escapedLen(entries[i].Value)
}

func writePart(b *strings.Builder, nodes []*node, entries []Entry, i int) {
	if i < len(nodes) && nodes[i].component != "" {
		b.WriteString(nodes[i].component)
		return
	}
	writeEscaped(b, entries[i].Key)
	b.WriteByte('=')
	writeEscaped(b, entries[i].Value)
}

func writeEscaped(b *strings.Builder, s string) {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; mustEscape(c) {
			b.WriteString(s[start:i])
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			start = i + 1
		}
	}
	b.WriteString(s[start:])
}

// appendRate appends the override mark "|#N/unit" (or "|#N/Mxunit"),
// with "/sw" or "/fw" after it when the override is a window.
func appendRate(b []byte, r *Rule) []byte {
	b = append(b, "|#"...)
	b = strconv.AppendUint(b, uint64(r.Rate.RequestsPerUnit), 10)
	b = append(b, '/')
	if r.Rate.Multiplier > 1 {
		b = strconv.AppendUint(b, uint64(r.Rate.Multiplier), 10)
		b = append(b, 'x')
	}
	b = append(b, r.Rate.Unit.String()...)
	switch r.Limit.Algorithm {
	case limit.SlidingWindow:
		b = append(b, "/sw"...)
	case limit.FixedWindow:
		b = append(b, "/fw"...)
	}
	return b
}
