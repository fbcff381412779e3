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
	fileFields       = []string{"domain", "match", "descriptors"}
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
	name        string
	line        int
	leaf        bool // match: leaf
	descriptors []*rawNode
}

// rawNode is one descriptor as written, checked field by field.
type rawNode struct {
	line  int
	path  string // YAML path, e.g. descriptors[0].descriptors[1]
	key   string
	value string // "" for any value
	name  string

	limit     *leaky.Limit
	rate      *leaky.Rate // the limit as written in rate_limit form, if it was
	unlimited bool
	replaces  []string // names of the limits this one replaces

	shadow         bool
	shareThreshold bool
	detailedMetric bool // metrics of this limit show the request's values
	valueToMetric  bool // metrics below show this level's value
	children       []*rawNode
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
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		r.errors = append(r.errors, Problem{File: r.file, Line: extra.Line, Msg: "holds more than one YAML document: put each domain in its own file"})
		return nil
	}
	if err := checkAliases(doc.Content[0]); err != nil {
		r.errors = append(r.errors, *err)
		r.errors[len(r.errors)-1].File = r.file
		return nil
	}
	root := deref(doc.Content[0])
	fields, ok := r.mapping(root, "", fileFields)
	if !ok {
		return nil
	}
	d := &rawDomain{line: root.Line}
	hasDomain := false
	for _, f := range fields {
		switch f.name {
		case "domain":
			hasDomain = true
			d.line = f.value.Line
			if d.name, ok = r.text(f.value, "domain"); ok && d.name == "" {
				r.errorf(f.value, "domain", "must not be empty")
			}
		case "match":
			var m string
			if m, ok = r.text(f.value, "match"); ok {
				switch m {
				case "all":
				case "leaf":
					d.leaf = true
				default:
					r.errorf(f.value, "match", "%q: want all (every level on the path) or leaf (the deepest, as envoyproxy/ratelimit)", m)
				}
			}
		case "descriptors":
			d.descriptors = r.descriptorList(f.value, "descriptors")
		}
	}
	if !hasDomain {
		r.errorf(root, "domain", "is required")
	}
	r.checkReplaces(d.descriptors)
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
			all = append(all, n)
			walk(n.children)
		}
	}
	walk(top)
	for _, n := range all {
		for _, name := range n.replaces {
			if !names[name] {
				r.warnings = append(r.warnings, Problem{File: r.file, Line: n.line, Field: join(n.path, "rate_limit.replaces"),
					Msg: fmt.Sprintf("no limit of this domain is named %q: it replaces nothing", name)})
			}
		}
	}
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

// maxExpandedNodes bounds the nodes a file may expand to through aliases,
// against "billion laughs" files.
const maxExpandedNodes = 1_000_000

// checkAliases rejects an alias to a node that contains it (which would make
// the walk endless) and aliases that expand to too many nodes.
func checkAliases(root *yaml.Node) *Problem {
	const visiting = -1 // a node whose expansion is under way
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node) (int, *Problem)
	size = func(n *yaml.Node) (int, *Problem) {
		if s, ok := sizes[n]; ok {
			if s == visiting {
				return 0, &Problem{Line: n.Line, Msg: "an alias refers to a node that contains it"}
			}
			return s, nil
		}
		sizes[n] = visiting
		total := 1
		children := n.Content
		if n.Kind == yaml.AliasNode {
			children = []*yaml.Node{n.Alias}
		}
		for _, c := range children {
			s, p := size(c)
			if p != nil {
				if n.Kind == yaml.AliasNode {
					p.Line = n.Line
				}
				return 0, p
			}
			total += s
			if total > maxExpandedNodes {
				return 0, &Problem{Line: n.Line, Msg: fmt.Sprintf("aliases expand to more than %d nodes", maxExpandedNodes)}
			}
		}
		sizes[n] = total
		return total, nil
	}
	_, p := size(root)
	return p
}

// descriptorList reads a list of descriptors and reports siblings that
// match the same key and value.
func (r *reader) descriptorList(n *yaml.Node, path string) []*rawNode {
	items, ok := r.sequence(n, path)
	if !ok {
		return nil
	}
	nodes := make([]*rawNode, 0, len(items))
	seen := map[[2]string]int{}
	for i, item := range items {
		d := r.descriptor(item, fmt.Sprintf("%s[%d]", path, i))
		if d == nil {
			continue
		}
		id := [2]string{d.key, d.value}
		if first, dup := seen[id]; dup {
			r.errorf(item, d.path, "duplicate descriptor: key %q with %s is already defined on line %d", d.key, describeValue(d.value), first)
			continue
		}
		seen[id] = d.line
		nodes = append(nodes, d)
	}
	return nodes
}

func describeValue(v string) string {
	if v == "" {
		return "any value"
	}
	return fmt.Sprintf("value %q", v)
}

