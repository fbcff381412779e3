package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/xdsconfig"
)

// xdsClientSettings are the -config-xds-* flags of the client itself:
// what it sends the server, the largest response it takes, and how it
// waits to connect again.
type xdsClientSettings struct {
	nodeMetadata pairs // key=value
	headers      pairs // name:value
	maxMessage   byteSize
	backoff      xdsconfig.Backoff
}

func (x *xdsClientSettings) register(fs *flag.FlagSet) {
	x.nodeMetadata = pairs{sep: "=", what: "key=value"}
	x.headers = pairs{sep: ":", what: "name:value", check: checkHeader}
	x.backoff = xdsconfig.Backoff{Min: xdsconfig.DefaultBackoffMin, Max: xdsconfig.DefaultBackoffMax, Factor: xdsconfig.DefaultBackoffFactor}
	fs.Var(&x.nodeMetadata, "config-xds-node-metadata", "the node's metadata for the xDS server, as comma-separated `key=value` pairs (string values), as envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA")
	fs.Var(&x.headers, "config-xds-headers", "gRPC metadata sent to the xDS server when each stream opens, as comma-separated `name:value` pairs (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)")
	fs.Var(&x.maxMessage, "config-xds-max-message-size", "most `bytes` of a response of the xDS server, e.g. 16MiB; 0 is gRPC's 4MiB. A larger one is refused: the stream ends, the config in force stays")
	fs.DurationVar(&x.backoff.Min, "config-xds-backoff-initial", x.backoff.Min, "after the stream to the xDS server ends, the first wait before connecting again")
	fs.DurationVar(&x.backoff.Max, "config-xds-backoff-max", x.backoff.Max, "the longest wait before connecting to the xDS server again")
	fs.Float64Var(&x.backoff.Factor, "config-xds-backoff-factor", x.backoff.Factor, "each wait before connecting to the xDS server again is the last times this, from -config-xds-backoff-initial up to -config-xds-backoff-max (below 1: each is the initial)")
	fs.BoolVar(&x.backoff.Jitter, "config-xds-backoff-jitter", false, "draw each wait before connecting to the xDS server again at random between -config-xds-backoff-initial and the wait the factor gives")
}

// check checks the flags; address is -config-xds's.
func (x *xdsClientSettings) check(address string) error {
	switch b := x.backoff; {
	case address == "" && (x.nodeMetadata.m != nil || x.headers.m != nil || x.maxMessage != 0):
		return fmt.Errorf("-config-xds-node-metadata, -config-xds-headers and -config-xds-max-message-size need -config-xds")
	case b.Min <= 0 || b.Max <= 0:
		return fmt.Errorf("-config-xds-backoff-initial and -config-xds-backoff-max must be positive, got %s and %s", b.Min, b.Max)
	case !(b.Factor > 0): // NaN too
		return fmt.Errorf("-config-xds-backoff-factor: must be positive, got %g", b.Factor)
	case int64(x.maxMessage) > int64(maxInt):
		return fmt.Errorf("-config-xds-max-message-size: %d bytes is too large", x.maxMessage)
	}
	return nil
}

const maxInt = int(^uint(0) >> 1)

// apply sets the client's settings.
func (x *xdsClientSettings) apply(c *xdsconfig.Client) {
	c.NodeMetadata, c.Headers = x.nodeMetadata.m, x.headers.m
	c.MaxMessageBytes, c.Backoff = int(x.maxMessage), x.backoff
}

// pairs is a flag of comma-separated pairs, each split at sep: the
// format envoyproxy/ratelimit reads its xDS client's node metadata and
// headers in. An empty item (a trailing comma) is skipped; spaces around
// an item or either side of sep are dropped.
type pairs struct {
	sep, what string
	check     func(key, value string) error
	text      string
	m         map[string]string
}

func (p *pairs) String() string { return p.text }

func (p *pairs) Set(s string) error {
	m, err := parsePairs(s, p.sep, p.what, p.check)
	if err != nil {
		return err
	}
	p.text, p.m = s, m
	return nil
}

func parsePairs(s, sep, what string, check func(key, value string) error) (map[string]string, error) {
	m := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, sep)
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want %s pairs, comma-separated", item, what)
		}
		if check != nil {
			if err := check(k, v); err != nil {
				return nil, fmt.Errorf("%q: %w", item, err)
			}
		}
		m[k] = v
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// checkHeader refuses what gRPC would refuse to send: a name outside
// [0-9a-z-_.] (upper case is lowered, as gRPC lowers it), one of gRPC's
// own (grpc-), and a value with a character outside printable ASCII
// (unless the name ends in -bin, a binary header).
func checkHeader(name, value string) error {
	name = strings.ToLower(name)
	for _, c := range name {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("the header name may hold 0-9, a-z, '-', '_' and '.' only")
		}
	}
	if strings.HasPrefix(name, "grpc-") {
		return fmt.Errorf("headers named grpc- are gRPC's own")
	}
	if strings.HasSuffix(name, "-bin") {
		return nil
	}
	for _, c := range value {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("the value may hold printable ASCII only (or name the header ...-bin)")
		}
	}
	return nil
}

// xdsClient maps the reference's settings of its xDS client: its node
// metadata and headers, the largest response, and its backoff, whose
// defaults (10s, 60s, 0.5, jitter) are its own: with them, every wait is
// 10s.
func (r *envoyReader) xdsClient() {
	for _, v := range []struct{ name, flag, sep, what string }{
		{"CONFIG_GRPC_XDS_NODE_METADATA", "config-xds-node-metadata", "=", "key=value"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "config-xds-headers", ":", "name:value"},
	} {
		s := r.get(v.name, "")
		if s == "" {
			continue
		}
		check := checkHeader
		if v.sep == "=" {
			check = nil
		}
		if _, err := parsePairs(s, v.sep, v.what, check); err != nil {
			r.fail(v.name, "%v", err)
			continue
		}
		r.set(v.flag, s)
	}
	if s := r.get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""); s != "" {
		if n, err := strconv.Atoi(s); err != nil || n < 0 {
			r.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "%q: want a number of bytes", s)
		} else {
			r.set("config-xds-max-message-size", s) // 0: gRPC's default, as there
		}
	}
	// jpillora/backoff, which the reference uses, takes a zero or negative
	// setting for its own default.
	durations := map[string]struct {
		flag string
		def  time.Duration
		zero time.Duration
	}{
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": {"config-xds-backoff-initial", 10 * time.Second, 100 * time.Millisecond},
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL":     {"config-xds-backoff-max", 60 * time.Second, 10 * time.Second},
	}
	for _, name := range slices.Sorted(maps.Keys(durations)) {
		v := durations[name]
		d := v.def
		if s := r.get(name, ""); s != "" {
			var err error
			if d, err = time.ParseDuration(s); err != nil {
				r.fail(name, "%q: want a duration such as 10s", s)
				continue
			}
		}
		if d <= 0 {
			d = v.zero
		}
		r.set(v.flag, d.String())
	}
	factor := 0.5
	if s := r.get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", ""); s != "" {
		var err error
		if factor, err = strconv.ParseFloat(s, 64); err != nil || factor != factor {
			r.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "%q: want a number (each wait is the last times it)", s)
		}
	}
	if factor <= 0 {
		factor = 2
	}
	r.set("config-xds-backoff-factor", strconv.FormatFloat(factor, 'g', -1, 64))
	r.set("config-xds-backoff-jitter", strconv.FormatBool(r.on("XDS_CLIENT_BACKOFF_JITTER", true)))
}
