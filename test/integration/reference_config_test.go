package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/envoyflows"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// The reference's config settings, on the binary started as ratelimit:
// MERGE_DOMAIN_CONFIG, RUNTIME_IGNOREDOTFILES, FORCE_START_WITHOUT_INITIAL_CONFIG
// with files, and its xDS client's settings. The store is the memory one
// (RLS_STORE beats BACKEND_TYPE): what is tested is the config.

// teamLimit is a file of domain shop with a limit of n a minute on team=value.
func teamLimit(value string, n int) string {
	return fmt.Sprintf("domain: shop\ndescriptors:\n  - key: team\n    value: %s\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", value, n)
}

// writeFiles writes each name's content under dir, making directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fileEnv is the reference's environment for a config in root/ratelimit/config,
// without the admin address (so that two can run at once).
func fileEnv(root string, more ...string) []string {
	return append([]string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=info", "RLS_STORE=memory", "RLS_ADMIN_ADDR="}, more...)
}

// shopCodes sends a call for team=value to p n times, and returns the
// overall codes.
func shopCodes(t *testing.T, p *process, value string, n int) string {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := request([]string{"team=" + value})
	req.Domain = "shop"
	var got []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, p.out)
		}
		got = append(got, resp.GetOverallCode().String())
	}
	return strings.Join(got, " ")
}

