package descriptors

// Match says how a node of the tree matched a request's entry.
type Match uint8

const (
	// Exact is a node whose value is the entry's value.
	Exact Match = iota
	// Wildcard is a node whose value is a pattern with '*' that the
	// entry's value matches.
	Wildcard
	// AnyValue is a node without a value: every value matches.
	AnyValue
)

var matchNames = [...]string{Exact: "exact", Wildcard: "wildcard", AnyValue: "any value"}

// String returns "exact", "wildcard" or "any value".
func (m Match) String() string {
	if int(m) < len(matchNames) {
		return matchNames[m]
	}
	return "unknown"
}

// Why a limit on the walk is not checked.
const (
	// SkipLeaf: the domain says match: leaf, and the node is not the one
	// that matched the descriptor's last entry.
	SkipLeaf = "match: leaf"
	// SkipUnlimited: a node on the walk has rate_limit {unlimited: true}.
	SkipUnlimited = "unlimited"
	// SkipOverride: a limit sent by Envoy with the descriptor takes the
	// deepest level's place.
	SkipOverride = "limit sent by Envoy"
)

// Walk is how Resolve turned one request descriptor into levels: every
// node the walk reached, in order, what became of each node's limits, and
// the levels themselves. Explain records it on the same code path Resolve
// runs, so the two cannot disagree.
type Walk struct {
	// Steps are the nodes the walk reached, one per entry matched, from
	// the top.
	Steps []Step
	// Unmatched is the index of the first entry no node matched, where the
	// walk stopped; -1 when every entry matched.
	Unmatched int
	// Unlimited reports that the descriptor is allow-listed: no level.
	Unlimited bool
	// Levels are what Resolve returns, in its order.
	Levels []Level
	// Override is the index in Levels of the limit sent by Envoy, or -1.
	Override int
	// Replaced is the index in Steps of the node whose limits the override
	// took the place of, or -1: an override on a walk without limits is
	// its only level, keyed by all of the descriptor's entries.
	Replaced int
}

// Step is one node of a walk.
type Step struct {
	// Entry is the index of the request entry the node matched.
	Entry int
	// Key and Value are the node as written; Value is "" for any value.
	Key, Value string
	// Path is the node's place in its domain, e.g. "user/action=trade".
	Path string
	// File is the file the node is in: the domain's File, or with files
	// merged (Options.MergeDomains), the one of its top-level descriptor.
	File string
	// Line is the node's line in File; 0 if not known.
	Line int
	// Match is how the node matched the entry.
	Match Match
	// Unlimited reports that the node is rate_limit {unlimited: true}.
	Unlimited bool
	// Limits are the node's limits, in file order.
	Limits []StepLimit
}

// StepLimit is one limit of a node on the walk, and what became of it.
type StepLimit struct {
	Rule *Rule
	// Level is the index in Walk.Levels of its level; -1 when skipped.
	Level int
	// Skipped says why it is not checked (SkipLeaf, SkipUnlimited,
	// SkipOverride); "" when it is.
	Skipped string
}

// Explain is Resolve, recording how each level came about: see Walk. It
// allocates; Resolve is for requests.
func (d *Domain) Explain(entries []Entry, override *Rule) Walk {
	w := Walk{Unmatched: -1, Override: -1, Replaced: -1}
	w.Levels = d.resolve(entries, override, nil, &w)
	return w
}

// steps records the nodes of a walk, each limit skipped until resolve
// gives it a level.
func (w *Walk) steps(d *Domain, entries []Entry, nodes []*node, first int, unlimited bool) {
	if len(nodes) < len(entries) {
		w.Unmatched = len(nodes)
	}
	w.Unlimited = unlimited
	path, file := "", d.File
	if len(nodes) > 0 {
		file = d.fileOf(nodes[0])
	}
	for i, n := range nodes {
		path = joinPath(path, n.key, n.value)
		st := Step{Entry: i, Key: n.key, Value: n.value, Path: path, File: file, Line: int(n.line), Match: n.match(), Unlimited: n.unlimited}
		why := ""
		switch {
		case i < first:
			why = SkipLeaf
		case unlimited:
			why = SkipUnlimited
		}
		for _, r := range n.rules {
			st.Limits = append(st.Limits, StepLimit{Rule: r, Level: -1, Skipped: why})
		}
		w.Steps = append(w.Steps, st)
	}
}

// replaced records that the override, at level, took the place of step i's
// limits.
func (w *Walk) replaced(i, level int) {
	w.Override, w.Replaced = level, i
	for j := range w.Steps[i].Limits {
		w.Steps[i].Limits[j].Skipped = SkipOverride
	}
}

// match says how the node matches the values it matches.
func (n *node) match() Match {
	switch {
	case n.parts != nil:
		return Wildcard
	case n.value == "":
		return AnyValue
	}
	return Exact
}
