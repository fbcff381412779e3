package descriptors

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// maxAliasNodes bounds the nodes that aliases add to a file, against
// "billion laughs" files: a few lines of aliases, each naming the one
// before ten times, that expand to billions of nodes. What a file spells
// out has no bound but the file's size: reading it is linear in its bytes.
const maxAliasNodes = 1_000_000

// checkAliases rejects an alias to a node that contains it (which would make
// the walk endless) and aliases that add more than maxAliasNodes nodes to
// the tree the reader walks. A file without aliases allocates nothing here.
func checkAliases(root *yaml.Node) *Problem {
	var a aliasCheck
	return a.walk(root)
}

// aliasCheck adds up what the aliases of a file expand to.
type aliasCheck struct {
	sizes map[*yaml.Node]int // expanded size of each anchor an alias names
	added int                // nodes the aliases met so far add
}

// walk visits the tree as written, without following aliases, and counts
// what each alias adds.
func (a *aliasCheck) walk(n *yaml.Node) *Problem {
	if n.Kind == yaml.AliasNode {
		s, p := a.alias(n)
		if p != nil {
			return p
		}
		if a.added += s; a.added > maxAliasNodes {
			return &Problem{Line: n.Line, Msg: fmt.Sprintf("aliases expand to more than %d nodes", maxAliasNodes)}
		}
		return nil
	}
	for _, c := range n.Content {
		if p := a.walk(c); p != nil {
			return p
		}
	}
	return nil
}

// alias returns the number of nodes the alias n expands to, or a problem
// at n's line.
func (a *aliasCheck) alias(n *yaml.Node) (int, *Problem) {
	if n.Alias == nil {
		return 0, nil
	}
	s, cycle := a.size(n.Alias)
	if cycle != nil {
		if cycle.Line == 0 {
			cycle.Line = n.Line
		}
		return 0, cycle
	}
	return s, nil
}

// size returns the number of nodes n expands to through aliases, at most
// maxAliasNodes+1. Only anchored nodes, the ones aliases name, are
// remembered: the others are walked once per walk of their anchor.
func (a *aliasCheck) size(n *yaml.Node) (int, *Problem) {
	const visiting = -1 // an anchor whose expansion is under way
	if n.Anchor != "" {
		if s, ok := a.sizes[n]; ok {
			if s == visiting {
				return 0, &Problem{Msg: "an alias refers to a node that contains it"}
			}
			return s, nil
		}
		if a.sizes == nil {
			a.sizes = map[*yaml.Node]int{}
		}
		a.sizes[n] = visiting
	}
	total := 1
	for _, c := range n.Content {
		var s int
		var p *Problem
		if c.Kind == yaml.AliasNode {
			s, p = a.alias(c)
		} else {
			s, p = a.size(c)
		}
		if p != nil {
			return 0, p
		}
		if total += s; total > maxAliasNodes {
			total = maxAliasNodes + 1 // enough to fail: stop counting
			break
		}
	}
	if n.Anchor != "" {
		a.sizes[n] = total
	}
	return total, nil
}
