package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestSecretsStayInside runs the binary against a Redis that needs a
// password, read from a file, and looks for that password, and for Redis's
// address, everywhere a caller or an operator can see: call errors, HTTP
// and admin answers, the log at debug level.
func TestSecretsStayInside(t *testing.T) {
	const password = "s3cret-Pa55word"
	srv := redistest.Start(t, "--requirepass", password)
	dir := t.TempDir()
	good, wrong := filepath.Join(dir, "password"), filepath.Join(dir, "wrong")
	os.WriteFile(good, []byte(password+"\n"), 0o600)
	os.WriteFile(wrong, []byte("not-"+password+"\n"), 0o600)
	adminAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	url := "redis://" + srv.Addr() + "/0"

	p := startBinary(t, "-store", "redis", "-redis-url", url, "-redis-password-file", good,
		"-admin-addr", adminAddr, "-pprof", "-log-level", "debug")
	bad := startBinary(t, "-store", "redis", "-redis-url", url, "-redis-password-file", wrong, "-log-level", "debug")

	call := func(addr string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request([]string{"user=alice"}))
		return err
	}
	if err := call(p.grpcAddr); err != nil {
		t.Fatalf("with the password from the file: %v\n%s", err, p.out)
	}
	err := call(bad.grpcAddr)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("with a wrong password: %v, want Unavailable", err)
	}
	for _, secret := range []string{password, srv.Addr(), "127.0.0.1"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error sent to the caller names %q: %v", secret, err)
		}
	}

	get := func(url string) (int, string) {
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, _ := get("http://" + adminAddr + "/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline answers %d, want 404", code)
	}
	for _, url := range []string{
		"http://" + p.httpAddr + "/metrics",
		"http://" + bad.httpAddr + "/metrics",
		"http://" + p.httpAddr + "/readyz",
		"http://" + adminAddr + "/config",
		"http://" + adminAddr + "/debug/pprof/goroutine?debug=2",
	} {
		code, body := get(url)
		if code != http.StatusOK && !strings.HasSuffix(url, "/readyz") {
			t.Errorf("%s: %d", url, code)
		}
		if strings.Contains(body, password) {
			t.Errorf("%s shows the password", url)
		}
	}
	for _, proc := range []*process{p, bad} {
		if strings.Contains(proc.out.String(), password) {
			t.Errorf("the log shows the password:\n%s", proc.out)
		}
	}
}
