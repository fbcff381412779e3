// Package grpcconn lets a gRPC handler close the connection its call came
// on: a client that stops reading a stream's answers leaves them queued
// on the server, behind the stream's flow-control window, until it reads
// or its connection goes, and a stream ended meanwhile keeps its place
// (and its answers) on the connection. Closing the connection frees them
// all. Credentials wraps the server's transport credentials so that each
// call's peer carries its connection; Close closes it.
package grpcconn

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// Credentials wraps creds (nil: plaintext) so that Close finds a call's
// connection. The handshake and what the peer's AuthInfo says are those
// of creds.
func Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return wrapped{creds}
}

type wrapped struct {
	credentials.TransportCredentials
}

func (w wrapped) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := w.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return conn, &authInfo{AuthInfo: ai, conn: conn}, nil
}

func (w wrapped) Clone() credentials.TransportCredentials {
	return wrapped{w.TransportCredentials.Clone()}
}

// authInfo is the AuthInfo of creds, with the connection it was made for.
type authInfo struct {
	credentials.AuthInfo
	conn net.Conn
}

// GetCommonAuthInfo is the wrapped AuthInfo's, for gRPC's checks of a
// connection's security level.
func (a *authInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	if c, ok := a.AuthInfo.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}); ok {
		return c.GetCommonAuthInfo()
	}
	return credentials.CommonAuthInfo{}
}

// Unwrap returns the AuthInfo of the wrapped credentials.
func (a *authInfo) Unwrap() credentials.AuthInfo { return a.AuthInfo }

// Close closes the connection the call of ctx came on, ending every call
// on it, and reports whether it found one (the server's credentials must
// be Credentials).
func Close(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	a, ok := p.AuthInfo.(*authInfo)
	if !ok {
		return false
	}
	a.conn.Close()
	return true
}
