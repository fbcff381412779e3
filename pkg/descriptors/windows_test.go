package descriptors

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

const windowsConfig = `
domain: api
descriptors:
  - key: user
    limits:
      - sliding_window: {limit: 10, window: 1s}
        name: burst
      - sliding_window: {limit: 1000, window: 1h, resolution: 1m}
        name: hourly
      - rate_limit: {unit: day, requests_per_unit: 10000}
        shadow_mode: true
      - leaky_bucket: {size: 5, drip_rate: 1s}
    descriptors:
      - key: action
        value: trade
        fixed_window: {limit: 3, window: 10s}
  - key: ip
    shadow_mode: true
    limits:
      - fixed_window: {limit: 5, window: 1m}
      - fixed_window: {limit: 5, window: 1m}
`

func TestWindowsAndLimitsLists(t *testing.T) {
	c, warnings, err := Parse(Source{Name: "w.yaml", Data: []byte(windowsConfig)})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	d := c.Domain("api")
	type level struct {
		key, label string
		limit      limit.Limit
		shadow     bool
	}
	sec := time.Second
	for _, tc := range []struct {
		entries []Entry
		want    []level
	}{
		{entries("user=alex", "action=trade"), []level{
			{"api|user=alex|#sw1s/100ms", "burst", limit.Limit{Algorithm: limit.SlidingWindow, Size: 10, Window: sec}, false},
			{"api|user=alex|#sw1h/1m", "hourly", limit.Limit{Algorithm: limit.SlidingWindow, Size: 1000, Window: time.Hour, Resolution: time.Minute}, false},
			{"api|user=alex", "user/limits[2]", limit.Rate{RequestsPerUnit: 10000, Unit: limit.Day}.Limit(), true},
			{"api|user=alex|#lb2", "user/limits[3]", limit.Limit{Size: 5, DripRate: sec, DripSize: 1}, false},
			{"api|user=alex|action=trade|#fw10s", "user/action=trade", limit.Limit{Algorithm: limit.FixedWindow, Size: 3, Window: 10 * sec}, false},
		}},
		// The descriptor's shadow_mode covers its every limit; two alike
		// limits keep buckets of their own.
		{entries("ip=1.2.3.4"), []level{
			{"api|ip=1.2.3.4|#fw1m", "ip/limits[0]", limit.Limit{Algorithm: limit.FixedWindow, Size: 5, Window: time.Minute}, true},
			{"api|ip=1.2.3.4|#fw1m~1", "ip/limits[1]", limit.Limit{Algorithm: limit.FixedWindow, Size: 5, Window: time.Minute}, true},
		}},
	} {
		var got []level
		for _, l := range d.Resolve(tc.entries, nil, nil) {
			got = append(got, level{l.Key, l.Rule.Label(), l.Rule.Limit, l.Rule.Shadow})
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v:\n got %v\nwant %v", tc.entries, got, tc.want)
		}
	}
}

func TestRateLimitAlgorithm(t *testing.T) {
	file := func(algo string) string {
		s := "domain: api\n"
		if algo != "" {
			s += "rate_limit_algorithm: " + algo + "\n"
		}
		return s + "descriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	}
	minute := time.Minute
	for _, tc := range []struct {
		file     string
		fallback limit.Algorithm
		want     limit.Limit
		key      string
	}{
		{file(""), limit.LeakyBucket, limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}.Limit(), "api|user=a"},
		{file(""), limit.FixedWindow, limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: minute}, "api|user=a|#fw1m"},
		{file("sliding_window"), limit.FixedWindow, limit.Limit{Algorithm: limit.SlidingWindow, Size: 100, Window: minute, Resolution: 6 * time.Second}, "api|user=a|#sw1m/6s"},
		{file("leaky_bucket"), limit.FixedWindow, limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}.Limit(), "api|user=a"},
	} {
		c, _, err := Options{RateLimitAlgorithm: tc.fallback}.Parse(Source{Name: "a.yaml", Data: []byte(tc.file)})
		if err != nil {
			t.Fatal(err)
		}
		d := c.Domain("api")
		levels := d.Resolve(entries("user=a"), nil, nil)
		if len(levels) != 1 || levels[0].Rule.Limit != tc.want || levels[0].Key != tc.key {
			t.Errorf("%q with %v by default: got %+v, want %v at %s", tc.file, tc.fallback, levels, tc.want, tc.key)
		}
		if got := levels[0].Rule.Rate; got != (limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}) {
			t.Errorf("reported as %v, want 100/minute as written", got)
		}
		if want := tc.want.Algorithm; d.RateLimitAlgorithm != want {
			t.Errorf("domain's algorithm for Envoy's limits: %v, want %v", d.RateLimitAlgorithm, want)
		}
	}
}

