package spell

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"size", "size", 0}, {"sise", "size", 1}, {"drip_sise", "drip_size", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
