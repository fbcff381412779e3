package limit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const us = time.Microsecond

func TestRateLimit(t *testing.T) {
	cases := []struct {
		rate Rate
		want Limit
	}{
		{Rate{100, Minute, 0}, lb(100, 600*ms, 1)},
		{Rate{3, Second, 0}, lb(3, 333333*us, 1)},
		{Rate{10, Second, 0}, lb(10, 100*ms, 1)},
		{Rate{1000, Second, 0}, lb(1000, 1*ms, 1)},
		{Rate{1001, Second, 0}, lb(1001, 1998*us, 2)},
		{Rate{1000000, Second, 0}, lb(1000000, 1*ms, 1000)},
		{Rate{4294967295, Second, 0}, lb(4294967295, 1*ms, 4294968)},
		{Rate{5, Hour, 0}, lb(5, 12*time.Minute, 1)},
		{Rate{2, Week, 0}, lb(2, 84*time.Hour, 1)},
		{Rate{1, Month, 0}, lb(1, 30*24*time.Hour, 1)},
		{Rate{1, Year, 0}, lb(1, 365*24*time.Hour, 1)},
		{Rate{10, Second, 30}, lb(10, 3*time.Second, 1)},
		{Rate{0, Second, 0}, lb(0, time.Second, 1)},
		{Rate{0, Day, 0}, lb(0, 24*time.Hour, 1)},
		// A multiplier beyond 100 years is capped there.
		{Rate{1, Year, 4000000000}, lb(1, 100*365*24*time.Hour, 1)},
	}
	for _, c := range cases {
		got := c.rate.Limit()
		if got != c.want {
			t.Errorf("%v.Limit() = %v, want %v", c.rate, got, c.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%v.Limit() is invalid: %v", c.rate, err)
		}
	}
}

func TestLimitRate(t *testing.T) {
	cases := []struct {
		limit Limit
		want  Rate
	}{
		{lb(100, 600*ms, 1), Rate{100, Minute, 0}},
		{lb(60, time.Second, 1), Rate{60, Minute, 0}},
		{lb(3, 333333*us, 1), Rate{3, Second, 0}},
		{lb(1000000, 1*ms, 1000), Rate{1000000, Second, 0}},
		{lb(5, 2*time.Second, 1), Rate{30, Minute, 0}},
		{lb(10, 7*time.Second, 1), Rate{514, Hour, 0}},
		{lb(24, time.Hour, 1), Rate{24, Day, 0}},
		{lb(0, time.Second, 1), Rate{0, Second, 0}},
		{lb(1, 100*365*24*time.Hour, 1), Rate{1, Year, 0}},
	}
	for _, c := range cases {
		if got := c.limit.Rate(); got != c.want {
			t.Errorf("%v.Rate() = %v, want %v", c.limit, got, c.want)
		}
	}
	// Every rate in a whole unit survives the round trip.
	for _, u := range Units {
		for _, n := range []uint32{1, 3, 7, 100, 999, 12345, 1000000} {
			r := Rate{RequestsPerUnit: n, Unit: u}
			if got := r.Limit().Rate(); got != r {
				t.Errorf("%v.Limit().Rate() = %v", r, got)
			}
		}
	}
}

func TestParseUnit(t *testing.T) {
	for _, u := range Units {
		for _, s := range []string{u.String(), strings.ToUpper(u.String())} {
			got, err := ParseUnit(s)
			if err != nil || got != u {
				t.Errorf("ParseUnit(%q) = %v, %v; want %v", s, got, err, u)
			}
		}
	}
	if _, err := ParseUnit("fortnight"); !errors.Is(err, ErrUnknownUnit) {
		t.Errorf("ParseUnit(fortnight): got %v, want ErrUnknownUnit", err)
	}
	if d := Unit(0).Duration(); d != 0 {
		t.Errorf("invalid unit has duration %s", d)
	}
}

// TestPerSecond: the exact rate, not Rate's rounding to whole requests of
// a unit (a window of 1.5 s for 1 request sustains 2/3 of a request a
// second, not 1).
func TestPerSecond(t *testing.T) {
	cases := []struct {
		limit Limit
		want  float64
	}{
		{lb(100, 600*ms, 1), 100.0 / 60},
		{lb(10, 100*ms, 2), 20},
		{Limit{Algorithm: SlidingWindow, Size: 1, Window: 1500 * ms, Resolution: 100 * ms}, 2.0 / 3},
		{Limit{Algorithm: FixedWindow, Size: 90, Window: time.Minute}, 1.5},
	}
	for _, c := range cases {
		if got := c.limit.PerSecond(); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%v.PerSecond() = %v, want %v", c.limit, got, c.want)
		}
	}
}
