package descriptors

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

const budgetsConfig = `
domain: llm
descriptors:
  - key: team
    limits:
      - fixed_window: {limit: 2000000, calendar: month, time_zone: Europe/Berlin}
        name: tokens
      - rate_limit: {unit: minute, requests_per_unit: 100}
      - rate_limit: {unit: day, requests_per_unit: 500, calendar: true}
      - rate_limit: {unit: day, requests_per_unit: 600}
      - fixed_window: {limit: 7, calendar: week, time_zone: UTC}
`

func TestCalendarWindows(t *testing.T) {
	c, warnings, err := Parse(Source{Name: "b.yaml", Data: []byte(budgetsConfig)})
	if err != nil || len(warnings) > 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	type level struct {
		key   string
		limit limit.Limit
		rate  limit.Rate
	}
	var got []level
	for _, l := range c.Domain("llm").Resolve(entries("team=a"), nil, nil) {
		got = append(got, level{l.Key, l.Rule.Limit, l.Rule.Rate})
	}
	want := []level{
		{"llm|team=a|#fwmonth", limit.Limit{Algorithm: limit.FixedWindow, Size: 2000000, Calendar: window.Month, Zone: "Europe/Berlin"}, limit.Rate{RequestsPerUnit: 2000000, Unit: limit.Month}},
		{"llm|team=a", limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}.Limit(), limit.Rate{RequestsPerUnit: 100, Unit: limit.Minute}},
		{"llm|team=a|#fwday", limit.Limit{Algorithm: limit.FixedWindow, Size: 500, Calendar: window.Day}, limit.Rate{RequestsPerUnit: 500, Unit: limit.Day}},
		// Without calendar: the reference's day, since the epoch (a leaky
		// bucket, the file's default algorithm).
		{"llm|team=a|#lb2", limit.Rate{RequestsPerUnit: 600, Unit: limit.Day}.Limit(), limit.Rate{RequestsPerUnit: 600, Unit: limit.Day}},
		{"llm|team=a|#fwweek", limit.Limit{Algorithm: limit.FixedWindow, Size: 7, Calendar: window.Week}, limit.Rate{RequestsPerUnit: 7, Unit: limit.Week}}, // UTC is ""
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("levels:\n got %v\nwant %v", got, want)
	}
}

