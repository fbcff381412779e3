package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// requestError is a malformed request: the caller's mistake.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// unsupportedError is something the service cannot do with its store.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

// unavailableError is something the service cannot do yet (no config).
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// storeError is a failure of the store: Redis down, a timeout. Its
// message, for the log, may name the store's address; clientMessage,
// for callers, does not.
type storeError struct{ err error }

func (e *storeError) Error() string { return "rate-limit store: " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// errNoTimeLeft is a store call not made: the call's deadline was too near
// to ask the store and still answer by the failure mode.
var errNoTimeLeft = fmt.Errorf("no time left to ask the store before the call's deadline: %w", context.DeadlineExceeded)

// clientMessage says what failed, never where: a caller has no business
// with the store's addresses, and a store's own error text may hold them
// (or worse), so none of it is passed on.
func (e *storeError) clientMessage() string {
	var (
		opErr  *net.OpError
		netErr net.Error
		errno  syscall.Errno
	)
	switch {
	case errors.Is(e.err, errNoTimeLeft):
		return "rate-limit store unavailable: too little of the call's deadline left to ask it"
	case errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, os.ErrDeadlineExceeded) ||
		(errors.As(e.err, &netErr) && netErr.Timeout()):
		return "rate-limit store unavailable: it did not answer in time"
	case errors.As(e.err, &opErr) && errors.As(opErr.Err, &errno):
		// The system's own words, which name no address: "connection
		// refused", "connection reset by peer", "no route to host".
		return "rate-limit store unavailable: " + errno.Error()
	case errors.As(e.err, &opErr) && opErr.Op == "dial":
		return "rate-limit store unavailable: cannot connect"
	case errors.As(e.err, &opErr):
		return "rate-limit store unavailable: connection failed"
	}
	return "rate-limit store unavailable"
}

// grpcStatus chooses the gRPC status of an error of the service. It is the
// one place codes are chosen: grpc-go would turn a plain error into Unknown.
func grpcStatus(err error) error {
	var (
		req         *requestError
		store       *storeError
		unsupported *unsupportedError
		unavailable *unavailableError
	)
	switch {
	case errors.As(err, &req):
		return status.Error(codes.InvalidArgument, req.msg)
	case errors.As(err, &unsupported):
		return status.Error(codes.Unimplemented, unsupported.msg)
	case errors.As(err, &unavailable):
		return status.Error(codes.Unavailable, unavailable.msg)
	case errors.As(err, &store):
		// Whatever failed (Redis down, a timeout), the service cannot decide:
		// Envoy's failure_mode_deny says what happens to the request.
		return status.Error(codes.Unavailable, store.clientMessage())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed before a decision")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was canceled")
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// RecoverUnary is a gRPC interceptor that turns a panic in a handler into an
// Internal error, logged with its stack, instead of a crashed process:
// grpc-go does not recover handler panics.
func RecoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

// RecoverStream is RecoverUnary for streams (the Rate Limit Quota
// Service's): a panic ends the stream with Internal, not the process.
func RecoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(srv, ss)
	}
}
