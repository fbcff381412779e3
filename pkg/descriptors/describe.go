package descriptors

import "github.com/envoy-rls/envoy-rls/pkg/limit"

// Description is a config as a JSON-friendly tree, for GET /config.
type Description struct {
	Files   []string            `json:"files"`
	Domains []DomainDescription `json:"domains"`
}

// DomainDescription is one domain and its descriptor tree.
type DomainDescription struct {
	Domain        string                  `json:"domain"`
	File          string                  `json:"file"`
	MergedFiles   []string                `json:"merged_files,omitempty"` // merged into it after File
	OverLimitBody string                  `json:"over_limit_body,omitempty"`
	Descriptors   []DescriptorDescription `json:"descriptors,omitempty"`
}

// DescriptorDescription is one node of the tree.
type DescriptorDescription struct {
	Key            string                  `json:"key"`
	Value          string                  `json:"value,omitempty"`
	Name           string                  `json:"name,omitempty"`
	Limit          *LimitDescription       `json:"limit,omitempty"`  // the one limit
	Limits         []LimitDescription      `json:"limits,omitempty"` // several
	Unlimited      bool                    `json:"unlimited,omitempty"`
	ShadowMode     bool                    `json:"shadow_mode,omitempty"`
	ShareThreshold bool                    `json:"share_threshold,omitempty"`
	DetailedMetric bool                    `json:"detailed_metric,omitempty"`
	ValueToMetric  bool                    `json:"value_to_metric,omitempty"`
	Descriptors    []DescriptorDescription `json:"descriptors,omitempty"`
}

// LimitDescription is one limit of a node, and the rate the responses
// report: a leaky bucket's size, drip rate and drip size, or a window's
// limit, window and (sliding) resolution, or calendar period and zone.
type LimitDescription struct {
	Algorithm  string `json:"algorithm"`
	Name       string `json:"name,omitempty"`        // in a limits list
	ShadowMode bool   `json:"shadow_mode,omitempty"` // in a limits list
	Size       *int64 `json:"size,omitempty"`
	DripRate   string `json:"drip_rate,omitempty"`
	DripSize   int64  `json:"drip_size,omitempty"`
	Limit      *int64 `json:"limit,omitempty"`
	Window     string `json:"window,omitempty"`
	Resolution string `json:"resolution,omitempty"`
	// Calendar is a calendar window's period (day, week, month, year) and
	// TimeZone its zone (an IANA name, or UTC), in place of a window.
	Calendar string `json:"calendar,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	Reported string `json:"reported_as"` // requests per unit, as in current_limit
	// Charge is "always" for a limit that charges every call's hits
	// (charge: always); absent for the default, admitted requests only.
	Charge    string         `json:"charge,omitempty"`
	QuotaMode bool           `json:"quota_mode,omitempty"`
	Scope     string         `json:"scope,omitempty"` // "region" when kept to each region
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// Describe returns the limit as GET /config shows it, with its name and
// shadow mode.
func (r *Rule) Describe() LimitDescription {
	l := describeLimit(r)
	l.Name, l.ShadowMode = r.Name, r.Shadow
	return l
}

func describeLimit(r *Rule) LimitDescription {
	l := r.Limit
	d := LimitDescription{Algorithm: l.Algorithm.String(), Reported: r.Rate.String(), QuotaMode: r.QuotaMode, Metadata: r.Metadata}
	if r.Regional {
		d.Scope = "region"
	}
	if r.Always {
		d.Charge = ChargeAlways.String()
	}
	switch l.Algorithm {
	case limit.SlidingWindow:
		d.Limit, d.Window, d.Resolution = &l.Size, l.Window.String(), l.Sliding().Resolution.String()
	case limit.FixedWindow:
		if l.IsCalendar() {
			describeCalendar(&d, l)
			break
		}
		d.Limit, d.Window = &l.Size, l.Window.String()
	default:
		d.Size, d.DripRate, d.DripSize = &l.Size, l.DripRate.String(), l.DripSize
	}
	return d
}

// Describe returns the config as a tree, in file order.
func (c *Config) Describe() Description {
	d := Description{Files: c.files, Domains: []DomainDescription{}}
	for _, dom := range c.Domains() {
		d.Domains = append(d.Domains, DomainDescription{Domain: dom.Name, File: dom.File, MergedFiles: dom.Files()[1:], OverLimitBody: dom.OverLimitBody,
			Descriptors: describeLevel(dom.root)})
	}
	return d
}

func describeLevel(lv *level) []DescriptorDescription {
	if lv == nil {
		return nil
	}
	out := make([]DescriptorDescription, 0, len(lv.order))
	for _, n := range lv.order {
		d := DescriptorDescription{
			Key:            n.key,
			Value:          n.value,
			Unlimited:      n.unlimited,
			ShareThreshold: n.parts != nil && n.component != "",
			DetailedMetric: n.detailedMetric,
			ValueToMetric:  n.valueToMetric,
			Descriptors:    describeLevel(n.children),
		}
		switch {
		case n.list:
			for _, r := range n.rules {
				d.Limits = append(d.Limits, r.Describe())
			}
		case len(n.rules) == 1:
			r := n.rules[0]
			l := describeLimit(r)
			d.Name, d.ShadowMode, d.Limit = r.Name, r.Shadow, &l
		}
		out = append(out, d)
	}
	return out
}
