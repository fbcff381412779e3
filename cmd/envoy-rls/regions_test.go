package main

import (
	"io"
	"strings"
	"testing"
)

// TestRegionFlags: the region settings parse as documented, and each
// wrong one is refused with a message naming the flag and what is wrong,
// never a password of a peer's URL.
func TestRegionFlags(t *testing.T) {
	s, err := parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers",
		"us=redis://redis.us:6379/0, ap=rediss://:s3cret@redis.ap:6380/0?addr=redis.ap:6381"}, lookupIn(nil), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.region.parsed; len(got) != 2 || got[0] != (regionPeer{"us", "redis://redis.us:6379/0", false}) ||
		got[1].name != "ap" || !got[1].cluster {
		t.Fatalf("peers %+v", got)
	}
	if s, err := parseFlags([]string{"-store", "redis"}, lookupIn(map[string]string{"RLS_REGION": "eu", "RLS_REGION_PEERS": "us=redis://u:1/0"}), io.Discard, false); err != nil || s.region.name != "eu" || len(s.region.parsed) != 1 {
		t.Fatalf("from the environment: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-region", "eu"}, "-region needs -store redis"},
		{[]string{"-store", "memcached", "-memcached-addrs", "m:11211", "-region", "eu"}, "-region needs -store redis"},
		{[]string{"-store", "redis", "-region", "EU"}, `-region "EU"`},
		{[]string{"-store", "redis", "-region-peers", "us=redis://u:1/0"}, "-region-peers needs -region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us"}, `is not NAME=URL`},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "eu=redis://u:1/0"}, "this replica's own region"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=redis://u:1/0,us=redis://v:1/0"}, `region "us" twice`},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "us=http://u:1/0"}, "redis:// or rediss://"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "Us=redis://u:1/0"}, `"Us"`},
		{[]string{"-store", "redis", "-region", "eu", "-region-interval", "0s"}, "-region-interval"},
		{[]string{"-store", "redis", "-region", "eu", "-region-silence", "500ms"}, "-region-silence"},
		{[]string{"-store", "redis", "-redis-mode", "transactions", "-region", "eu"}, "-redis-mode script"},
		{[]string{"-store", "redis", "-region", "eu", "-region-peers", "rediss://:s3cret@redis.ap:6380/0"}, "item 1 is not NAME=URL"},
	} {
		_, err := parseFlags(c.args, lookupIn(nil), io.Discard, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	for _, peers := range []string{"us=://:s3cret@x", "rediss://:s3cret@redis.ap:6380/0", "us=redis://:s3cret@x:1/0,eu=redis://:s3cret@y:1/0"} {
		_, err = parseFlags([]string{"-store", "redis", "-region", "eu", "-region-peers", peers}, lookupIn(nil), io.Discard, false)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("-region-peers %s: %v (an error, the password never shown)", peers, err)
		}
	}
}
