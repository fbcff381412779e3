// Package descriptors loads the rate-limit configuration and resolves request
// descriptors to the buckets they are checked against. It decides nothing
// and keeps no bucket: deciding is package limit's, keeping pkg/store's.
//
// A config file holds one domain and a tree of descriptors, in a superset of
// envoyproxy/ratelimit's format (with Options.MergeDomains, several files
// may add top-level descriptors to one domain, as its MERGE_DOMAIN_CONFIG
// does):
//
//	domain: api
//	descriptors:
//	  - key: user                 # any value: one bucket per user
//	    leaky_bucket: {size: 60, drip_rate: 1s}
//	    descriptors:
//	      - key: action
//	        value: trade          # exact value
//	        rate_limit: {unit: minute, requests_per_unit: 5}
//
// Loading is strict: an unknown field, a value of the wrong type or a limit
// out of range is an error naming the file, the line and the field, and a
// file with any error is not used. Fields of envoyproxy/ratelimit that have
// no effect here are accepted with a warning.
//
// Loading is bounded for hostile files: YAML aliases may add at most
// 1,000,000 nodes to what a file spells out, the strings the compiled tree
// repeats per node (paths, bucket-key parts) at most 64 MiB plus four times
// the file's size, and a file lists at most 100 errors and 100 warnings.
// Otherwise the cost follows the size: loading allocates about 35 bytes
// per byte of YAML (mostly yaml.v3's node tree, garbage once its file is
// read), and the compiled tree keeps about 4.
//
// The compiled tree is immutable. Domain.Resolve turns a request descriptor
// such as [user=alex, action=trade] into every level on its path that has a
// limit (user=alex, then user=alex/action=trade), each with a bucket key that
// no other descriptor path can produce. Domain.Explain is the same walk,
// recorded: every node reached, with its file line and how it matched, and
// why each limit not checked was skipped.
package descriptors
