package main

import (
	"flag"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// configFlags are the flags that say how config files read: what a
// rate_limit becomes, when limits are charged, which levels count, whether
// the files of one domain merge and whether dot files are read. serve,
// check-config and explain take them alike.
type configFlags struct {
	algo         choice[limit.Algorithm]
	charge       choice[descriptors.Charge]
	match        choice[bool] // true: leaf
	mergeDomains bool
	dotFiles     bool
}

func newConfigFlags(fs *flag.FlagSet) *configFlags {
	c := &configFlags{
		algo: algorithmFlag(),
		charge: choice[descriptors.Charge]{descriptors.ChargeAdmitted, []option[descriptors.Charge]{
			{"admitted", descriptors.ChargeAdmitted}, {"always", descriptors.ChargeAlways}}},
		match: choice[bool]{false, []option[bool]{{"all", false}, {"leaf", true}}},
	}
	fs.Var(&c.algo, "rate-limit-algorithm", algorithmUsage)
	fs.Var(&c.charge, "charge", "when the limits of files that do not set charge are charged: admitted (only admitted requests, all or nothing) or always (every call's hits, past the limit if need be: usage known after the response)")
	fs.Var(&c.match, "match", "which levels count in files that do not set match: all (every level on a request's path) or leaf (the deepest, as envoyproxy/ratelimit)")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "let several files (or xDS resources) define one domain, each adding its top-level descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a top-level descriptor in two of them, or files that differ on match, charge, rate_limit_algorithm, calendar, time_zone or over_limit_body, is an error")
	fs.BoolVar(&c.dotFiles, "config-dotfiles", false, "also read the config directory's files whose name starts with a dot (envoyproxy/ratelimit reads them unless RUNTIME_IGNOREDOTFILES=true); a Kubernetes volume's ..data and ..<timestamp> entries are skipped still")
	return c
}

// options are how the config files are read.
func (c *configFlags) options() descriptors.Options {
	return descriptors.Options{RateLimitAlgorithm: c.algo.value, Charge: c.charge.value, Leaf: c.match.value,
		MergeDomains: c.mergeDomains, DotFiles: c.dotFiles}
}

// usageFlags are the service's flags for what envoyproxy/ratelimit's
// quota mode, dynamic metadata and response headers do.
type usageFlags struct {
	quotaMode       bool
	dynamicMetadata bool
	headerNames     rls.ReferenceHeaderNames
}

func newUsageFlags(fs *flag.FlagSet) *usageFlags {
	u := &usageFlags{}
	fs.BoolVar(&u.quotaMode, "quota-mode", false, "put every limit in quota mode (envoyproxy/ratelimit's QUOTA_MODE): a descriptor over its limit rejects the request only when every descriptor of it is over (one that matches no limit is never over, as there)")
	fs.BoolVar(&u.dynamicMetadata, "response-dynamic-metadata", false, "send the response's dynamic metadata as envoyproxy/ratelimit does (RESPONSE_DYNAMIC_METADATA): domain, descriptors, hits and the metadata of the limits that passed, for routing to a backend with quota")
	fs.StringVar(&u.headerNames.Limit, "response-header-limit", "RateLimit-Limit", "with -response-headers envoyproxy: the `name` of the header giving the limit (LIMIT_LIMIT_HEADER)")
	fs.StringVar(&u.headerNames.Remaining, "response-header-remaining", "RateLimit-Remaining", "with -response-headers envoyproxy: the `name` of the header giving what remains (LIMIT_REMAINING_HEADER)")
	fs.StringVar(&u.headerNames.Reset, "response-header-reset", "RateLimit-Reset", "with -response-headers envoyproxy: the `name` of the header giving the seconds until reset (LIMIT_RESET_HEADER)")
	return u
}

// apply sets the service's options.
func (u *usageFlags) apply(o *rls.Options) {
	o.QuotaMode, o.DynamicMetadata, o.ReferenceHeaders = u.quotaMode, u.dynamicMetadata, u.headerNames
}
