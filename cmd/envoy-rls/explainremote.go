package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// explainTimeout bounds a call to a running service's POST /explain.
const explainTimeout = 10 * time.Second

// explainRemote asks the service whose admin port is at admin (host:port,
// or an http:// or https:// URL) to explain req: POST /explain.
func explainRemote(admin string, req *rlsv3.RateLimitRequest) (*rls.Explanation, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	return postExplain(admin, body)
}

// explainRemoteBucket asks for the explanation of an RLQS bucket: req's
// one descriptor, its entries a BucketId's pairs.
func explainRemoteBucket(admin string, req *rlsv3.RateLimitRequest) (*rls.Explanation, error) {
	pairs := map[string]string{}
	for _, e := range req.GetDescriptors()[0].GetEntries() {
		pairs[e.GetKey()] = e.GetValue()
	}
	body, err := json.Marshal(map[string]any{"domain": req.GetDomain(), "bucket_id": map[string]any{"bucket": pairs}})
	if err != nil {
		return nil, err
	}
	return postExplain(admin, body)
}

// postExplain posts body to the admin port's POST /explain.
func postExplain(admin string, body []byte) (*rls.Explanation, error) {
	u, err := explainURL(admin)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Timeout: explainTimeout}
	resp, err := c.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("-admin: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("-admin: reading the answer of %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return nil, fmt.Errorf("%s answered %s: %s", u, resp.Status, strings.TrimSpace(string(answer)))
	}
	var e rls.Explanation
	if err := json.Unmarshal(answer, &e); err != nil {
		return nil, fmt.Errorf("-admin: %s did not answer an explanation: %w", u, err)
	}
	return &e, nil
}

// explainURL is POST /explain's URL on the admin port at admin.
func explainURL(admin string) (string, error) {
	if !strings.Contains(admin, "://") {
		admin = "http://" + admin
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("-admin %q: want host:port or an http:// or https:// URL of the admin port", admin)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/explain"
	return u.String(), nil
}
