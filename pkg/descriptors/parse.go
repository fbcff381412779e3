package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// The fields each YAML mapping may have. The envoyproxy/ratelimit fields
// this service does not act on are accepted with a warning.
var (
	fileFields       = []string{"domain", "match", "over_limit_body", "descriptors"}
	descriptorFields = []string{"key", "value", "name", "leaky_bucket", "rate_limit", "shadow_mode", "descriptors",
		"detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "metadata"}
	leakyFields = []string{"size", "drip_rate", "drip_size"}
	rateFields  = []string{"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces"}
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
	descriptors   []*rawNode
}

// rawNode is one descriptor as written, checked field by field.
type rawNode struct {
	up    *rawNode // the descriptor it is nested in; nil at the top
	index int      // its place in its list
	line  int
	key   string
	value string // "" for any value
	name  string

	limit     *leaky.Limit
	rate      *leaky.Rate // the limit as written in rate_limit form, if it was
	unlimited bool
	replaces  []string // names of the limits this one replaces
	// replacesLines are the lines of the names in replaces.
	replacesLines []int

	shadow         bool
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
			r.errors = append(r.errors, Problem{File: r.file, Line: 1, Field: "domain", Msg: "is required: the file is empty"})
			return nil
		}
		r.errors = append(r.errors, yamlProblem(r.file, data, err))
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil: // a later document that is not YAML: its line
		r.errors = append(r.errors, yamlProblem(r.file, data, err))
		return nil
	default:
		r.errors = append(r.errors, Problem{File: r.file, Line: max(extra.Line, 1), Msg: "holds more than one YAML document: put each domain in its own file"})
		return nil
	}
	if len(doc.Content) == 0 {
		r.errors = append(r.errors, Problem{File: r.file, Line: max(doc.Line, 1), Field: "domain", Msg: "is required: the document is empty"})
		return nil
	}
	if p := checkAliases(doc.Content[0]); p != nil {
		p.File = r.file
		r.errors = append(r.errors, *p)
		return nil
	}
	root := deref(doc.Content[0])
	var buf [4]field // one per name of fileFields
	fields, ok := r.mapping(root, nil, fileFields, buf[:0])
	if !ok {
		return nil
	}
	d := &rawDomain{line: root.Line}
	hasDomain := false
	var top *fieldPath // the file itself
	for _, f := range fields {
		fp := top.field(f.name)
		switch f.name {
		case "domain":
			hasDomain = true
			d.line = f.value.Line
			if d.name, ok = r.text(f.value, &fp); ok && d.name == "" {
				r.errorf(f.value, &fp, "must not be empty")
			}
		case "match":
			var m string
			if m, ok = r.text(f.value, &fp); ok {
				switch m {
				case "all":
				case "leaf":
					d.leaf = true
				default:
					r.errorf(f.value, &fp, "%q: want all (every level on the path) or leaf (the deepest, as envoyproxy/ratelimit)", clip(m))
				}
			}
		case "over_limit_body":
			if d.overLimitBody, ok = r.text(f.value, &fp); ok {
				r.checkOverLimitBody(f.value, &fp, d.overLimitBody)
			}
		case "descriptors":
			d.descriptors = r.descriptorList(f.value, nil)
		}
	}
	if !hasDomain {
		fp := top.field("domain")
		r.errorf(root, &fp, "is required")
	}
	if r.hasReplaces {
		r.checkReplaces(d.descriptors)
	}
	return d
}

// checkReplaces warns of replaces that name no limit of the domain.
func (r *reader) checkReplaces(top []*rawNode) {
	names := map[string]bool{}
	var all []*rawNode
	var walk func([]*rawNode)
	walk = func(nodes []*rawNode) {
		for _, n := range nodes {
			if n.name != "" && n.limit != nil {
				names[n.name] = true
			}
			if len(n.replaces) > 0 {
				all = append(all, n)
			}
			walk(n.children)
		}
	}
	walk(top)
	for _, n := range all {
		for i, name := range n.replaces {
			if !names[name] && len(r.warnings) >= maxProblems {
				r.moreWarnings.add(n.replacesLines[i])
			} else if !names[name] {
				r.addWarning(Problem{Line: n.replacesLines[i], Field: replacesField(n, i),
					Msg: fmt.Sprintf("no limit of this domain is named %q: it replaces nothing", clip(name))})
			}
		}
	}
}

// replacesField is the path of the name of item i of n's replaces.
func replacesField(n *rawNode, i int) string {
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
	return nodes
}