func TestWindowConfigRejects(t *testing.T) {
	const head = "domain: api\ndescriptors:\n  - key: user\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"limits beside a limit", head + "    leaky_bucket: {size: 1, drip_rate: 1s}\n    limits:\n      - fixed_window: {limit: 1, window: 1s}\n",
			"bad.yaml:4: descriptors[0].leaky_bucket: is a limit beside limits (line 5): make it an item of limits"},
		{"name beside limits", head + "    name: x\n    limits:\n      - fixed_window: {limit: 1, window: 1s}\n",
			"bad.yaml:4: descriptors[0].name: names one limit, but the descriptor has limits (line 5)"},
		{"item without algorithm", head + "    limits:\n      - name: x\n",
			"bad.yaml:5: descriptors[0].limits[0]: needs a limit: one of leaky_bucket, sliding_window, fixed_window or rate_limit"},
		{"item with two algorithms", head + "    limits:\n      - fixed_window: {limit: 1, window: 1s}\n        sliding_window: {limit: 1, window: 1s}\n",
			"bad.yaml:6: descriptors[0].limits[0]: has both fixed_window (line 5) and sliding_window: give one per item of limits"},
		{"empty limits", head + "    limits: []\n", "bad.yaml:4: descriptors[0].limits: is empty"},
		{"limits not a list", head + "    limits: {fixed_window: {limit: 1, window: 1s}}\n", "bad.yaml:4: descriptors[0].limits: must be a list, got a mapping"},
		{"zero window", head + "    fixed_window: {limit: 1, window: 0s}\n", "bad.yaml:4: descriptors[0].fixed_window.window: must be greater than zero"},
		{"unparsable window", head + "    sliding_window: {limit: 1, window: often}\n", `bad.yaml:4: descriptors[0].sliding_window.window: "often" is not a duration`},
		{"window without unit", head + "    sliding_window: {limit: 1, window: 60}\n", `bad.yaml:4: descriptors[0].sliding_window.window: "60" has no unit`},
		{"missing window", head + "    fixed_window: {limit: 1}\n", "bad.yaml:4: descriptors[0].fixed_window.window: is required"},
		{"missing limit", head + "    sliding_window: {window: 1s}\n", "bad.yaml:4: descriptors[0].sliding_window.limit: is required"},
		{"resolution not dividing", head + "    sliding_window: {limit: 1, window: 1m, resolution: 7s}\n",
			"bad.yaml:4: descriptors[0].sliding_window.resolution: 7s does not divide the window 1m0s"},
		{"too many sub-windows", head + "    sliding_window: {limit: 1, window: 1h, resolution: 1s}\n",
			"bad.yaml:4: descriptors[0].sliding_window.resolution: makes 3600 sub-windows of 1s: at most 1000"},
		{"no default resolution", head + "    sliding_window: {limit: 1, window: 5us}\n",
			"bad.yaml:4: descriptors[0].sliding_window.window: 5µs has no default resolution"},
		{"negative limit", head + "    limits:\n      - sliding_window: {limit: -1, window: 1s}\n",
			"bad.yaml:5: descriptors[0].limits[0].sliding_window.limit: must be between 0 and"},
		{"unknown window field", head + "    fixed_window: {limit: 1, window: 1s, resolution: 1s}\n",
			"bad.yaml:4: descriptors[0].fixed_window.resolution: unknown field"},
		{"unlimited item", head + "    limits:\n      - rate_limit: {unlimited: true}\n",
			"bad.yaml:5: descriptors[0].limits[0].rate_limit.unlimited: cannot be an item of limits"},
		{"bad rate_limit_algorithm", "domain: api\nrate_limit_algorithm: token_bucket\n",
			`bad.yaml:2: rate_limit_algorithm: "token_bucket": want leaky_bucket, sliding_window or fixed_window`},
		{"item names disagree", head + "    limits:\n      - name: a\n        rate_limit: {unit: second, requests_per_unit: 1, name: b}\n",
			`bad.yaml:6: descriptors[0].limits[0].rate_limit.name: is "b" but the item's name is "a"`},
		{"item replacing itself", head + "    limits:\n      - rate_limit: {unit: second, requests_per_unit: 1, name: y, replaces: [{name: y}]}\n",
			`bad.yaml:5: descriptors[0].limits[0].rate_limit.replaces[0].name: "y" is the name of this limit`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Parse(Source{Name: "bad.yaml", Data: []byte(c.yaml)})
			var cfgErr *Error
			if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
		})
	}
}
