// Package xdsconfig takes the service's config from an xDS server, as
// envoyproxy/ratelimit does for Envoy Gateway: a state-of-the-world
// subscription over ADS to RateLimitConfig resources
// (ratelimit.config.ratelimit.v3), each a domain. A resource is read as
// the YAML file it stands for, so an update is validated exactly as files
// are, and an invalid one is refused (NACKed) with the previous config
// kept.
package xdsconfig

import (
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TypeURL is the resource type the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Build compiles RateLimitConfig resources into a config, each as the file
// "xds:<name>" it stands for: problems name that file, the line of its
// YAML form and the field.
func Build(resources []*rlsconfv3.RateLimitConfig, opts descriptors.Options) (*descriptors.Config, []descriptors.Problem, error) {
	sources := make([]descriptors.Source, len(resources))
	for i, r := range resources {
		data, err := yaml.Marshal(file{Domain: r.GetDomain(), Descriptors: nodes(r.GetDescriptors())})
		if err != nil {
			return nil, nil, fmt.Errorf("resource %q: %w", r.GetName(), err)
		}
		sources[i] = descriptors.Source{Name: "xds:" + r.GetName(), Data: data}
	}
	return opts.Parse(sources...)
}

// file is a resource in the YAML form of a config file.
type file struct {
	Domain      string `yaml:"domain"`
	Descriptors []node `yaml:"descriptors,omitempty"`
}

// node is a RateLimitDescriptor: every field of the message, under the
// name a file gives it (TestEveryFieldIsRead holds the two lists equal).
type node struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value,omitempty"`
	RateLimit      *rate          `yaml:"rate_limit,omitempty"`
	ShadowMode     bool           `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool           `yaml:"detailed_metric,omitempty"`
	QuotaMode      bool           `yaml:"quota_mode,omitempty"`
	Metadata       map[string]any `yaml:"metadata,omitempty"`
	Descriptors    []node         `yaml:"descriptors,omitempty"`
}

// rate is a RateLimitPolicy, every field of it.
type rate struct {
	Unit            string    `yaml:"unit,omitempty"`
	RequestsPerUnit *uint32   `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool      `yaml:"unlimited,omitempty"`
	Name            string    `yaml:"name,omitempty"`
	Replaces        []replace `yaml:"replaces,omitempty"`
}

type replace struct {
	Name string `yaml:"name"`
}

func nodes(ds []*rlsconfv3.RateLimitDescriptor) []node {
	out := make([]node, 0, len(ds))
	for _, d := range ds {
		n := node{Key: d.GetKey(), Value: d.GetValue(), ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
			QuotaMode: d.GetQuotaMode(), Descriptors: nodes(d.GetDescriptors())}
		if md := d.GetMetadata(); md != nil {
			// An empty Struct is an empty mapping, as "metadata: {}" is.
			n.Metadata = md.AsMap()
		}
		if p := d.GetRateLimit(); p != nil {
			r := &rate{Unlimited: p.GetUnlimited(), Name: p.GetName()}
			if !p.GetUnlimited() {
				// UNKNOWN is no unit: the config's check says so, with the field.
				if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
					r.Unit = strings.ToLower(p.GetUnit().String())
				}
				n := p.GetRequestsPerUnit()
				r.RequestsPerUnit = &n
			}
			for _, rep := range p.GetReplaces() {
				r.Replaces = append(r.Replaces, replace{Name: rep.GetName()})
			}
			n.RateLimit = r
		}
		out = append(out, n)
	}
	return out
}
