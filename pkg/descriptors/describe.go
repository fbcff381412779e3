package descriptors

// Description is a config as a JSON-friendly tree, for GET /config.
type Description struct {
	Files   []string            `json:"files"`
	Domains []DomainDescription `json:"domains"`
}

// DomainDescription is one domain and its descriptor tree.
type DomainDescription struct {
	Domain        string                  `json:"domain"`
	File          string                  `json:"file"`
	OverLimitBody string                  `json:"over_limit_body,omitempty"`
	Descriptors   []DescriptorDescription `json:"descriptors,omitempty"`
}

// DescriptorDescription is one node of the tree.
type DescriptorDescription struct {
	Key            string                  `json:"key"`
	Value          string                  `json:"value,omitempty"`
	Name           string                  `json:"name,omitempty"`
	Limit          *LimitDescription       `json:"limit,omitempty"`
	Unlimited      bool                    `json:"unlimited,omitempty"`
	ShadowMode     bool                    `json:"shadow_mode,omitempty"`
	ShareThreshold bool                    `json:"share_threshold,omitempty"`
	DetailedMetric bool                    `json:"detailed_metric,omitempty"`
	ValueToMetric  bool                    `json:"value_to_metric,omitempty"`
	Descriptors    []DescriptorDescription `json:"descriptors,omitempty"`
}

// LimitDescription is a node's bucket, and the rate the responses report.
type LimitDescription struct {
	Size     int64  `json:"size"`
	DripRate string `json:"drip_rate"`
	DripSize int64  `json:"drip_size"`
	Reported string `json:"reported_as"` // requests per unit, as in current_limit
}

// Describe returns the config as a tree, in file order.
func (c *Config) Describe() Description {
	d := Description{Files: c.files, Domains: []DomainDescription{}}
	for _, dom := range c.Domains() {
		d.Domains = append(d.Domains, DomainDescription{Domain: dom.Name, File: dom.File, OverLimitBody: dom.OverLimitBody,
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
		if r := n.rule; r != nil {
			d.Name, d.ShadowMode = r.Name, r.Shadow
			d.Limit = &LimitDescription{Size: r.Limit.Size, DripRate: r.Limit.DripRate.String(), DripSize: r.Limit.DripSize, Reported: r.Rate.String()}
		}
		out = append(out, d)
	}
	return out
}
