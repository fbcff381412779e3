package descriptors

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Config is a loaded, validated configuration: one Domain per file, or per
// set of files with Options.MergeDomains. It is immutable and safe for
// concurrent use.
type Config struct {
	domains map[string]*Domain
	files   []string
	digest  string
}

// Digest identifies the files the config was made from, names and
// contents: two configs with the same digest are the same.
func (c *Config) Digest() string { return c.digest }

// Domain returns the named domain, or nil if no file defines it.
func (c *Config) Domain(name string) *Domain {
	return c.domains[name]
}

// Domains returns every domain, sorted by name.
func (c *Config) Domains() []*Domain {
	ds := make([]*Domain, 0, len(c.domains))
	for _, d := range c.domains {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b *Domain) int { return strings.Compare(a.Name, b.Name) })
	return ds
}

// Files returns the files the config was loaded from, in load order.
func (c *Config) Files() []string { return c.files }

// Load reads a config file, or every *.yaml and *.yml file of a directory
// (not its subdirectories, nor files whose name starts with a dot, such as
// a Kubernetes ConfigMap's ..data), validates it all and compiles it.
//
// It returns the warnings (fields accepted but without effect, settings that
// do nothing) in every case, and an *Error listing every problem when the
// config is invalid.
func Load(path string) (*Config, []Problem, error) { return Options{}.Load(path) }

// Options say how config files are read. The zero value reads them as
// Load does.
type Options struct {
	// RateLimitAlgorithm is what each rate_limit block becomes in a file
	// without rate_limit_algorithm; the zero value is the leaky bucket.
	RateLimitAlgorithm limit.Algorithm
	// Charge is when the limits of a file without charge are charged; the
	// zero value charges admitted requests only.
	Charge Charge
	// Leaf makes a file without match apply only the deepest matching
	// limit (match: leaf, as envoyproxy/ratelimit) instead of every level.
	Leaf bool
	// MergeDomains lets several files define one domain, each adding its
	// top-level descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG);
	// without it a domain in two files is an error. See merge.go for what
	// collides.
	MergeDomains bool
	// DotFiles makes Load read the files of a directory whose name starts
	// with a dot, as envoyproxy/ratelimit does unless
	// RUNTIME_IGNOREDOTFILES is set. Names starting with two dots are
	// skipped still: a Kubernetes volume's own entries (..data,
	// ..2024_01_01_00_00_00.1234) are named so, and are no config.
	DotFiles bool
	// Check, if set, is asked about the config once it is compiled: what
	// it returns are errors, as the files' own (a store that cannot count
	// some limits as the config states them, say).
	Check func(*Config) []Problem
}

// Load is Load with these options.
func (o Options) Load(path string) (*Config, []Problem, error) {
	files, err := o.configFiles(path)
	if err != nil {
		return nil, nil, err
	}
	sources := make([]Source, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("reading config: %w", err)
		}
		sources[i] = Source{Name: f, Data: data}
	}
	return o.Parse(sources...)
}

// Source is one config file's name and content.
type Source struct {
	Name string
	Data []byte
}

// Parse validates and compiles config files already read, as Load does.
func Parse(sources ...Source) (*Config, []Problem, error) { return Options{}.Parse(sources...) }

// Parse is Parse with these options.
func (o Options) Parse(sources ...Source) (*Config, []Problem, error) {
	c := &Config{domains: map[string]*Domain{}}
	var errs, warnings []Problem
	firstLine := map[string]int{}
	unmatched := map[string][]unmatchedReplace{} // by domain
	for _, src := range sources {
		r := &reader{file: src.Name, algorithm: o.RateLimitAlgorithm, charge: o.Charge, leaf: o.Leaf}
		raw := parseFile(r, src.Data)
		r.finish()
		warnings = append(warnings, r.warnings.list...)
		if len(r.errors.list) > 0 {
			errs = append(errs, r.errors.list...)
			continue
		}
		unmatched[raw.name] = append(unmatched[raw.name], r.unmatched...)
		prev, dup := c.domains[raw.name]
		if dup && !o.MergeDomains {
			errs = append(errs, Problem{File: src.Name, Line: raw.line, Field: "domain",
				Msg: fmt.Sprintf("%q is already defined in %s:%d (one file per domain, unless the files of a domain are merged: -merge-domains, envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)", clip(raw.name), prev.File, firstLine[raw.name])})
			continue
		}
		if len(raw.descriptors) == 0 && !dup {
			warnings = append(warnings, Problem{File: src.Name, Line: raw.line, Field: "descriptors",
				Msg: fmt.Sprintf("domain %q has no descriptors: every request for it is allowed", clip(raw.name))})
		}
		d, p := compile(src.Name, raw, compileBudget(len(src.Data)))
		if p != nil {
			errs = append(errs, *p)
			continue
		}
		if dup {
			var ps []Problem
			if d, ps = merge(prev, d, raw.line); ps != nil {
				errs = append(errs, ps...)
				continue
			}
		} else {
			firstLine[raw.name] = raw.line
		}
		c.domains[raw.name] = d
		c.files = append(c.files, src.Name)
	}
	warnings = append(warnings, replacesNothing(c, unmatched)...)
	if len(errs) == 0 && o.Check != nil {
		errs = o.Check(c)
	}
	if len(errs) > 0 {
		return nil, warnings, &Error{Problems: errs}
	}
	h := sha256.New()
	for _, src := range sources {
		fmt.Fprintf(h, "%q %d\n", src.Name, len(src.Data))
		h.Write(src.Data)
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, warnings, nil
}

// configFiles lists the files Load reads for path.
func (o Options) configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if !o.IsConfigFile(name) {
			continue
		}
		full := filepath.Join(path, name)
		if st, err := os.Stat(full); err != nil || st.IsDir() {
			continue // a dangling link or a directory named *.yaml
		}
		files = append(files, full)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("reading config: %w: no *.yaml or *.yml file in %s", ErrNoConfig, path)
	}
	return files, nil
}

// IsConfigFile reports whether Load reads a file of this name (a base
// name) in a config directory: *.yaml and *.yml, but not names starting
// with a dot, such as a Kubernetes ConfigMap's ..data.
func IsConfigFile(name string) bool { return Options{}.IsConfigFile(name) }

// IsConfigFile reports whether Load with these options reads a file of
// this name (a base name) in a config directory: *.yaml and *.yml; with
// DotFiles, those starting with one dot too.
func (o Options) IsConfigFile(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	dot := strings.HasPrefix(name, ".") && (!o.DotFiles || strings.HasPrefix(name, ".."))
	return !dot && (ext == ".yaml" || ext == ".yml")
}

// ErrNoConfig is returned by Load for a directory without config files.
var ErrNoConfig = errors.New("no config files")

// replacesNothing returns the warnings of replaces that name no limit of
// their domain, once its files are merged: a name another file of the
// domain defines is no warning.
func replacesNothing(c *Config, unmatched map[string][]unmatchedReplace) []Problem {
	var out []Problem
	for domain, us := range unmatched {
		names := map[string]bool{}
		if d := c.domains[domain]; d != nil {
			for _, r := range d.Rules() {
				names[r.Name] = true
			}
		}
		for _, u := range us {
			if !names[u.name] && len(out) < maxProblems {
				out = append(out, u.warning)
			}
		}
	}
	slices.SortFunc(out, func(a, b Problem) int { return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line)) })
	return out
}
