package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testpki"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

func TestExplainCommand(t *testing.T) {
	a, stdout, stderr := testApp(nil)
	if code := a.run(context.Background(), []string{"explain", "-config", "../../config", "api", "user=alice,action=trade,x=y", "client=internal"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `domain api (../../config/config.yaml)

descriptor 1: user=alice, action=trade, x=y
  ../../config/config.yaml:9  user  (matches user=alice: any value)
      user: leaky_bucket size=60 drip_rate=1s drip_size=1 (60/minute)
        bucket api|user=alice
  ../../config/config.yaml:15  user/action=trade  (matches action=trade: exact)
      trades_per_user: leaky_bucket size=5 drip_rate=2s drip_size=1 (30/minute)
        bucket api|user=alice|action=trade
  entry 3, x=y: no descriptor of the config matches it here; the walk stops
  => 2 buckets checked: a call passes only if every one has room, and only then are all charged

descriptor 2: client=internal
  ../../config/config.yaml:32  client=internal  (matches client=internal: exact)
      unlimited: allow-lists the descriptor, no limit on its walk applies
  => unlimited: every call passes
`
	if stdout.String() != want {
		t.Errorf("got\n%s\nwant\n%s", stdout, want)
	}

	// JSON, with the flag after the descriptors, and the config from
	// RLS_CONFIG.
	a, stdout, stderr = testApp(map[string]string{"RLS_CONFIG": "../../config"})
	if code := a.run(context.Background(), []string{"explain", "search", "user=bob", "-o", "json"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var e rls.Explanation
	if err := json.Unmarshal(stdout.Bytes(), &e); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	limits := e.Descriptors[0].Walk[0].Limits
	if len(limits) != 2 || limits[0].Bucket.Key != "search|user=bob|#sw1s/100ms" || limits[1].Label != "search_hourly" || limits[0].Bucket.State != nil {
		t.Errorf("search user=bob:\n%s", stdout)
	}

	// An RLQS bucket: its pairs in any order, walked as the tree asks.
	a, stdout, stderr = testApp(nil)
	if code := a.run(context.Background(), []string{"explain", "-bucket", "-config", "../../config", "api", "action=trade,user=alice"}); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "descriptor 1: user=alice, action=trade\n") || !strings.Contains(stdout.String(), "bucket api|user=alice|action=trade") {
		t.Errorf("explain -bucket action=trade,user=alice:\n%s", stdout)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"explain", "-bucket", "-config", "../../config", "api", "user=a,user=b"}, exitError, `names key "user" twice`},
		{[]string{"explain"}, exitUsage, "Usage: envoy-rls explain"},
		{[]string{"explain", "api"}, exitUsage, "Usage: envoy-rls explain"},
		{[]string{"explain", "-config", "../../config", "api", "user"}, exitUsage, `entry 0 ("user") has no '='`},
		{[]string{"explain", "-config", "../../config", "nope", "user=a"}, exitError, `unknown domain "nope"`},
		{[]string{"explain", "-config", "../../config", "api", "=a"}, exitError, "descriptors[0].entries[0] has an empty key"},
		{[]string{"explain", "-config", "testdata/bad/bad-unit.yaml", "api", "user=a"}, exitError, "bad-unit.yaml:"},
		{[]string{"explain", "-o", "yaml", "api", "user=a"}, exitUsage, "invalid value"},
	} {
		a, _, stderr := testApp(nil)
		if code := a.run(context.Background(), c.args); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, %s; want %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// TestAdminBucketsNoWeakerThanGRPC: where gRPC requires client
// certificates, POST /explain and /buckets (whose server checks none) are
// off unless asked for, as POST /json.
func TestAdminBucketsNoWeakerThanGRPC(t *testing.T) {
	pki := testpki.New(t)
	mtls := []string{"-config", "../../config", "-grpc-tls-cert", pki.ServerCert, "-grpc-tls-key", pki.ServerKey, "-grpc-tls-client-ca", pki.CACert}
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"plain gRPC", []string{"-config", "../../config"}, http.StatusOK},
		{"plain gRPC, -admin-buckets=false", []string{"-config", "../../config", "-admin-buckets=false"}, http.StatusNotFound},
		{"mutual TLS", mtls, http.StatusNotFound},
		{"mutual TLS, -admin-buckets", append(mtls, "-admin-buckets"), http.StatusOK},
	} {
		s := startServe(t, c.args...)
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/explain", jsonRequest},
			{"GET", "/buckets?domain=api&descriptor=user=alice", ""},
			{"DELETE", "/buckets?domain=api&descriptor=user=alice", ""},
		} {
			if code, body := send(t, r.method, "http://"+s.adminAddr+r.path, r.body); code != c.want {
				t.Errorf("%s: %s %s answers %d, want %d\n%s", c.name, r.method, r.path, code, c.want, body)
			}
		}
		if code, body := send(t, "GET", "http://"+s.adminAddr+"/config", ""); code != http.StatusOK {
			t.Errorf("%s: GET /config answers %d\n%s", c.name, code, body)
		}
	}
}

// send makes one HTTP request and returns the status and body.
func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminEndpointsOnTheAdminPort: the serving binary answers POST
// /explain and GET and DELETE /buckets on the admin address only; on the
// HTTP address they do not exist.
func TestAdminEndpointsOnTheAdminPort(t *testing.T) {
	s := startServe(t, "-config", "../../config")
	c := s.client(t)
	for range 6 {
		code(t, c, rateRequest("api", "user=alice", "action=trade"))
	}
	explain := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}, {"key": "action", "value": "trade"}]}]}`
	buckets := "/buckets?domain=api&descriptor=user=alice,action=trade"
	for _, r := range []struct{ method, path, body, want string }{
		{"POST", "/explain", explain, `"code": "OVER_LIMIT"`},
		{"GET", buckets, "", `"label": "trades_per_user"`},
		{"DELETE", buckets, "", `"api|user=alice|action=trade"`},
		{"GET", "/config", "", `"domains"`},
	} {
		if st, body := send(t, r.method, "http://"+s.adminAddr+r.path, r.body); st != 200 || !strings.Contains(body, r.want) {
			t.Errorf("admin %s %s: %d\n%s", r.method, r.path, st, body)
		}
		if st, body := send(t, r.method, "http://"+s.httpAddr+r.path, r.body); st != http.StatusNotFound {
			t.Errorf("HTTP port %s %s: %d %s, want 404", r.method, r.path, st, body)
		}
	}
	if got := code(t, c, rateRequest("api", "user=alice", "action=trade")); got.String() != "OK" {
		t.Errorf("after DELETE /buckets: %s", got)
	}
}
