package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// perSecondSettings are the -redis-persecond-* flags: a second Redis for
// the buckets of limits counted per second (envoyproxy/ratelimit's
// REDIS_PERSECOND), set as the first Redis's flags set the first.
type perSecondSettings struct {
	redisFlags
	given []string // the flags set, but -redis-persecond-url
}

func (p *perSecondSettings) register(fs *flag.FlagSet) {
	p.redisFlags.register(fs, "redis-persecond", "the per-second Redis", "", "a second Redis `URL` for the limits counted per second (unit: second), as envoyproxy/ratelimit's REDIS_PERSECOND: their buckets live there, the others on -redis-url, and a request is all or nothing across both; empty: one Redis holds every bucket")
}

// noteGiven records which -redis-persecond-* flags fs was given.
func (p *perSecondSettings) noteGiven(fs *flag.FlagSet) {
	p.given = nil
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "redis-persecond-url" && strings.HasPrefix(f.Name, "redis-persecond-") {
			p.given = append(p.given, "-"+f.Name)
		}
	})
}

// check checks the flags; store is -store's.
func (p *perSecondSettings) check(store storeKind) error {
	switch {
	case p.url == "" && len(p.given) > 0:
		return fmt.Errorf("%s: needs -redis-persecond-url", p.given[0])
	case p.url == "":
		return nil
	case store != redisStore:
		return fmt.Errorf("-redis-persecond-url: a second Redis for per-second limits needs -store redis")
	}
	return p.redisFlags.check()
}

// server returns the per-second Redis of the store, or nil without one.
func (p *perSecondSettings) server() (*redis.Server, error) {
	if p.url == "" {
		return nil, nil
	}
	return p.redisFlags.server()
}
