package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// ignored explains, per accepted field that has no effect, why.
var ignored = map[string]string{
	"quota_mode": "is accepted for compatibility with envoyproxy/ratelimit and has no effect: quota mode is not supported",
	"metadata":   "is accepted for compatibility with envoyproxy/ratelimit and has no effect: descriptor metadata is not sent",
}

// rawDomain is one file's domain as written, checked field by field.
type rawDomain struct {
	name          string
	line          int
	leaf          bool   // match: leaf
	overLimitBody string // sent on OVER_LIMIT, {retry_after} filled in
	algorithm     limit.Algorithm
	list          *yaml.Node // the descriptors, read once the algorithm is known
	descriptors   []*rawNode
}

// rawNode is one descriptor as written, checked field by field.
type rawNode struct {
	up    *rawNode // the descriptor it is nested in; nil at the top
	index int      // its place in its list
	line  int
	key   string
	value string // "" for any value

	one       limitReading // the one-limit form's fields
	list      *yaml.Node   // the limits field, if given
	limits    []*rawLimit  // the one limit, or the items of limits
	unlimited bool

	shareThreshold bool
	detailedMetric bool // metrics of this limit show the request's values
	valueToMetric  bool // metrics below show this level's value
	children       []*rawNode
}

// path returns the descriptor's place in its file, e.g.
// descriptors[0].descriptors[1]; it is made only for a problem.
func (n *rawNode) path() string { return string(n.appendPath(nil)) }

func (n *rawNode) appendPath(b []byte) []byte {
	if n.up != nil {
		b = append(n.up.appendPath(b), '.')
	}
	b = append(b, "descriptors["...)
	b = strconv.AppendInt(b, int64(n.index), 10)
	return append(b, ']')
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// parseFile reads one config file. It returns nil when the file has errors,
// which the reader holds with the warnings.
func parseFile(r *reader, data []byte) *rawDomain {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			r.addError(Problem{Line: 1, Field: "domain", Msg: "is required: the file is empty"})
			return nil
		}
		r.addError(yamlProblem(r.file, data, err))
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil: // a later document that is not YAML: its line
		r.addError(yamlProblem(r.file, data, err))
		return nil
	default:
		r.addError(Problem{Line: max(extra.Line, 1), Msg: "holds more than one YAML document: put each domain in its own file"})
		return nil
	}
	if len(doc.Content) == 0 {
		r.addError(Problem{Line: max(doc.Line, 1), Field: "domain", Msg: "is required: the document is empty"})
		return nil
	}
	if p := checkAliases(doc.Content[0]); p != nil {
		p.File = r.file
		r.addError(*p)
		return nil
	}
	root := deref(doc.Content[0])
	d := &rawDomain{line: root.Line, algorithm: r.algorithm}
	var buf fieldsBuf
	if _, ok := fileObject.read(r, root, nil, d, buf[:0]); !ok && d.list == nil {
		return nil
	}
	// rate_limit blocks take the file's algorithm, wherever it is written.
	r.algorithm = d.algorithm
	if d.list != nil {
		d.descriptors = r.descriptorList(d.list, nil)
	}
	if r.hasReplaces {
		r.checkReplaces(d.descriptors)
	}
	return d
}

// checkReplaces warns of replaces that name no limit of the domain.
func (r *reader) checkReplaces(top []*rawNode) {
	names := map[string]bool{}
	type replacing struct {
		n *rawNode
		l *rawLimit
	}
	var all []replacing
	var walk func([]*rawNode)
	walk = func(nodes []*rawNode) {
		for _, n := range nodes {
			for _, l := range n.limits {
				if l.name != "" {
					names[l.name] = true
				}
				if len(l.replaces) > 0 {
					all = append(all, replacing{n, l})
				}
			}
			walk(n.children)
		}
	}
	walk(top)
	for _, x := range all {
		for i, name := range x.l.replaces {
			if !names[name] && !r.warnings.full(x.l.replacesLines[i]) {
				r.addWarning(Problem{Line: x.l.replacesLines[i], Field: replacesField(x.n, x.l, i),
					Msg: fmt.Sprintf("no limit of this domain is named %q: it replaces nothing", clip(name))})
			}
		}
	}
}