// TestFileCalendar: calendar: true next to domain makes the file's
// rate_limits of a day or more calendar windows in its zone, and leaves
// shorter ones and Envoy's limits' algorithm alone; a node's own calendar
// and time_zone win.
func TestFileCalendar(t *testing.T) {
	const file = `
domain: api
calendar: true
time_zone: America/Los_Angeles
rate_limit_algorithm: fixed_window
descriptors:
  - key: user
    limits:
      - rate_limit: {unit: month, requests_per_unit: 1000}
      - rate_limit: {unit: hour, requests_per_unit: 10}
      - rate_limit: {unit: year, requests_per_unit: 9, time_zone: Asia/Tokyo}
      - rate_limit: {unit: day, requests_per_unit: 5, calendar: false}
      - rate_limit: {unit: week, requests_per_unit: 5, unit_multiplier: 2, calendar: false}
`
	c, _, err := Parse(Source{Name: "f.yaml", Data: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	var got []limit.Limit
	for _, l := range c.Domain("api").Resolve(entries("user=u"), nil, nil) {
		got = append(got, l.Rule.Limit)
	}
	want := []limit.Limit{
		{Algorithm: limit.FixedWindow, Size: 1000, Calendar: window.Month, Zone: "America/Los_Angeles"},
		{Algorithm: limit.FixedWindow, Size: 10, Window: time.Hour},
		{Algorithm: limit.FixedWindow, Size: 9, Calendar: window.Year, Zone: "Asia/Tokyo"},
		{Algorithm: limit.FixedWindow, Size: 5, Window: 24 * time.Hour},
		{Algorithm: limit.FixedWindow, Size: 5, Window: 14 * 24 * time.Hour},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limits:\n got %v\nwant %v", got, want)
	}
}

func TestCalendarConfigRejects(t *testing.T) {
	const head = "domain: api\ndescriptors:\n  - key: user\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"window and calendar", head + "    fixed_window: {limit: 1, window: 1h, calendar: day}\n",
			"bad.yaml:4: descriptors[0].fixed_window.calendar: is given with window (line 4)"},
		{"neither window nor calendar", head + "    fixed_window: {limit: 1}\n",
			"bad.yaml:4: descriptors[0].fixed_window.window: is required (or calendar: day, week, month or year)"},
		{"unknown period", head + "    fixed_window: {limit: 1, calendar: fortnight}\n",
			`bad.yaml:4: descriptors[0].fixed_window.calendar: "fortnight": want day, week (from Monday), month or year`},
		{"unknown zone", head + "    fixed_window:\n      limit: 1\n      calendar: month\n      time_zone: Europe/Berln\n",
			`bad.yaml:7: descriptors[0].fixed_window.time_zone: "Europe/Berln" is not a time zone`},
		{"Local zone", head + "    fixed_window: {limit: 1, calendar: month, time_zone: Local}\n",
			`bad.yaml:4: descriptors[0].fixed_window.time_zone: "Local" is not a time zone`},
		{"empty zone", head + "    fixed_window: {limit: 1, calendar: month, time_zone: ''}\n",
			"bad.yaml:4: descriptors[0].fixed_window.time_zone: is empty"},
		{"zone without calendar", head + "    fixed_window: {limit: 1, window: 1h, time_zone: Europe/Berlin}\n",
			"bad.yaml:4: descriptors[0].fixed_window.time_zone: needs calendar"},
		{"calendar on a sliding window", head + "    sliding_window: {limit: 1, window: 1h, calendar: day}\n",
			"bad.yaml:4: descriptors[0].sliding_window.calendar: applies to fixed windows only: a sliding window slides continuously"},
		{"zone on a leaky bucket", head + "    limits:\n      - leaky_bucket: {size: 1, drip_rate: 1s, time_zone: UTC}\n",
			"bad.yaml:5: descriptors[0].limits[0].leaky_bucket.time_zone: applies to fixed windows only: a leaky bucket leaks continuously"},
		{"calendar on a minute", head + "    rate_limit: {unit: minute, requests_per_unit: 1, calendar: true}\n",
			"bad.yaml:4: descriptors[0].rate_limit.calendar: needs a unit of day, week, month or year: a minute is as long wherever it falls"},
		{"calendar not a boolean", head + "    rate_limit: {unit: day, requests_per_unit: 1, calendar: month}\n",
			`bad.yaml:4: descriptors[0].rate_limit.calendar: must be true or false, got "month"`},
		{"zone without calendar on a rate", head + "    rate_limit: {unit: day, requests_per_unit: 1, time_zone: Asia/Tokyo}\n",
			"bad.yaml:4: descriptors[0].rate_limit.time_zone: needs calendar: true, here or next to domain"},
		{"zone on an hour", "domain: api\ncalendar: true\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1, time_zone: Asia/Tokyo}\n",
			"bad.yaml:5: descriptors[0].rate_limit.time_zone: has no effect: an hour is counted since the Unix epoch"},
		{"calendar with a multiplier", head + "    rate_limit: {unit: month, requests_per_unit: 1, unit_multiplier: 3, calendar: true}\n",
			"bad.yaml:4: descriptors[0].rate_limit.unit_multiplier: 3 with calendar: true: a calendar period is one month (leave calendar out"},
		{"file calendar with a multiplier", "domain: api\ncalendar: true\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1, unit_multiplier: 2}\n",
			"bad.yaml:5: descriptors[0].rate_limit.unit_multiplier: 2 with calendar: true: a calendar period is one day (set calendar: false here"},
		{"unlimited with calendar", head + "    rate_limit: {unlimited: true, calendar: true}\n",
			"bad.yaml:4: descriptors[0].rate_limit.unlimited: cannot be combined with calendar or time_zone"},
		{"file zone without calendar", "domain: api\ntime_zone: Europe/Paris\n",
			"bad.yaml:2: time_zone: needs calendar: true beside it"},
		{"file zone unknown", "domain: api\ncalendar: true\ntime_zone: Paris\n",
			`bad.yaml:3: time_zone: "Paris" is not a time zone`},
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

func TestDescribeCalendar(t *testing.T) {
	c, _, err := Parse(Source{Name: "b.yaml", Data: []byte(budgetsConfig)})
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(c.Describe().Domains[0].Descriptors[0].Limits[0])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"algorithm":"fixed_window","name":"tokens","limit":2000000,"calendar":"month","time_zone":"Europe/Berlin","reported_as":"2000000/month"}`
	if string(j) != want {
		t.Errorf("GET /config shows\n%s\nwant\n%s", j, want)
	}
}

// TestCalendarLimitsStableAcrossLoads: two loads of one config give equal
// limits (stores compare them to keep a bucket's state).
func TestCalendarLimitsStableAcrossLoads(t *testing.T) {
	var rules [2][]*Rule
	for i := range rules {
		c, _, err := Parse(Source{Name: "b.yaml", Data: []byte(budgetsConfig)})
		if err != nil {
			t.Fatal(err)
		}
		rules[i] = c.Domain("llm").Rules()
	}
	for i := range rules[0] {
		if rules[0][i].Limit != rules[1][i].Limit {
			t.Errorf("rule %d: %v, then %v", i, rules[0][i].Limit, rules[1][i].Limit)
		}
	}
}
