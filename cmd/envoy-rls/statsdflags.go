package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/refstats"
)

// statsdSettings are the -statsd-* flags: envoyproxy/ratelimit's stats
// sent to StatsD.
type statsdSettings struct {
	addr          string
	protocol      choice[string]
	protocolGiven bool // -statsd-protocol set, not its default
	interval      time.Duration
	dogStatsD     bool
	tags          tagsFlag
	mogrifiers    mogrifiersFlag
}

// registerDogStatsD adds the flags of DogStatsD and of tags to the
// -statsd-* ones.
func (st *statsdSettings) registerDogStatsD(fs *flag.FlagSet) {
	fs.BoolVar(&st.dogStatsD, "statsd-dogstatsd", false, "send to -statsd-addr in the DogStatsD format, over udp, with tags (envoyproxy/ratelimit's USE_DOG_STATSD)")
	fs.Var(&st.tags, "statsd-tags", "tags on every stat sent to -statsd-addr, as `key:value,...` (EXTRA_TAGS): DogStatsD tags, or appended to each name as .__key=value on plain StatsD")
	fs.Var(&st.mogrifiers, "statsd-mogrifiers", "with -statsd-dogstatsd: a YAML (or JSON) `list` of {pattern, name, tags}, each rewriting the stat names its pattern matches into a name and tags, the first match winning (USE_DOG_STATSD_MOGRIFIERS)")
}

// check checks the DogStatsD flags, and sends DogStatsD over udp unless
// -statsd-protocol said tcp.
func (st *statsdSettings) check() error {
	switch {
	case st.dogStatsD && st.addr == "":
		return errors.New("-statsd-dogstatsd: needs -statsd-addr")
	case len(st.tags.tags) > 0 && st.addr == "":
		return errors.New("-statsd-tags: needs -statsd-addr")
	case len(st.mogrifiers.list) > 0 && !st.dogStatsD:
		return errors.New("-statsd-mogrifiers: needs -statsd-dogstatsd (plain StatsD has no tags to put names' parts in)")
	case st.dogStatsD && st.protocol.value == "tcp" && st.protocolGiven:
		return errors.New("-statsd-dogstatsd: DogStatsD is sent over udp: -statsd-protocol tcp does not go with it")
	}
	if st.dogStatsD {
		st.protocol.value = "udp"
	}
	return nil
}

// options are the StatsD sink's options for the flags.
func (st *statsdSettings) options() []refstats.StatsDOption {
	opts := []refstats.StatsDOption{refstats.WithTags(st.tags.tags)}
	if st.dogStatsD {
		opts = append(opts, refstats.WithDogStatsD(st.mogrifiers.list))
	}
	return opts
}

// tagsFlag is -statsd-tags.
type tagsFlag struct{ tags refstats.Tags }

func (f *tagsFlag) Set(s string) error {
	tags, err := refstats.ParseTags(s)
	if err != nil {
		return err
	}
	f.tags = tags
	return nil
}

func (f *tagsFlag) String() string {
	if f == nil {
		return ""
	}
	return f.tags.String()
}

// mogrifierSpec is one mogrifier of -statsd-mogrifiers, as
// envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and
// _TAGS give it.
type mogrifierSpec struct {
	Pattern string `yaml:"pattern" json:"pattern"`
	Name    string `yaml:"name" json:"name"`
	Tags    string `yaml:"tags,omitempty" json:"tags,omitempty"` // key:value,key2:value2; $1... the pattern's groups
}

// mogrifiersFlag is -statsd-mogrifiers.
type mogrifiersFlag struct {
	text string
	list refstats.Mogrifiers
}

func (f *mogrifiersFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		f.text, f.list = "", nil
		return nil
	}
	var specs []mogrifierSpec
	dec := yaml.NewDecoder(strings.NewReader(s))
	dec.KnownFields(true)
	if err := dec.Decode(&specs); err != nil {
		return fmt.Errorf("want a YAML list of {pattern, name, tags}: %w", err)
	}
	var list refstats.Mogrifiers
	for i, m := range specs {
		mog, err := refstats.NewMogrifier(m.Pattern, m.Name, m.Tags)
		if err != nil {
			return fmt.Errorf("mogrifier %d: %w", i+1, err)
		}
		list = append(list, mog)
	}
	f.text, f.list = s, list
	return nil
}

func (f *mogrifiersFlag) String() string {
	if f == nil {
		return ""
	}
	return f.text
}