// replacesField is the path of the name of item i of l's replaces.
func replacesField(n *rawNode, l *rawLimit, i int) string {
	if l.item >= 0 {
		return fmt.Sprintf("%s.limits[%d].rate_limit.replaces[%d].name", n.path(), l.item, i)
	}
	return fmt.Sprintf("%s.rate_limit.replaces[%d].name", n.path(), i)
}

// yamlProblem turns a YAML syntax error into a Problem with its line: the
// one YAML names, else the line of the first control character (which YAML
// refuses without saying where), else line 1.
func yamlProblem(file string, data []byte, err error) Problem {
	msg := err.Error()
	p := Problem{File: file, Line: 1, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Msg = "invalid YAML: " + msg[len(m[0]):]
	} else if i := bytes.IndexFunc(data, isControl); i >= 0 {
		p.Line = 1 + bytes.Count(data[:i], []byte("\n"))
	}
	return p
}

func isControl(r rune) bool {
	return (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f
}

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

// fieldsBuf holds the fields of one mapping: more than any mapping knows.
type fieldsBuf [16]field

// fileObject is a file's fields.
var fileObject = newObject(
	requiredField("domain", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		var ok bool
		d.line = f.value.Line
		if d.name, ok = r.text(f.value, p); ok && d.name == "" {
			r.errorf(f.value, p, "must not be empty")
			return false
		}
		return ok
	}),
	fieldOf("match", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		m, ok := r.text(f.value, p)
		switch {
		case !ok:
		case m == "leaf":
			d.leaf = true
		case m != "all":
			r.errorf(f.value, p, "%q: want all (every level on the path) or leaf (the deepest, as envoyproxy/ratelimit)", clip(m))
			return false
		}
		return ok
	}),
	fieldOf("rate_limit_algorithm", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		s, ok := r.text(f.value, p)
		if !ok {
			return false
		}
		a, err := limit.ParseAlgorithm(s)
		if err != nil {
			r.errorf(f.value, p, "%q: want leaky_bucket, sliding_window or fixed_window (what each rate_limit of the file becomes)", clip(s))
			return false
		}
		d.algorithm = a
		return true
	}),
	fieldOf("over_limit_body", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		var ok bool
		if d.overLimitBody, ok = r.text(f.value, p); ok {
			ok = r.checkOverLimitBody(f.value, p, d.overLimitBody)
		}
		return ok
	}),
	fieldOf("descriptors", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		d.list = f.value
		return true
	}),
)

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
		fieldOf("quota_mode", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			on, ok := r.boolean(f.value, p)
			if ok && on {
				r.warnOnce(f.key, p, f.name, ignored[f.name])
			}
			return ok
		}),
		fieldOf("metadata", func(r *reader, f field, p *fieldPath, d *rawNode) bool {
			r.warnOnce(f.key, p, f.name, ignored[f.name])
			return true
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
	if d.one.shadow && len(d.limits) == 0 && !d.unlimited {
		fp := p.field("shadow_mode")
		r.warnf(n, &fp, "has no effect: the descriptor has no limit")
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

// maxOverLimitBody bounds over_limit_body: a message for a client, not a
// page.
const maxOverLimitBody = 4096

// checkOverLimitBody reports a body too long, or holding a placeholder
// other than {retry_after} (a misspelt one would reach clients as written).
func (r *reader) checkOverLimitBody(n *yaml.Node, p *fieldPath, body string) bool {
	if len(body) > maxOverLimitBody {
		r.errorf(n, p, "is %d bytes: at most %d allowed", len(body), maxOverLimitBody)
		return false
	}
	for rest := body; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return true
		}
		rest = rest[i:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return true
		}
		if name := rest[:j+1]; name != OverLimitBodyRetryAfter {
			r.errorf(n, p, "has the placeholder %s: the only one is %s (whole seconds until a retry can pass)", clip(name), OverLimitBodyRetryAfter)
			return false
		}
		rest = rest[j+1:]
	}
}
