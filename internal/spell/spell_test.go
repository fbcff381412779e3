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

func TestClosest(t *testing.T) {
	flags := []string{"grpc-addr", "http-addr", "admin-addr", "config", "store"}
	commands := []string{"serve", "check-config", "explain", "healthcheck", "version", "help"}
	for _, c := range []struct {
		name  string
		names []string
		want  string
	}{
		{"grcp-addr", flags, "grpc-addr"}, // two letters swapped
		{"htp-addr", flags, "http-addr"},  // one dropped
		{"confgi", flags, "config"},       // two swapped, in a short name
		{"chek-config", commands, "check-config"},
		{"heathcheck", commands, "healthcheck"},
		{"explian", commands, "explain"},
		{"frobnicate", commands, ""}, // nothing near
		{"x", flags, ""},
		{"", commands, ""},
	} {
		if got := Closest(c.name, c.names); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}
