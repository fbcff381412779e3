package main

import (
	"strings"
	"testing"
	"time"
)

func TestParsePattern(t *testing.T) {
	p, err := parsePattern("user=u%d,action=a%d")
	if err != nil {
		t.Fatal(err)
	}
	d := p.descriptor(7)
	var got []string
	for _, e := range d.GetEntries() {
		got = append(got, e.GetKey()+"="+e.GetValue())
	}
	if want := "user=u7 action=a7"; strings.Join(got, " ") != want {
		t.Errorf("entries = %q, want %q", got, want)
	}
}

func TestParsePatternEdgeCases(t *testing.T) {
	// An empty value is allowed by the proto; %d may appear anywhere, or twice.
	p, err := parsePattern("k=,x=%d-%d,plain=v")
	if err != nil {
		t.Fatal(err)
	}
	e := p.descriptor(42).GetEntries()
	if len(e) != 3 || e[0].GetValue() != "" || e[1].GetValue() != "42-42" || e[2].GetValue() != "v" {
		t.Errorf("entries = %v", e)
	}
}

func TestParsePatternErrors(t *testing.T) {
	for _, s := range []string{"user", "", "=u%d", "user=u%d,,action=a", "user=u%d,action"} {
		_, err := parsePattern(s)
		if err == nil {
			t.Errorf("parsePattern(%q): no error", s)
			continue
		}
		if !strings.Contains(err.Error(), `"`+s+`"`) {
			t.Errorf("parsePattern(%q): error %q does not name the pattern", s, err)
		}
	}
}

func TestSeveralDescriptorFlags(t *testing.T) {
	cfg, err := parseLoadArgs([]string{"-descriptor", "user=u%d,action=a%d", "-descriptor", "ip=10.0.0.%d", "-hits", "5"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := buildRequests(cfg.domain, cfg.patterns, 3, cfg.hits)
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	r := reqs[2]
	if r.GetDomain() != "api" || r.GetHitsAddend() != 5 || len(r.GetDescriptors()) != 2 {
		t.Fatalf("request = %v", r)
	}
	if v := r.GetDescriptors()[1].GetEntries()[0].GetValue(); v != "10.0.0.2" {
		t.Errorf("second descriptor value = %q, want 10.0.0.2", v)
	}
}

func TestDefaultDescriptor(t *testing.T) {
	cfg, err := parseLoadArgs(nil, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.patterns) != 1 || len(cfg.patterns[0].entries) != 2 || cfg.hits != 0 {
		t.Errorf("default config = %+v", cfg)
	}
}

func TestParseLoadArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-descriptor", "user"}, `"user"`},
		{[]string{"-c", "0"}, "-c must be at least 1"},
		{[]string{"-conns", "0"}, "-conns"},
		{[]string{"-keys", "0"}, "-keys"},
		{[]string{"-format", "xml"}, "-format"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-hits", "4294967296"}, "-hits"},
		{[]string{"-timeout", "0s"}, "-timeout"},
		{[]string{"stray"}, "stray"},
	} {
		_, err := parseLoadArgs(tc.args, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseLoadArgs(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	// -n wins over a zero duration.
	if _, err := parseLoadArgs([]string{"-n", "10", "-duration", "0s"}, &strings.Builder{}); err != nil {
		t.Errorf("-n with zero -duration: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	// 1ms..1000ms, sorted: nearest rank gives exactly q/10000 * 1000.
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(i+1) * time.Millisecond
	}
	// Few values: nearest rank rounds up, never below the smallest.
	few := []time.Duration{10, 20, 30, 40}
	for _, tc := range []struct {
		lat  []time.Duration
		q    int
		want time.Duration
	}{
		{lat, 5000, 500 * time.Millisecond},
		{lat, 9000, 900 * time.Millisecond},
		{lat, 9900, 990 * time.Millisecond},
		{lat, 9990, 999 * time.Millisecond},
		{lat, 10000, 1000 * time.Millisecond},
		{lat, 0, 1 * time.Millisecond},
		{few, 5000, 20},
		{few, 5001, 30},
		{few, 9900, 40},
		{few[:1], 9990, 10},
		{nil, 5000, 0},
	} {
		if got := percentile(tc.lat, tc.q); got != tc.want {
			t.Errorf("percentile(%d values, %d) = %v, want %v", len(tc.lat), tc.q, got, tc.want)
		}
	}
}
