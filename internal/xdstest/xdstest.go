// Package xdstest runs an xDS server for tests: go-control-plane's ADS
// server on a snapshot cache, as Envoy Gateway runs one for its rate-limit
// deployment, serving RateLimitConfig resources.
package xdstest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Server is a running xDS server.
type Server struct {
	cache cachev3.SnapshotCache
	nacks atomic.Int64
	// Addr is the address it listens on.
	Addr string

	mu      sync.Mutex
	node    *corev3.Node // of the last request
	headers metadata.MD  // of the last stream opened
}

// Start serves on lis until the test ends.
func Start(t testing.TB, lis net.Listener, opts ...grpc.ServerOption) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := &Server{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), Addr: lis.Addr().String()}
	srv := serverv3.NewServer(ctx, x.cache, serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			x.mu.Lock()
			x.headers = md.Copy()
			x.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				x.nacks.Add(1)
			}
			if n := req.GetNode(); n != nil {
				x.mu.Lock()
				x.node = n
				x.mu.Unlock()
			}
			return nil
		},
	})
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(func() { g.Stop(); cancel() })
	return x
}

// Set serves the configs, as version, to the node.
func (x *Server) Set(t testing.TB, node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Node returns the node of the last request that gave one, or nil.
func (x *Server) Node() *corev3.Node {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.node
}

// Headers returns the gRPC metadata of the last stream opened, or nil.
func (x *Server) Headers() metadata.MD {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.headers
}

// Nacks returns how many updates clients have refused so far.
func (x *Server) Nacks() int64 { return x.nacks.Load() }

// Limit is a domain with one limit of n per unit on key=value, named name.
func Limit(domain, key, value, name string, n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: key, Value: value, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n, Name: name},
	}}}
}