func describeValue(v string) string {
	if v == "" {
		return "any value"
	}
	return fmt.Sprintf("value %q", clip(v))
}

// fieldsBuf holds the fields of one mapping: more than any mapping knows.
type fieldsBuf [16]field

// descriptor reads one descriptor mapping, item index of the list of up's
// children (nil: the file's list); nil if it is unusable.
func (r *reader) descriptor(n *yaml.Node, up *rawNode, index int) *rawNode {
	d := &rawNode{up: up, index: index, line: n.Line}
	p := &fieldPath{node: d}
	var buf fieldsBuf
	fields, ok := r.mapping(n, p, descriptorFields, buf[:0])
	if !ok {
		return nil
	}
	var leakyNode, rateNode *yaml.Node
	hasKey := false
	for _, f := range fields {
		fp := p.field(f.name)
		switch f.name {
		case "key":
			hasKey = true
			if d.key, ok = r.text(f.value, &fp); ok && d.key == "" {
				r.errorf(f.value, &fp, "must not be empty")
			}
		case "value":
			d.value, _ = r.text(f.value, &fp)
			if d.value == "*" {
				d.value = "" // "*" and no value both match any value
			}
		case "name":
			d.name, _ = r.text(f.value, &fp)
		case "leaky_bucket":
			leakyNode = f.value
			d.limit = r.leakyBucket(f.value, &fp)
		case "rate_limit":
			rateNode = f.value
			r.rateLimit(f.value, &fp, d)
		case "shadow_mode":
			d.shadow, _ = r.boolean(f.value, &fp)
		case "share_threshold":
			d.shareThreshold, _ = r.boolean(f.value, &fp)
		case "descriptors":
			d.children = r.descriptorList(f.value, d)
		case "detailed_metric":
			d.detailedMetric, _ = r.boolean(f.value, &fp)
		case "value_to_metric":
			d.valueToMetric, _ = r.boolean(f.value, &fp)
		case "quota_mode":
			if on, ok := r.boolean(f.value, &fp); ok && on {
				r.warnOnce(f.key, &fp, f.name, ignored[f.name])
			}
		case "metadata":
			r.warnOnce(f.key, &fp, f.name, ignored[f.name])
		}
	}
	if !hasKey {
		fp := p.field("key")
		r.errorf(n, &fp, "is required")
	}
	if leakyNode != nil && rateNode != nil {
		r.errorf(rateNode, p, "has both leaky_bucket (line %d) and rate_limit: give one", leakyNode.Line)
	}
	if d.limit != nil && d.name != "" {
		// Requests that reach this limit would drop it: it would never apply.
		for i, name := range d.replaces {
			if name == d.name {
				r.addError(Problem{Line: d.replacesLines[i], Field: replacesField(d, i),
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
	if d.shadow && d.limit == nil {
		fp := p.field("shadow_mode")
		r.warnf(n, &fp, "has no effect: the descriptor has no limit")
	}
	return d
}

func (r *reader) leakyBucket(n *yaml.Node, p *fieldPath) *leaky.Limit {
	var buf fieldsBuf
	fields, ok := r.mapping(n, p, leakyFields, buf[:0])
	if !ok {
		return nil
	}
	l := leaky.Limit{DripSize: 1}
	valid, hasSize, hasRate := true, false, false
	for _, f := range fields {
		fp := p.field(f.name)
		switch f.name {
		case "size":
			hasSize = true
			l.Size, ok = r.integer(f.value, &fp, 0, leaky.MaxSize)
		case "drip_rate":
			hasRate = true
			if l.DripRate, ok = r.duration(f.value, &fp); ok {
				if err := leaky.CheckDripRate(l.DripRate); err != nil {
					r.errorf(f.value, &fp, "%s", strings.TrimPrefix(err.Error(), "drip_rate "))
					ok = false
				}
			}
		case "drip_size":
			l.DripSize, ok = r.integer(f.value, &fp, 1, leaky.MaxSize)
		}
		valid = valid && ok
	}
	if !hasSize {
		fp := p.field("size")
		r.errorf(n, &fp, "is required")
		valid = false
	}
	if !hasRate {
		fp := p.field("drip_rate")
		r.errorf(n, &fp, "is required")
		valid = false
	}
	if !valid {
		return nil
	}
	return &l
}

// rateLimit reads envoyproxy/ratelimit's rate_limit block into d.
func (r *reader) rateLimit(n *yaml.Node, p *fieldPath, d *rawNode) {
	var buf fieldsBuf
	fields, ok := r.mapping(n, p, rateFields, buf[:0])
	if !ok {
		return
	}
	var (
		rate           leaky.Rate
		unitNode       *yaml.Node
		hasRPU, valid  = false, true
		unlimitedField *yaml.Node
	)
	for _, f := range fields {
		fp := p.field(f.name)
		switch f.name {
		case "unit":
			unitNode = f.value
			var s string
			if s, ok = r.text(f.value, &fp); ok {
				if rate.Unit, ok = parseUnit(s); !ok {
					r.errorf(f.value, &fp, "unknown unit %q (want second, minute, hour, day, week, month or year)", clip(s))
				}
			}
		case "requests_per_unit":
			hasRPU = true
			var v int64
			v, ok = r.integer(f.value, &fp, 0, math.MaxUint32)
			rate.RequestsPerUnit = uint32(v)
		case "unit_multiplier":
			var v int64
			v, ok = r.integer(f.value, &fp, 1, math.MaxUint32)
			rate.Multiplier = uint32(v)
		case "unlimited":
			unlimitedField = f.key
			d.unlimited, ok = r.boolean(f.value, &fp)
		case "name":
			var name string
			if name, ok = r.text(f.value, &fp); ok && name != "" {
				if d.name != "" && d.name != name {
					r.errorf(f.value, &fp, "is %q but the descriptor's name is %q: give one name", clip(name), clip(d.name))
				}
				d.name = name
			}
		case "replaces":
			ok = r.replaces(f.value, &fp, d)
		}
		valid = valid && ok
	}
	switch {
	case d.unlimited:
		if unitNode != nil || hasRPU {
			fp := p.field("unlimited")
			r.errorf(unlimitedField, &fp, "cannot be combined with unit or requests_per_unit")
		}
		return
	case unitNode == nil:
		fp := p.field("unit")
		r.errorf(n, &fp, "is required (or set unlimited: true)")
		return
	case !hasRPU:
		// envoyproxy/ratelimit reads a missing requests_per_unit as 0.
		fp := p.field("requests_per_unit")
		r.warnf(n, &fp, "is missing: read as 0, which rejects every request, as envoyproxy/ratelimit does")
	case !valid:
		return
	}
	l := rate.Limit()
	d.limit, d.rate = &l, &rate
}

// limitBelow reports whether any of nodes or their descendants has a limit.
func limitBelow(nodes []*rawNode) bool {
	for _, n := range nodes {
		if n.limit != nil || limitBelow(n.children) {
			return true
		}
	}
	return false
}

func parseUnit(s string) (leaky.Unit, bool) {
	u, err := leaky.ParseUnit(s)
	return u, err == nil
}

var replacesFields = []string{"name"}

// replaces reads envoyproxy/ratelimit's replaces list, [{name: ...}], into
// d's replaces, with the names' lines.
func (r *reader) replaces(n *yaml.Node, p *fieldPath, d *rawNode) bool {
	items, ok := r.sequence(n, p)
	for i, item := range items {
		ip := p.item(i)
		var buf fieldsBuf
		fields, mok := r.mapping(item, &ip, replacesFields, buf[:0])
		ok = ok && mok
		if mok && len(fields) == 0 {
			fp := ip.field("name")
			r.errorf(deref(item), &fp, "is required")
			ok = false
		}
		for _, f := range fields {
			fp := ip.field(f.name)
			name, tok := r.text(f.value, &fp)
			if tok && name == "" {
				r.errorf(f.value, &fp, "must not be empty")
				tok = false
			}
			d.replaces = append(d.replaces, name)
			d.replacesLines = append(d.replacesLines, f.value.Line)
			r.hasReplaces = true
			ok = ok && tok
		}
	}
	return ok
}

// maxOverLimitBody bounds over_limit_body: a message for a client, not a
// page.
const maxOverLimitBody = 4096

// checkOverLimitBody reports a body too long, or holding a placeholder
// other than {retry_after} (a misspelt one would reach clients as written).
func (r *reader) checkOverLimitBody(n *yaml.Node, p *fieldPath, body string) {
	if len(body) > maxOverLimitBody {
		r.errorf(n, p, "is %d bytes: at most %d allowed", len(body), maxOverLimitBody)
		return
	}
	for rest := body; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return
		}
		rest = rest[i:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return
		}
		if name := rest[:j+1]; name != OverLimitBodyRetryAfter {
			r.errorf(n, p, "has the placeholder %s: the only one is %s (whole seconds until a retry can pass)", clip(name), OverLimitBodyRetryAfter)
			return
		}
		rest = rest[j+1:]
	}
}
