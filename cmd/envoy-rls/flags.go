package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky/memory"
)

// settings are the serve command's flags, after the environment.
type settings struct {
	config           string
	grpcAddr         string
	httpAddr         string
	store            string
	redisURL         string
	redisCluster     bool
	memoryMaxBuckets int
	responseHeaders  string
	logLevel         string
	logFormat        string
	shutdownTimeout  time.Duration
}

func newFlagSet(output io.Writer) (*flag.FlagSet, *settings) {
	s := &settings{}
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&s.config, "config", "config", "YAML config `file or directory` (*.yaml, *.yml)")
	fs.StringVar(&s.grpcAddr, "grpc-addr", ":8081", "`address` of the RLS v3 gRPC server (also grpc.health.v1 and reflection)")
	fs.StringVar(&s.httpAddr, "http-addr", ":8080", "`address` of the HTTP server (/healthz, /readyz)")
	fs.StringVar(&s.store, "store", "memory", "bucket store: memory (one replica) or redis (several)")
	fs.StringVar(&s.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis `URL`: redis:// or rediss:// (TLS), go-redis syntax")
	fs.BoolVar(&s.redisCluster, "redis-cluster", false, "treat -redis-url (with extra addr= parameters) as a Redis Cluster seed list")
	fs.IntVar(&s.memoryMaxBuckets, "memory-max-buckets", memory.DefaultMaxBuckets, "most buckets the memory store keeps; beyond, those nearest to empty are dropped")
	fs.StringVar(&s.responseHeaders, "response-headers", "leaky", "response headers to add: leaky (X-RateLimit-Remaining, -Clear, -Reset, Retry-After) or none")
	fs.StringVar(&s.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&s.logFormat, "log-format", "text", "log `format`: text or json")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGTERM, how long in-flight calls may take before the server stops anyway")
	return fs, s
}

// parseFlags reads the flags, then RLS_* variables for the flags not given,
// and checks the values.
func parseFlags(args []string, lookupEnv func(string) (string, bool), output io.Writer) (*settings, error) {
	fs, s := newFlagSet(output)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v, ok := lookupEnv(name); ok && !given[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	return s, s.check()
}

// envName is the variable that sets a flag: RLS_ and the name in upper case
// with '-' as '_'.
func envName(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (s *settings) check() error {
	switch {
	case s.config == "":
		return fmt.Errorf("-config: must name a file or directory")
	case s.store != "memory" && s.store != "redis":
		return fmt.Errorf("-store: %q is not a store: want memory or redis", s.store)
	case s.responseHeaders != "leaky" && s.responseHeaders != "none":
		return fmt.Errorf("-response-headers: %q: want leaky or none", s.responseHeaders)
	case s.logFormat != "text" && s.logFormat != "json":
		return fmt.Errorf("-log-format: %q: want text or json", s.logFormat)
	case s.memoryMaxBuckets < 1:
		return fmt.Errorf("-memory-max-buckets: must be at least 1, got %d", s.memoryMaxBuckets)
	case s.shutdownTimeout <= 0:
		return fmt.Errorf("-shutdown-timeout: must be positive, got %s", s.shutdownTimeout)
	}
	if _, err := s.level(); err != nil {
		return err
	}
	return nil
}

func (s *settings) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s.logLevel)); err != nil {
		return 0, fmt.Errorf("-log-level: %q: want debug, info, warn or error", s.logLevel)
	}
	return l, nil
}

func (s *settings) logger(w io.Writer) *slog.Logger {
	level, _ := s.level() // checked
	opts := &slog.HandlerOptions{Level: level}
	if s.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
