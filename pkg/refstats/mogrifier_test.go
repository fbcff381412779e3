package refstats

import (
	"slices"
	"strings"
	"testing"
)

const threeLevels = `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`

// TestMogrifiers: the reference's cases for its mogrifiers, each a list
// of (pattern, name, tags) tried in order on one stat name.
func TestMogrifiers(t *testing.T) {
	type m struct{ pattern, name, tags string }
	for _, c := range []struct {
		what       string
		mogrifiers []m
		in         string
		wantName   string
		wantTags   string // comma-separated, in order
	}{
		{"simple replacement", []m{{threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2"}},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit", "ratelimit.service.rate_limit.within_limit", "domain:mongo_cps,descriptor:database_users"},
		{"a group past the last stays as written", []m{{threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$5"}},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit", "ratelimit.service.rate_limit.within_limit", "domain:mongo_cps,descriptor:$5"},
		{"no placeholders in tags", []m{{threeLevels, "ratelimit.service.rate_limit.$3", "domain:mongo_cps,descriptor:database_users"}},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit", "ratelimit.service.rate_limit.within_limit", "domain:mongo_cps,descriptor:database_users"},
		{"no match", []m{{threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$4"}},
			"some.unmatched.metric", "some.unmatched.metric", ""},
		{"two: the first matches", []m{
			{`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`, "custom.foo", "domain:$1,descriptor:$2"},
			{threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2"}},
			"ratelimit.service.rate_limit.mongo_cps.database_users.foo", "custom.foo", "domain:mongo_cps,descriptor:database_users"},
		{"two: the second matches", []m{
			{`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`, "custom.foo", "domain:$1,descriptor:$2"},
			{threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2"}},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit", "ratelimit.service.rate_limit.within_limit", "domain:mongo_cps,descriptor:database_users"},
		{"$0 is the whole match", []m{{`^ratelimit\.(.*)$`, "custom.$1", "was:$0"}},
			"ratelimit.x", "custom.x", "was:ratelimit.x"},
	} {
		var ms Mogrifiers
		for _, x := range c.mogrifiers {
			mog, err := NewMogrifier(x.pattern, x.name, x.tags)
			if err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			ms = append(ms, mog)
		}
		name, tags := ms.Apply(c.in)
		if name != c.wantName || strings.Join(tags, ",") != c.wantTags {
			t.Errorf("%s: %s %q, want %s %q", c.what, name, tags, c.wantName, c.wantTags)
		}
	}
	// None, or nil: the name as it is, no tags.
	for _, ms := range []Mogrifiers{nil, {}} {
		if name, tags := ms.Apply("a.b"); name != "a.b" || len(tags) != 0 {
			t.Errorf("%v: %s %q", ms, name, tags)
		}
	}
}

// TestMogrifierErrors: the reference's refusals.
func TestMogrifierErrors(t *testing.T) {
	for _, c := range []struct{ what, pattern, name, tags, want string }{
		{"nothing set", "", "", "", "no pattern"},
		{"no pattern", "", "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2", "no pattern"},
		{"no name", threeLevels, "", "domain:$1,descriptor:$2", "no name"},
		{"a tag without a key", threeLevels, "ratelimit.service.rate_limit.$3", ":5", "no key"},
		{"a tag without a value", threeLevels, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:", "no value"},
		{"a tag without ':'", threeLevels, "ratelimit.service.rate_limit.$3", "domain", "want key:value"},
		{"a bad pattern", "(", "x", "", "pattern"},
	} {
		if _, err := NewMogrifier(c.pattern, c.name, c.tags); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.what, err, c.want)
		}
	}
	if _, err := NewMogrifier(threeLevels, "ratelimit.service.rate_limit.$3", ""); err != nil {
		t.Errorf("no tags: %v", err)
	}
}

// TestFormatLines: a stat's line, with extra tags and mogrifiers, on a
// plain StatsD server and with DogStatsD: the reference's cases.
func TestFormatLines(t *testing.T) {
	const hits = "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits"
	extra, err := ParseTags("DEPLOY:67890,COMMIT:12345")
	if err != nil {
		t.Fatal(err)
	}
	custom, err := NewMogrifier(`^ratelimit\.(.*)$`, "custom.$1", "tag1:value1,tag2:value2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		f    format
		name string
		want string
	}{
		{"plain, no tags", format{}, hits, hits + ":1|c"},
		{"plain, one tag", format{tags: Tags{{"COMMIT", "12345"}}}, hits, hits + ".__COMMIT=12345:1|c"},
		{"plain, two tags in key order", format{tags: extra}, hits, hits + ".__COMMIT=12345.__DEPLOY=67890:1|c"},
		{"plain: mogrifiers are DogStatsD's", format{tags: extra, mogrifiers: Mogrifiers{custom}}, hits, hits + ".__COMMIT=12345.__DEPLOY=67890:1|c"},
		{"DogStatsD, no tags", format{dogStatsD: true}, hits, hits + ":1|c"},
		{"DogStatsD, extra tags", format{dogStatsD: true, tags: extra}, hits, hits + ":1|c|#COMMIT:12345,DEPLOY:67890"},
		{"DogStatsD, a match and extra tags", format{dogStatsD: true, tags: extra, mogrifiers: Mogrifiers{custom}}, hits,
			"custom.service.rate_limit.mongo_cps.database_users.total_hits:1|c|#COMMIT:12345,DEPLOY:67890,tag1:value1,tag2:value2"},
		{"DogStatsD, a match without extra tags", format{dogStatsD: true, mogrifiers: Mogrifiers{custom}}, hits,
			"custom.service.rate_limit.mongo_cps.database_users.total_hits:1|c|#tag1:value1,tag2:value2"},
		{"DogStatsD, extra tags and no match", format{dogStatsD: true, tags: extra, mogrifiers: Mogrifiers{custom}},
			"foo.service.rate_limit.mongo_cps.database_users.total_hits", "foo.service.rate_limit.mongo_cps.database_users.total_hits:1|c|#COMMIT:12345,DEPLOY:67890"},
		{"DogStatsD, nothing to do", format{dogStatsD: true, mogrifiers: Mogrifiers{custom}}, "other.metric.name", "other.metric.name:1|c"},
	} {
		if got := string(c.f.line(c.name, []byte("1"), "c")); got != c.want+"\n" {
			t.Errorf("%s:\n got %q\nwant %q", c.what, got, c.want+"\n")
		}
	}
}

// TestParseTags: EXTRA_TAGS's format, sorted by key, values as the
// reference's stats library sends them.
func TestParseTags(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"team:edge":               "team:edge",
		"zone:eu,app:rl":          "app:rl,zone:eu",
		"version:1.2.3,ref:a|b":   "ref:a_b,version:1_2_3",
		"team:edge,team:core":     "error: given twice",
		"team":                    "error: want key:value",
		"url:http://x":            "error: want key:value",
		"team:":                   "error: want a key and a value",
		":edge":                   "error: want a key and a value",
		"a=b:c":                   "error: a key holds none",
		"k8s.ns:edge":             "k8s.ns:edge",
		"team:edge core":          "error: a value holds no",
		"team:edge,,zone:eu":      "error: want key:value",
		"k1:v1,k2:v2,k3:v3,k0:v0": "k0:v0,k1:v1,k2:v2,k3:v3",
	} {
		tags, err := ParseTags(in)
		if wantErr, ok := strings.CutPrefix(want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%q: %v (%s), want an error containing %q", in, err, tags, wantErr)
			}
			continue
		}
		if err != nil || tags.String() != want {
			t.Errorf("%q: %s, %v, want %s", in, tags, err, want)
		}
	}
	tags, _ := ParseTags("b:2,a:1")
	if !slices.Equal(tags, Tags{{"a", "1"}, {"b", "2"}}) {
		t.Errorf("%v", tags)
	}
}
