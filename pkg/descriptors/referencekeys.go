package descriptors

import (
	"fmt"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// referenceWindows are the fixed windows envoyproxy/ratelimit counts: its
// units, a second to a year.
var referenceWindows = map[time.Duration]bool{time.Second: true, time.Minute: true, time.Hour: true,
	24 * time.Hour: true, 7 * 24 * time.Hour: true, 30 * 24 * time.Hour: true, 365 * 24 * time.Hour: true}

// ReferenceWindowClashes returns a problem for each node of c with two
// or more fixed windows of the reference's units. A store that counts
// them in the reference's keys (the descriptor's entries and the window's
// start, not its length) would count both in one key whenever their
// windows start together; the reference itself has one limit a node.
func (c *Config) ReferenceWindowClashes() []Problem {
	var out []Problem
	for _, d := range c.Domains() {
		if d.root == nil {
			continue
		}
		for _, top := range d.root.order {
			file := d.fileOf(top)
			top.walk(func(n *node) {
				var names []string
				for _, r := range n.rules {
					if l := r.Limit; l.Algorithm == limit.FixedWindow && !l.IsCalendar() && referenceWindows[l.Window] {
						names = append(names, r.Label())
					}
				}
				if len(names) > 1 {
					out = append(out, Problem{File: file, Line: int(n.line), Field: n.rules[0].Path,
						Msg: fmt.Sprintf("fixed windows %s of the reference's units on one descriptor: in the reference's keys they would share one counter whenever their windows start together (count in the store's own keys, or keep one)", strings.Join(names, ", "))})
				}
			})
		}
	}
	return out
}

// walk calls f on n and every node below it.
func (n *node) walk(f func(*node)) {
	f(n)
	if n.children != nil {
		for _, child := range n.children.order {
			child.walk(f)
		}
	}
}
