package rlqs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// badReport is a report the service cannot serve: the client's mistake.
type badReport struct{ msg string }

func (e *badReport) Error() string { return e.msg }

func badReportf(format string, args ...any) error {
	return &badReport{msg: fmt.Sprintf(format, args...)}
}

// capError is a cap reached: too many streams.
type capError struct{ msg string }

func (e *capError) Error() string { return e.msg }

func errTooManyStreams(n int) error {
	return &capError{msg: fmt.Sprintf("too many RLQS streams: at most %d at once (-rlqs-max-streams)", n)}
}

// notReady is a stream that cannot be served yet: no config.
type notReady struct{ msg string }

func (e *notReady) Error() string { return e.msg }

// stalledError ends a stream whose client has not taken an answer for
// the stream's TTL.
type stalledError struct{ after time.Duration }

func errStalled(after time.Duration) error { return &stalledError{after: after} }

func (e *stalledError) Error() string {
	return fmt.Sprintf("an answer of this stream was not read for %s (its assignments' TTL): the stream is ended; a client must read its answers", e.after)
}

// errClosing ends a stream when the service closes.
var errClosing = errors.New("the server is shutting down: reconnect to another replica")

// grpcStatus chooses the gRPC code of a stream's end: the one place codes
// are chosen. A client that closed its stream ends it cleanly.
func grpcStatus(err error) error {
	var (
		bad *badReport
		cp  *capError
		nr  *notReady
		sl  *stalledError
	)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return nil
	case errors.As(err, &bad):
		return status.Error(codes.InvalidArgument, bad.msg)
	case errors.As(err, &cp):
		return status.Error(codes.ResourceExhausted, cp.msg)
	case errors.As(err, &sl):
		return status.Error(codes.ResourceExhausted, sl.Error())
	case errors.As(err, &nr):
		return status.Error(codes.Unavailable, nr.msg)
	case errors.Is(err, errClosing):
		return status.Error(codes.Unavailable, errClosing.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err // the transport's own (the client went away)
	}
	return status.Error(codes.Internal, "rlqs: "+err.Error())
}
