package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// rawDomain is one file's domain as written, checked field by field.
type rawDomain struct {
	name          string
	line          int
	leaf          bool   // match: leaf
	overLimitBody string // sent on OVER_LIMIT, {retry_after} filled in
	algorithm     limit.Algorithm
	calendar      fileCalendar // the file's calendar and time_zone
	charge        Charge       // the file's charge, else the default the reader was given
	list          *yaml.Node   // the descriptors, read once the algorithm is known
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

	charge    *Charge        // the node's own charge; nil: the file's
	regional  bool           // scope: region
	quotaMode bool           // over its limits, the descriptor is a quota
	metadata  map[string]any // sent in the dynamic metadata when it passes
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
	d := &rawDomain{line: root.Line, algorithm: r.algorithm, charge: r.charge, leaf: r.leaf}
	var buf fieldsBuf
	if _, ok := fileObject.read(r, root, nil, d, buf[:0]); !ok && d.list == nil {
		return nil
	}
	// rate_limit blocks take the file's algorithm and calendar, wherever
	// they are written.
	r.algorithm, r.calendar = d.algorithm, d.calendar
	r.checkFileCalendar(d.calendar)
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
			if !names[name] {
				r.unmatched = append(r.unmatched, unmatchedReplace{name, Problem{File: r.file, Line: x.l.replacesLines[i], Field: replacesField(x.n, x.l, i),
					Msg: fmt.Sprintf("no limit of this domain is named %q: it replaces nothing", clip(name))}})
			}
		}
	}
}

// unmatchedReplace is a replaces naming no limit of its file.
type unmatchedReplace struct {
	name    string
	warning Problem
}

// replacesField is the path of the name of item i of l's replaces.
func replacesField(n *rawNode, l *rawLimit, i int) string {
	if l.item >= 0 {
		return fmt.Sprintf("%s.limits[%d].rate_limit.replaces[%d].name", n.path(), l.item, i)
	}
	return fmt.Sprintf("%s.rate_limit.replaces[%d].name", n.path(), i)
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
		case m == "all":
			d.leaf = false
		default:
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
	fieldOf("calendar", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		var ok bool
		d.calendar.on, ok = r.boolean(f.value, p)
		return ok
	}),
	fieldOf("time_zone", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		var ok bool
		d.calendar.zoneKey = f.key
		d.calendar.zone, ok = r.timeZone(f.value, p)
		return ok
	}),
	fieldOf("charge", func(r *reader, f field, p *fieldPath, d *rawDomain) bool {
		var ok bool
		d.charge, ok = r.chargeField(f.value, p)
		return ok
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
