package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// limitsApply checks through a replica that buckets are kept: a bucket of
// size 1 admits once, then rejects.
func limitsApply(t *testing.T, r *replica, value string) {
	t.Helper()
	req := request([]string{"v=" + value})
	if got := r.call(t, req).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v", got)
	}
	if got := r.call(t, req).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call: %v", got)
	}
}

func unavailable(t *testing.T, r *replica) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.client.ShouldRateLimit(ctx, request([]string{"v=refused"}))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	return err
}

func TestRedisAuthFromURL(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	ok := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: "redis://:s3cret@" + srv.Addr() + "/0"}})[0]
	limitsApply(t, ok, "auth")
	wrong := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: "redis://:guess@" + srv.Addr() + "/0"}})[0]
	if err := unavailable(t, wrong); strings.Contains(err.Error(), "guess") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

func TestRedisTLS(t *testing.T) {
	pki := testpki.New(t)
	srv := redistest.StartTLS(t, pki.ServerCert, pki.ServerKey, pki.CACert, "yes")
	mtls := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: srv.URL(), CAFile: pki.CACert, CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
	}})[0]
	limitsApply(t, mtls, "tls")
	// The server wants a client certificate.
	noCert := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{URL: srv.URL(), CAFile: pki.CACert}})[0]
	unavailable(t, noCert)
	// A client that does not trust the server's CA refuses it.
	untrusted := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: srv.URL(), CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
	}})[0]
	unavailable(t, untrusted)
}

func TestRedisSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "mymaster")
	r := startReplicas(t, 1, replicaOptions{client: redis.ClientOptions{
		URL: "redis://localhost/0", SentinelMaster: "mymaster", SentinelAddrs: []string{sentinel},
	}})[0]
	limitsApply(t, r, "sentinel")
	keys, err := master.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the master holds %v (%v), want the one bucket written through Sentinel", keys, err)
	}
}
