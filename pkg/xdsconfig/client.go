package xdsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Client subscribes to RateLimitConfig resources and hands each valid
// update to OnConfig. It speaks ADS through go-control-plane's generated
// stream rather than its sotw ADSClient, whose Fetch hides a response's
// version: the version is what tells a refused update sent again at once
// (the snapshot cache's answer to a NACK) from a new one.
type Client struct {
	// Address is the xDS server's host:port.
	Address string
	// NodeID names this service to the server (Envoy Gateway serves the
	// node id its rate-limit deployment is given).
	NodeID string
	// Credentials secure the connection (TLS, or insecure).
	Credentials credentials.TransportCredentials
	// Options say how resources are read, as files are.
	Options descriptors.Options
	// OnConfig receives each accepted config, in order.
	OnConfig func(*descriptors.Config)
	// OnRejected, if set, receives the error of each refused update.
	OnRejected func(error)
	// OnUnknownField, if set, receives each field of a resource that the
	// service does not know, once per resource, message and field number
	// for as long as the client runs (at most maxUnknownNoted of them);
	// each is logged too. The update is taken all the same, without it.
	OnUnknownField func(UnknownField)
	// Log receives connection failures and refused updates.
	Log *slog.Logger
	// NodeMetadata is sent as the node's metadata, each value a string
	// (envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA); none if empty.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata when each stream opens
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// MaxMessageBytes bounds a response of the server; 0 is gRPC's default,
	// 4 MiB. A larger one ends the stream (the config in force stays),
	// which opens again after the backoff.
	MaxMessageBytes int
	// Backoff is the wait before connecting again after the stream ended;
	// it starts again from its first wait once a stream got a response.
	Backoff Backoff

	// sleep waits d, or until ctx ends; nil waits on a timer. Tests set it.
	sleep func(ctx context.Context, d time.Duration) error
}

// Run subscribes until ctx ends, connecting again with backoff when the
// server is away or the stream breaks. It returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(c.Credentials)}
	if c.MaxMessageBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.MaxMessageBytes)))
	}
	conn, err := grpc.NewClient(c.Address, opts...)
	if err != nil {
		return fmt.Errorf("xds config: %w", err)
	}
	defer conn.Close()
	sleep := c.sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	s := &subscription{c: c}
	failures := 0
	for {
		err := s.stream(ctx, conn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.received {
			failures = 0 // the server answered: it is there
		}
		failures++
		wait := c.Backoff.Wait(failures, rand.Float64())
		c.Log.Warn("xds config: the stream ended; the config in force stays", "server", c.Address, "err", err, "retry_in", wait)
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// sleepCtx waits d, or until ctx ends, and returns ctx's error then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// subscription is what one Run keeps across streams: the version in force.
type subscription struct {
	c        *Client
	version  string // of the config in force, "" before the first
	received bool   // the last stream got a response
	// unknown holds the unknown fields told of already.
	unknown map[UnknownField]bool
}

// maxUnknownNoted bounds the unknown fields a client remembers telling
// of: beyond, each is told of again whenever it comes.
const maxUnknownNoted = 1000

// Waits before refusing again a version refused already: a server that
// answers a NACK by resending the same version at once (go-control-plane's
// snapshot cache does) would otherwise make both spin.
const (
	refuseAgainFirst = 100 * time.Millisecond
	refuseAgainMax   = 5 * time.Second
)

func (s *subscription) stream(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(s.c.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(s.c.Headers))
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: s.c.NodeID}
	if len(s.c.NodeMetadata) > 0 {
		node.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range s.c.NodeMetadata {
			node.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeURL, VersionInfo: s.version}); err != nil {
		return err
	}
	s.received = false
	var refused string // the last version refused, and how often since
	wait := refuseAgainFirst
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		s.received = true
		req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		cfg, err := s.build(resp)
		switch {
		case err == nil:
			s.version, refused, wait = resp.GetVersionInfo(), "", refuseAgainFirst
			s.c.OnConfig(cfg)
		case resp.GetVersionInfo() == refused:
			// The same refused version again: answer, but not at once.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait = min(wait*2, refuseAgainMax)
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		default:
			refused, wait = resp.GetVersionInfo(), refuseAgainFirst
			s.c.Log.Error("xds config: update refused; the config in force stays", "version", resp.GetVersionInfo(), "err", err)
			if s.c.OnRejected != nil {
				s.c.OnRejected(err)
			}
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		}
		req.VersionInfo = s.version // the version in force, whether this one was taken or not
		if err := st.Send(req); err != nil {
			return err
		}
	}
}

// build reads a response's resources into a config.
func (s *subscription) build(resp *discoveryv3.DiscoveryResponse) (*descriptors.Config, error) {
	if resp.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("resources of type %q: want %s", resp.GetTypeUrl(), TypeURL)
	}
	resources := make([]*rlsconfv3.RateLimitConfig, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		r := &rlsconfv3.RateLimitConfig{}
		if err := a.UnmarshalTo(r); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		resources[i] = r
		s.noteUnknown(r)
	}
	cfg, warnings, err := Build(resources, s.c.Options)
	for _, w := range warnings {
		s.c.Log.Warn("xds config: " + w.String())
	}
	var cfgErr *descriptors.Error
	if errors.As(err, &cfgErr) {
		lines := make([]string, len(cfgErr.Problems))
		for i, p := range cfgErr.Problems {
			lines[i] = p.String()
		}
		return nil, errors.New(strings.Join(lines, "; "))
	}
	return cfg, err
}

// noteUnknown logs and reports the fields of r that the service does not
// know, each once.
func (s *subscription) noteUnknown(r *rlsconfv3.RateLimitConfig) {
	for _, u := range unknownFields(r.GetName(), r.ProtoReflect()) {
		k := u
		k.Path = "" // once per resource, message and field, wherever it is
		if s.unknown[k] {
			continue
		}
		if s.unknown == nil {
			s.unknown = map[UnknownField]bool{}
		}
		if len(s.unknown) < maxUnknownNoted {
			s.unknown[k] = true
		}
		s.c.Log.Warn("xds config: "+u.String(), "resource", u.Resource, "message", u.Message, "field", u.Number, "at", u.Path)
		if s.c.OnUnknownField != nil {
			s.c.OnUnknownField(u)
		}
	}
}