// runAsRatelimit runs the binary as ratelimit with env until it exits
// (within 10s), and returns its output and exit code.
func runAsRatelimit(t *testing.T, env ...string) (string, int) {
	t.Helper()
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(envoyRLS(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ratelimit)
	out := &binarytest.Output{}
	cmd.Env = append(env, "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "PORT=0", "GRPC_PORT=0")
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("still running after 10s; output:\n%s", out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// TestStartedAsRatelimitMergesDomains: with MERGE_DOMAIN_CONFIG=true, two
// files of one domain both apply; a top-level descriptor in both stops
// the start, naming both places.
func TestStartedAsRatelimitMergesDomains(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	red, blue := filepath.Join(dir, "1-red.yaml"), filepath.Join(dir, "2-blue.yaml") // read in this order
	writeFiles(t, dir, map[string]string{"1-red.yaml": teamLimit("red", 1), "2-blue.yaml": "# blue\n" + teamLimit("blue", 1)})
	rl := startAsRatelimit(t, "127.0.0.1", fileEnv(root, "MERGE_DOMAIN_CONFIG=true")...)
	envoyflows.AwayFromMinuteEdge(3 * time.Second)
	for _, team := range []string{"red", "blue"} {
		if got := shopCodes(t, rl, team, 2); got != "OK OVER_LIMIT" {
			t.Errorf("team=%s at 1 a minute: %s, want OK OVER_LIMIT (its file's limit); output:\n%s", team, got, rl.out)
		}
	}

	// A collision: 2-blue.yaml defines team=red too, on line 9 (line 3 in
	// 1-red.yaml). The log quotes the message: the parts without quotes.
	writeFiles(t, dir, map[string]string{"2-blue.yaml": "# blue\n" + teamLimit("blue", 1) + "  - key: team\n    value: red\n"})
	out, code := runAsRatelimit(t, fileEnv(root, "MERGE_DOMAIN_CONFIG=true")...)
	if code == 0 || !strings.Contains(out, blue+":9: descriptors[1]: duplicate descriptor: key") || !strings.Contains(out, "is already defined in "+red+":3") {
		t.Errorf("exit %d, output:\n%s\nwant a failure naming %s:9 and %s:3", code, out, blue, red)
	}
	// Without MERGE_DOMAIN_CONFIG, two files of one domain stop the start.
	writeFiles(t, dir, map[string]string{"2-blue.yaml": teamLimit("blue", 1)})
	if out, code := runAsRatelimit(t, fileEnv(root)...); code == 0 || !strings.Contains(out, blue+":1: domain:") || !strings.Contains(out, "is already defined in "+red+":1") {
		t.Errorf("without merging: exit %d, output:\n%s", code, out)
	}
}

// TestStartedAsRatelimitReadsDotFiles: a file whose name starts with a dot
// is read unless RUNTIME_IGNOREDOTFILES=true, as in the reference; beside
// it, a ConfigMap volume's own ..data entries are not, and its swaps are
// followed.
func TestStartedAsRatelimitReadsDotFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	writeFiles(t, dir, map[string]string{"..2026_01_01_00_00_00.1/red.yaml": teamLimit("red", 1), ".blue.yaml": strings.ReplaceAll(teamLimit("blue", 1), "shop", "hidden")})
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/red.yaml", filepath.Join(dir, "red.yaml")); err != nil {
		t.Fatal(err)
	}
	hidden := func(p *process, n int) string {
		t.Helper()
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := request([]string{"team=blue"})
		req.Domain = "hidden"
		var got []string
		for range n {
			resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, resp.GetOverallCode().String())
		}
		return strings.Join(got, " ")
	}
	envoyflows.AwayFromMinuteEdge(5 * time.Second)
	ignoring := startAsRatelimit(t, "127.0.0.1", fileEnv(root, "RUNTIME_IGNOREDOTFILES=true")...)
	if got := hidden(ignoring, 2); got != "OK OK" {
		t.Errorf("RUNTIME_IGNOREDOTFILES=true: %s, want the dot file not read", got)
	}
	rl := startAsRatelimit(t, "127.0.0.1", fileEnv(root)...)
	if got := hidden(rl, 2); got != "OK OVER_LIMIT" {
		t.Errorf("RUNTIME_IGNOREDOTFILES unset: %s, want the dot file's limit; output:\n%s", got, rl.out)
	}
	if got := shopCodes(t, rl, "red", 2); got != "OK OVER_LIMIT" {
		t.Errorf("the ConfigMap's file: %s, want its limit; output:\n%s", got, rl.out)
	}

	// Kubernetes updates the volume: a new timestamped directory, and
	// ..data swapped to it at once.
	writeFiles(t, dir, map[string]string{"..2026_01_01_00_01_00.2/red.yaml": teamLimit("red", 1000)})
	if err := os.Symlink("..2026_01_01_00_01_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, rl, "the swapped volume", func() bool { return shopCodes(t, rl, "red", 1) == "OK" })
}

// TestStartedAsRatelimitForceStartsWithFiles: with
// FORCE_START_WITHOUT_INITIAL_CONFIG=true and no config directory yet,
// the service starts healthy, allows every call, and applies the config
// once it is written.
func TestStartedAsRatelimitForceStartsWithFiles(t *testing.T) {
	root := t.TempDir()
	env := fileEnv(root, "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
	if out, code := runAsRatelimit(t, fileEnv(root)...); code == 0 || !strings.Contains(out, "ratelimit/config") {
		t.Fatalf("without the setting: exit %d, want a failure naming the missing config; output:\n%s", code, out)
	}
	rl := startAsRatelimit(t, "127.0.0.1", env...) // GET /healthcheck answers 200
	if got := shopCodes(t, rl, "red", 2); got != "OK OK" {
		t.Fatalf("without a config: %s, want every call allowed", got)
	}
	if !strings.Contains(rl.out.String(), "starting without a config") {
		t.Errorf("no warning of the start without a config:\n%s", rl.out)
	}
	envoyflows.AwayFromMinuteEdge(15 * time.Second)
	writeFiles(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"red.yaml": teamLimit("red", 1)})
	waitFor(t, rl, "the config written after the start", func() bool { return shopCodes(t, rl, "red", 1) == "OVER_LIMIT" })

	// Watched from then on: a change applies.
	writeFiles(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"red.yaml": teamLimit("red", 1000)})
	waitFor(t, rl, "the changed config", func() bool { return shopCodes(t, rl, "red", 1) == "OK" })
}

// TestStartedAsRatelimitXDSClientSettings: the xDS client's settings reach
// the server (node metadata, headers), a response over
// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES is refused with the config in force
// kept, and MERGE_DOMAIN_CONFIG merges two resources of one domain.
func TestStartedAsRatelimitXDSClientSettings(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xds := xdstest.Start(t, lis)
	rl := startAsRatelimit(t, "127.0.0.1", "USE_STATSD=false", "LOG_LEVEL=info", "RLS_STORE=memory", "RLS_ADMIN_ADDR=",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+xds.Addr, "CONFIG_GRPC_XDS_NODE_ID=rl", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"CONFIG_GRPC_XDS_NODE_METADATA=cluster=eu-1,zone=b", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=x-token:s3cret",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=1024", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=200ms",
		"MERGE_DOMAIN_CONFIG=true")
	limit := func(name, team string, n uint32) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: name, Domain: "shop", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "team", Value: team, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
	}
	envoyflows.AwayFromMinuteEdge(15 * time.Second)
	xds.Set(t, "rl", "1", limit("shop-red", "red", 1), limit("shop-blue", "blue", 1))
	waitFor(t, rl, "the merged resources", func() bool { return shopCodes(t, rl, "red", 1) == "OVER_LIMIT" })
	if got := shopCodes(t, rl, "blue", 2); got != "OK OVER_LIMIT" {
		t.Errorf("team=blue, from the second resource of the domain: %s", got)
	}
	md := xds.Node().GetMetadata().GetFields()
	if xds.Node().GetId() != "rl" || md["cluster"].GetStringValue() != "eu-1" || md["zone"].GetStringValue() != "b" {
		t.Errorf("the server saw the node %v", xds.Node())
	}
	if got := xds.Headers().Get("x-token"); len(got) != 1 || got[0] != "s3cret" {
		t.Errorf("the server saw the headers %v", xds.Headers())
	}

	// Over 1024 bytes: refused, the config in force kept.
	big := limit("shop-red", "red", 1000)
	for i := range 50 {
		big.Descriptors = append(big.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "path", Value: fmt.Sprintf("/some/longer/path/%03d", i)})
	}
	xds.Set(t, "rl", "2", big)
	waitFor(t, rl, "the refusal of the large response", func() bool { return strings.Contains(rl.out.String(), "ResourceExhausted") })
	if got := shopCodes(t, rl, "red", 1); got != "OVER_LIMIT" {
		t.Errorf("after the large response: %s, want the config in force (1 a minute) kept", got)
	}
}
