package descriptors

import (
	"fmt"
	"testing"
)

func TestOrder(t *testing.T) {
	cfg, _, err := Parse(Source{Name: "b.yaml", Data: []byte(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: action
        value: trade
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: user
        descriptors:
          - key: tier
            rate_limit: {unit: second, requests_per_unit: 5}
  - key: client
    rate_limit: {unit: second, requests_per_unit: 50}
`)})
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Domain("api")
	for i, c := range []struct {
		pairs map[string]string
		want  string
	}{
		{map[string]string{"user": "alice"}, "[{user alice}]"},
		{map[string]string{"action": "trade", "user": "alice"}, "[{user alice} {action trade}]"},
		{map[string]string{"action": "sell", "user": "alice"}, "[{user alice}]"},                                 // no node for action=sell
		{map[string]string{"user": "alice", "path": "/", "tier": "gold"}, "[{path /} {user alice} {tier gold}]"}, // the deepest walk
		{map[string]string{"user": "alice", "path": "/"}, "[{path /} {user alice}]"},
		{map[string]string{"client": "x", "user": "alice"}, "[{user alice}]"}, // as deep: the key written first
		{map[string]string{"other": "x"}, "[]"},
		{map[string]string{}, "[]"},
	} {
		got := d.Order(c.pairs)
		if fmt.Sprint(got) != c.want && !(c.want == "[]" && len(got) == 0) {
			t.Errorf("step %d: Order(%v) = %v, want %v", i, c.pairs, got, c.want)
		}
	}
	// The entries resolve as a descriptor's do: every level counts.
	levels := d.Resolve(d.Order(map[string]string{"action": "trade", "user": "alice"}), nil, nil)
	if len(levels) != 2 || levels[0].Key != "api|user=alice" || levels[1].Key != "api|user=alice|action=trade" {
		t.Fatalf("levels %v", levels)
	}
}

// TestBucketEntries: a pair no node asks for is left out when another
// pair matches (so that under match: leaf an extra pair does not stop the
// walk before the limit), and all pairs, in key order, when none does.
func TestBucketEntries(t *testing.T) {
	cfg, _, err := Parse(Source{Name: "b.yaml", Data: []byte(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`)})
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Domain("api")
	for _, c := range []struct {
		pairs map[string]string
		want  string
	}{
		{map[string]string{"user": "a", "zzz": "b"}, "[{user a}]"},
		{map[string]string{"zzz": "b", "aaa": "c"}, "[{aaa c} {zzz b}]"},
	} {
		if got := fmt.Sprint(d.BucketEntries(c.pairs)); got != c.want {
			t.Errorf("BucketEntries(%v) = %s, want %s", c.pairs, got, c.want)
		}
	}
}
