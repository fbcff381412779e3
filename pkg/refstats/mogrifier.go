package refstats

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Mogrifier rewrites a stat's name into a name and tags for DogStatsD,
// as the reference's mogrifiers do (USE_DOG_STATSD_MOGRIFIERS): when its
// pattern matches the name, the stat is sent under its name template,
// with its tag templates. In a template, $0, $1, ... stand for the
// pattern's match and its groups; a $n past the last group stays as it
// is written.
type Mogrifier struct {
	pattern *regexp.Regexp
	name    string
	tags    []mogrifierTag // in the order given
}

type mogrifierTag struct{ key, value string }

// NewMogrifier compiles a mogrifier: a regular expression, a name
// template, and tag templates as "key:value,key2:value2" (may be "").
func NewMogrifier(pattern, name, tags string) (Mogrifier, error) {
	if pattern == "" {
		return Mogrifier{}, errors.New("no pattern")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	if name == "" {
		return Mogrifier{}, errors.New("no name")
	}
	m := Mogrifier{pattern: re, name: name}
	if strings.TrimSpace(tags) == "" {
		return m, nil
	}
	for _, pair := range strings.Split(tags, ",") {
		parts := strings.Split(pair, ":")
		switch {
		case len(parts) != 2:
			return Mogrifier{}, fmt.Errorf("tag %q: want key:value", pair)
		case parts[0] == "":
			return Mogrifier{}, fmt.Errorf("tag %q: no key", pair)
		case parts[1] == "":
			return Mogrifier{}, fmt.Errorf("tag %q: no value", pair)
		}
		m.tags = append(m.tags, mogrifierTag{parts[0], parts[1]})
	}
	return m, nil
}

// placeholder is a template's $n.
var placeholder = regexp.MustCompile(`\$\d+`)

// expand replaces each $n of template by the nth of matches.
func expand(template string, matches []string) string {
	return placeholder.ReplaceAllStringFunc(template, func(p string) string {
		i, err := strconv.Atoi(p[1:])
		if err != nil || i >= len(matches) {
			return p
		}
		return matches[i]
	})
}

// Mogrifiers are tried in order: the first whose pattern matches rewrites
// the name; none matching leaves it as it is.
type Mogrifiers []Mogrifier

// Apply returns the name a stat is sent under, and the tags the
// mogrifier adds (as "key:value").
func (ms Mogrifiers) Apply(name string) (string, []string) {
	for _, m := range ms {
		matches := m.pattern.FindStringSubmatch(name)
		if matches == nil {
			continue
		}
		tags := make([]string, len(m.tags))
		for i, t := range m.tags {
			tags[i] = t.key + ":" + expand(t.value, matches)
		}
		return expand(m.name, matches), tags
	}
	return name, nil
}
