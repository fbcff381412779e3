package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// healthcheck asks the local server's grpc.health.v1 whether it serves:
// exit 0 if it does, 1 if not. It is the container's HEALTHCHECK, since the
// image has no shell. Its flags, too, are read from RLS_* variables when not
// given (RLS_GRPC_ADDR is serve's too), and RLS_GRPC_TLS_CERT turns on -tls:
// so it reaches the server the container runs.
func (a *app) healthcheck(args []string) int {
	fs := flag.NewFlagSet("envoy-rls healthcheck", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	addr := fs.String("grpc-addr", ":8081", "address of the gRPC server to ask (an empty host means 127.0.0.1; unix:///path a Unix socket)")
	service := fs.String("service", rls.ServiceName, "service to ask about; \"\" for the whole server")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	useTLS := fs.Bool("tls", false, "connect with TLS, without verifying the certificate (the server is local); on when RLS_GRPC_TLS_CERT is set")
	clientCert := fs.String("tls-client-cert", "", "PEM `file` of a client certificate, for a server that requires one")
	clientKey := fs.String("tls-client-key", "", "PEM `file` of the client certificate's key")
	if err := parseArgs(fs, args); err != nil {
		return a.flagsFailed("healthcheck", err)
	}
	tlsGiven := false
	fs.Visit(func(f *flag.Flag) { tlsGiven = tlsGiven || f.Name == "tls" })
	if err := applyEnv(fs, a.lookupEnv); err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls healthcheck: %v\n", err)
		return exitUsage
	}
	if v, ok := a.lookupEnv(envName("grpc-tls-cert")); ok && v != "" && !tlsGiven {
		*useTLS = true
	}

	target, err := localTarget(*addr)
	if err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls healthcheck: -grpc-addr %q: %v\n", *addr, err)
		return exitUsage
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		c := &tls.Config{InsecureSkipVerify: true} // a probe of the local server: reachability, not identity
		if *clientCert != "" {
			cert, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
			if err != nil {
				fmt.Fprintf(a.stderr, "envoy-rls healthcheck: %v\n", err)
				return exitUsage
			}
			c.Certificates = []tls.Certificate{cert}
		}
		creds = credentials.NewTLS(c)
	}
	return a.probe(target, *service, *timeout, creds)
}

func (a *app) probe(target, service string, timeout time.Duration, creds credentials.TransportCredentials) int {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls healthcheck: %v\n", err)
		return exitError
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		fmt.Fprintf(a.stderr, "envoy-rls healthcheck: %s: %v\n", target, err)
		return exitError
	}
	fmt.Fprintln(a.stdout, resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return exitError
	}
	return exitOK
}

// localTarget turns a listen address into one to dial: ":8081" is
// 127.0.0.1:8081, "0.0.0.0:8081" too; a Unix socket is itself.
func localTarget(addr string) (string, error) {
	if path, ok := unixSocketPath(addr); ok {
		return "unix:" + path, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