// descriptor reads one descriptor mapping; nil if it is unusable.
func (r *reader) descriptor(n *yaml.Node, path string) *rawNode {
	fields, ok := r.mapping(n, path, descriptorFields)
	if !ok {
		return nil
	}
	d := &rawNode{line: n.Line, path: path}
	var leakyNode, rateNode *yaml.Node
	hasKey := false
	for _, f := range fields {
		fp := join(path, f.name)
		switch f.name {
		case "key":
			hasKey = true
			if d.key, ok = r.text(f.value, fp); ok && d.key == "" {
				r.errorf(f.value, fp, "must not be empty")
			}
		case "value":
			d.value, _ = r.text(f.value, fp)
			if d.value == "*" {
				d.value = "" // "*" and no value both match any value
			}
		case "name":
			d.name, _ = r.text(f.value, fp)
		case "leaky_bucket":
			leakyNode = f.value
			d.limit = r.leakyBucket(f.value, fp)
		case "rate_limit":
			rateNode = f.value
			r.rateLimit(f.value, fp, d)
		case "shadow_mode":
			d.shadow, _ = r.boolean(f.value, fp)
		case "share_threshold":
			d.shareThreshold, _ = r.boolean(f.value, fp)
		case "descriptors":
			d.children = r.descriptorList(f.value, fp)
		case "detailed_metric":
			d.detailedMetric, _ = r.boolean(f.value, fp)
		case "value_to_metric":
			d.valueToMetric, _ = r.boolean(f.value, fp)
		case "quota_mode":
			if on, ok := r.boolean(f.value, fp); ok && on {
				r.warnOnce(f.key, fp, f.name, ignored[f.name])
			}
		case "metadata":
			r.warnOnce(f.key, fp, f.name, ignored[f.name])
		}
	}
	if !hasKey {
		r.errorf(n, join(path, "key"), "is required")
	}
	if leakyNode != nil && rateNode != nil {
		r.errorf(rateNode, path, "has both leaky_bucket (line %d) and rate_limit: give one", leakyNode.Line)
	}
	if d.shareThreshold && !strings.Contains(d.value, "*") {
		r.warnf(n, join(path, "share_threshold"), "has no effect: value %q has no '*' wildcard", d.value)
	}
	if d.unlimited && limitBelow(d.children) {
		r.warnf(n, path, "the limits below this unlimited descriptor never apply: a descriptor that reaches it is not limited")
	}
	if d.shadow && d.limit == nil {
		r.warnf(n, join(path, "shadow_mode"), "has no effect: the descriptor has no limit")
	}
	return d
}

func (r *reader) leakyBucket(n *yaml.Node, path string) *leaky.Limit {
	fields, ok := r.mapping(n, path, leakyFields)
	if !ok {
		return nil
	}
	l := leaky.Limit{DripSize: 1}
	valid, has := true, map[string]bool{}
	for _, f := range fields {
		fp := join(path, f.name)
		has[f.name] = true
		switch f.name {
		case "size":
			l.Size, ok = r.integer(f.value, fp, 0, leaky.MaxSize)
		case "drip_rate":
			if l.DripRate, ok = r.duration(f.value, fp); ok {
				if err := leaky.CheckDripRate(l.DripRate); err != nil {
					r.errorf(f.value, fp, "%s", strings.TrimPrefix(err.Error(), "drip_rate "))
					ok = false
				}
			}
		case "drip_size":
			l.DripSize, ok = r.integer(f.value, fp, 1, leaky.MaxSize)
		}
		valid = valid && ok
	}
	for _, req := range []string{"size", "drip_rate"} {
		if !has[req] {
			r.errorf(n, join(path, req), "is required")
			valid = false
		}
	}
	if !valid {
		return nil
	}
	return &l
}

// rateLimit reads envoyproxy/ratelimit's rate_limit block into d.
func (r *reader) rateLimit(n *yaml.Node, path string, d *rawNode) {
	fields, ok := r.mapping(n, path, rateFields)
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
		fp := join(path, f.name)
		switch f.name {
		case "unit":
			unitNode = f.value
			var s string
			if s, ok = r.text(f.value, fp); ok {
				if rate.Unit, ok = parseUnit(s); !ok {
					r.errorf(f.value, fp, "unknown unit %q (want second, minute, hour, day, week, month or year)", s)
				}
			}
		case "requests_per_unit":
			hasRPU = true
			var v int64
			v, ok = r.integer(f.value, fp, 0, math.MaxUint32)
			rate.RequestsPerUnit = uint32(v)
		case "unit_multiplier":
			var v int64
			v, ok = r.integer(f.value, fp, 1, math.MaxUint32)
			rate.Multiplier = uint32(v)
		case "unlimited":
			unlimitedField = f.key
			d.unlimited, ok = r.boolean(f.value, fp)
		case "name":
			var name string
			if name, ok = r.text(f.value, fp); ok && name != "" {
				if d.name != "" && d.name != name {
					r.errorf(f.value, fp, "is %q but the descriptor's name is %q: give one name", name, d.name)
				}
				d.name = name
			}
		case "replaces":
			d.replaces, ok = r.replaces(f.value, fp)
		}
		valid = valid && ok
	}
	switch {
	case d.unlimited:
		if unitNode != nil || hasRPU {
			r.errorf(unlimitedField, join(path, "unlimited"), "cannot be combined with unit or requests_per_unit")
		}
		return
	case unitNode == nil:
		r.errorf(n, join(path, "unit"), "is required (or set unlimited: true)")
		return
	case !hasRPU:
		// envoyproxy/ratelimit reads a missing requests_per_unit as 0.
		r.warnf(n, join(path, "requests_per_unit"), "is missing: read as 0, which rejects every request, as envoyproxy/ratelimit does")
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

// replaces reads envoyproxy/ratelimit's replaces list: [{name: ...}].
func (r *reader) replaces(n *yaml.Node, path string) ([]string, bool) {
	items, ok := r.sequence(n, path)
	var names []string
	for i, item := range items {
		fp := fmt.Sprintf("%s[%d]", path, i)
		fields, mok := r.mapping(item, fp, []string{"name"})
		ok = ok && mok
		if mok && len(fields) == 0 {
			r.errorf(item, join(fp, "name"), "is required")
			ok = false
		}
		for _, f := range fields {
			name, tok := r.text(f.value, join(fp, f.name))
			if tok && name == "" {
				r.errorf(f.value, join(fp, f.name), "must not be empty")
				tok = false
			}
			names = append(names, name)
			ok = ok && tok
		}
	}
	return names, ok
}
