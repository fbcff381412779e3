package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/envoyflows"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// TestQuotaModeOverXDS starts the binary as Envoy Gateway runs its
// rate-limit deployment (as ratelimit, the config from an xDS server) with
// RESPONSE_DYNAMIC_METADATA=true, on memory and on Redis, and pushes what
// Envoy AI Gateway's QuotaPolicy pushes: descriptors in quota mode whose
// metadata names a backend. The quota-based backend selection admits 5 of
// 7 and routes to the reference's backends; a push that turns quota mode
// off takes effect; GET /config and envoy-rls explain -admin show the
// quota mode and the metadata of the domain from xDS.
func TestQuotaModeOverXDS(t *testing.T) {
	stores := map[string]func(t *testing.T) []string{
		"memory": func(*testing.T) []string { return []string{"RLS_STORE=memory"} },
		"redis": func(t *testing.T) []string {
			return []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redistest.Start(t).Addr()}
		},
	}
	for name, env := range stores {
		t.Run(name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			xds := xdstest.Start(t, lis)
			const node = "envoy-ratelimit"
			// A field of a newer API on one descriptor: taken without it,
			// logged and counted.
			flip := envoyflows.Resource("flip", true)
			flip.Descriptors[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
			xds.Set(t, node, "1", envoyflows.Resource(envoyflows.Domain, true), flip)
			admin := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
			adminHost, adminPort, _ := net.SplitHostPort(admin)
			rl := startAsRatelimit(t, "127.0.0.1", append(env(t), "USE_STATSD=false", "LOG_LEVEL=info",
				"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+xds.Addr, "CONFIG_GRPC_XDS_NODE_ID="+node,
				"RESPONSE_DYNAMIC_METADATA=true", "DEBUG_HOST="+adminHost, "DEBUG_PORT="+adminPort)...)
			conn, err := grpc.NewClient(rl.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			call := func(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
				return client.ShouldRateLimit(ctx, req)
			}

			envoyflows.AwayFromMinuteEdge(5 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			picked, err := envoyflows.QuotaBackends(ctx, call)
			if err != nil || !slices.Equal(picked, envoyflows.QuotaBackendsPicked) {
				t.Fatalf("quota backends over xDS: %v (%v), want %v as envoyproxy/ratelimit; output:\n%s",
					picked, err, envoyflows.QuotaBackendsPicked, rl.out)
			}

			// Domain flip: service_1 past its limit, service_2 not. In
			// quota mode a request checking both passes (not every quota
			// descriptor is over); without, service_1 rejects it.
			both := func() string {
				t.Helper()
				req := request([]string{"service=service_1"}, []string{"service=service_2"})
				req.Domain = "flip"
				for _, d := range req.Descriptors {
					d.HitsAddend = wrapperspb.UInt64(0)
				}
				resp, err := client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return resp.GetOverallCode().String()
			}
			charge := request([]string{"service=service_1"})
			charge.Domain, charge.Descriptors[0].HitsAddend = "flip", wrapperspb.UInt64(2)
			if _, err := client.ShouldRateLimit(ctx, charge); err != nil {
				t.Fatal(err)
			}
			if got := both(); got != "OK" {
				t.Fatalf("quota mode on, one of two quota descriptors over: %s, want OK", got)
			}

			const counted = `envoy_rls_xds_unknown_fields_total{field="99",message="ratelimit.config.ratelimit.v3.RateLimitDescriptor"} 1`
			if m := get(t, "http://"+rl.httpAddr+"/metrics"); !strings.Contains(m, counted) {
				t.Errorf("the unknown field is not counted: no %s", counted)
			}
			if !strings.Contains(rl.out.String(), "RateLimitDescriptor has field 99, which this service does not know (at descriptors[0])") {
				t.Errorf("the unknown field is not logged:\n%s", rl.out)
			}

			// What the service shows of the domain from xDS.
			cfgJSON := get(t, "http://"+admin+"/config")
			for _, want := range []string{`"file": "xds:flip"`, `"quota_mode": true`, `"service_with_quota"`, `"name": "service_2"`} {
				if !strings.Contains(cfgJSON, want) {
					t.Errorf("GET /config lacks %s:\n%s", want, cfgJSON)
				}
			}
			out, err := exec.Command(envoyRLS(t), "explain", "-admin", admin, "flip", "service=service_1").CombinedOutput()
			if err != nil {
				t.Fatalf("envoy-rls explain -admin: %v\n%s", err, out)
			}
			for _, want := range []string{"domain flip (xds:flip)", "quota mode:", `{"service_with_quota":{"name":"service_1"}}`, "now: admits 1 hits: false"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("envoy-rls explain -admin lacks %q:\n%s", want, out)
				}
			}

			xds.Set(t, node, "2", envoyflows.Resource(envoyflows.Domain, true), envoyflows.Resource("flip", false))
			waitFor(t, rl, "quota mode turned off", func() bool { return both() == "OVER_LIMIT" })
			if flip := domainJSON(get(t, "http://"+admin+"/config"), "flip"); flip == "" || strings.Contains(flip, `"quota_mode"`) {
				t.Errorf("GET /config shows quota mode on domain flip still, or not the domain:\n%s", flip)
			}
		})
	}
}

// domainJSON is domain's part of GET /config's answer, "" if it has none.
func domainJSON(config, domain string) string {
	_, rest, ok := strings.Cut(config, `"domain": "`+domain+`"`)
	if !ok {
		return ""
	}
	if end := strings.Index(rest, `"domain": "`); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// get returns the body of a GET that must answer 200.
func get(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, r.Status, body)
	}
	return string(body)
}
