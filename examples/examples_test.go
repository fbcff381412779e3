// Package examples holds deployment examples; its tests keep them true:
// the Envoy config validates against Envoy's own protos, the compose file,
// Dockerfile and manifests agree on names and ports, and every envoy-rls
// config they carry is valid.
package examples

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// validator is what Envoy's generated protos offer to check themselves.
type validator interface{ ValidateAll() error }

// decodeProto reads YAML (already decoded) into an Envoy proto, as Envoy
// does, and validates it.
func decodeProto(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := protojson.Unmarshal(j, m); err != nil {
		t.Fatalf("%s does not parse as %T: %v", what, m, err)
	}
	if err := m.(validator).ValidateAll(); err != nil {
		t.Fatalf("%s is not valid: %v", what, err)
	}
}

// readYAML decodes every document of a YAML file.
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// at walks a decoded YAML value along keys (strings) and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", path, p)
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				t.Fatalf("%v: no item %d", path, p)
			}
			v = l[p]
		}
	}
	return v
}

func TestEnvoyExample(t *testing.T) {
	doc := readYAML(t, "envoy/envoy.yaml")[0]
	var b bootstrapv3.Bootstrap
	decodeProto(t, "envoy/envoy.yaml", doc, &b)

	// The rate-limit filter, its domain, and the cluster it calls.
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	rl := &ratelimitv3.RateLimit{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(rl); err != nil {
		t.Fatalf("the first HTTP filter is not the rate-limit filter: %v", err)
	}
	if rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Error("the example should show enable_x_ratelimit_headers: DRAFT_VERSION_03")
	}
	cfg := loadConfig(t, "envoy/envoy-rls")
	if cfg.Domain(rl.GetDomain()) == nil {
		t.Errorf("Envoy asks for domain %q, which envoy-rls/ does not define", rl.GetDomain())
	}
	clusters := map[string]string{}
	for _, c := range b.GetStaticResources().GetClusters() {
		addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		clusters[c.GetName()] = addr.GetAddress() + ":" + itoa(addr.GetPortValue())
		if c.GetName() == rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() &&
			c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Errorf("cluster %s does not speak HTTP/2, which gRPC needs", c.GetName())
		}
	}
	if got := clusters[rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()]; got != "envoy-rls:8081" {
		t.Errorf("the rate-limit service cluster goes to %q, want envoy-rls:8081", got)
	}

	// Every route sends [user, ...] and [remote_address].
	for _, r := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		limits := r.GetRoute().GetRateLimits()
		if len(limits) != 2 || limits[0].GetActions()[0].GetRequestHeaders().GetDescriptorKey() != "user" || limits[1].GetActions()[0].GetRemoteAddress() == nil {
			t.Errorf("route %v: rate limits %v", r.GetMatch(), limits)
		}
	}
	// The upstream is the compose file's echo service.
	compose := readYAML(t, "envoy/compose.yaml")[0]
	echoCommand := strings.Join(toStrings(at(t, compose, "services", "echo", "command")), " ")
	if clusters["upstream"] != "echo:5678" || !strings.Contains(echoCommand, "-listen=:5678") {
		t.Errorf("upstream %q does not match the echo service (%s)", clusters["upstream"], echoCommand)
	}
}

func TestComposeMatchesDockerfileAndConfigs(t *testing.T) {
	compose := readYAML(t, "envoy/compose.yaml")[0]
	rls := at(t, compose, "services", "envoy-rls")
	build := at(t, rls, "build")
	dockerfile := filepath.Join("envoy", at(t, build, "context").(string), at(t, build, "dockerfile").(string))
	if _, err := os.Stat(dockerfile); err != nil {
		t.Fatalf("compose builds from %s: %v", dockerfile, err)
	}
	exposed := dockerfileLines(t, dockerfile, "EXPOSE")
	for _, port := range toStrings(at(t, rls, "ports")) {
		container := port[strings.LastIndex(port, ":")+1:]
		if !strings.Contains(exposed, container) {
			t.Errorf("compose publishes %s, the Dockerfile exposes %q", port, exposed)
		}
	}
	command := strings.Join(toStrings(at(t, rls, "command")), " ")
	for _, want := range []string{"-config=/etc/envoy-rls", "-store=redis", "-redis-url=redis://redis:6379/0", "-response-headers=envoy"} {
		if !strings.Contains(command, want) {
			t.Errorf("the envoy-rls command %q lacks %s", command, want)
		}
	}
	if !slices.Contains(toStrings(at(t, rls, "volumes")), "./envoy-rls:/etc/envoy-rls:ro") {
		t.Error("the envoy-rls config directory is not mounted where -config points")
	}
	if at(t, compose, "services", "redis", "image") == nil {
		t.Error("no redis service for -redis-url")
	}
	envoy := at(t, compose, "services", "envoy")
	if !regexp.MustCompile(`^envoyproxy/envoy:v1\.\d+`).MatchString(at(t, envoy, "image").(string)) ||
		!slices.Contains(toStrings(at(t, envoy, "volumes")), "./envoy.yaml:/etc/envoy/envoy.yaml:ro") {
		t.Errorf("the envoy service: %v", envoy)
	}
}

func TestDockerfile(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)[1]
	for instruction, want := range map[string]string{
		"FROM":        "golang:" + string(goVersion) + " AS build",
		"RUN":         "CGO_ENABLED=0 go build",
		"USER":        "65532:65532",
		"EXPOSE":      "8081 8080",
		"HEALTHCHECK": `CMD ["/bin/envoy-rls", "healthcheck"]`,
		"ENTRYPOINT":  `["/bin/envoy-rls"]`,
		"COPY":        "config /config",
	} {
		if got := dockerfileLines(t, "../Dockerfile", instruction); !strings.Contains(got, want) {
			t.Errorf("Dockerfile %s: %q, want %q in it", instruction, got, want)
		}
	}
	if from := dockerfileLines(t, "../Dockerfile", "FROM"); !strings.Contains(from, "distroless/static") {
		t.Errorf("the final image is not a static distroless one: %s", from)
	}
}

// dockerfileLines returns the lines of a Dockerfile instruction, joined.
func dockerfileLines(t *testing.T, path, instruction string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, instruction+" "); ok {
			out = append(out, rest)
		}
	}
	return strings.Join(out, "\n")
}

// manifests returns the Kubernetes objects of the files, by kind/name.
func manifests(t *testing.T, files ...string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, f := range files {
		for _, doc := range readYAML(t, f) {
			kind, _ := doc["apiVersion"].(string)
			name, _ := at(t, doc, "metadata", "name").(string)
			if kind == "" || name == "" || doc["kind"] == nil {
				t.Fatalf("%s: an object without apiVersion, kind or metadata.name", f)
			}
			objs[doc["kind"].(string)+"/"+name] = doc
		}
	}
	return objs
}

func TestKubernetesManifests(t *testing.T) {
	objs := manifests(t, "kubernetes/redis.yaml", "kubernetes/envoy-rls.yaml")
	checkDeployment(t, objs, "kubernetes")
	if objs["Service/redis"] == nil || objs["PodDisruptionBudget/envoy-rls"] == nil || objs["Namespace/rate-limit"] == nil {
		t.Error("missing the redis Service, the PodDisruptionBudget or the namespace")
	}
}

func TestIstioExample(t *testing.T) {
	objs := manifests(t, "../examples/kubernetes/redis.yaml", "istio/envoy-rls.yaml", "istio/envoyfilter.yaml")
	cfg := checkDeployment(t, objs, "istio")

	filter := at(t, objs["EnvoyFilter/envoy-rls-filter"], "spec", "configPatches", 0)
	if at(t, filter, "applyTo") != "HTTP_FILTER" || at(t, filter, "patch", "operation") != "INSERT_BEFORE" {
		t.Errorf("the filter patch: %v", filter)
	}
	var f hcmv3.HttpFilter
	decodeProto(t, "the inserted HTTP filter", at(t, filter, "patch", "value"), &f)
	rl := &ratelimitv3.RateLimit{}
	if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
		t.Fatal(err)
	}
	if cfg.Domain(rl.GetDomain()) == nil {
		t.Errorf("the gateway asks for domain %q, which the ConfigMap does not define", rl.GetDomain())
	}
	if got := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != "outbound|8081||envoy-rls.rate-limit.svc.cluster.local" {
		t.Errorf("the filter calls cluster %q, not Istio's cluster of the envoy-rls Service", got)
	}

	actions := at(t, objs["EnvoyFilter/envoy-rls-actions"], "spec", "configPatches", 0, "patch", "value", "rate_limits").([]any)
	for i, a := range actions {
		var r routev3.RateLimit
		decodeProto(t, "rate_limits["+itoa(uint32(i))+"]", a, &r)
	}
}

// checkDeployment checks the envoy-rls Deployment, Service and ConfigMap
// of an example against each other, and returns the config it mounts.
func checkDeployment(t *testing.T, objs map[string]map[string]any, example string) *descriptors.Config {
	t.Helper()
	dep := objs["Deployment/envoy-rls"]
	if dep == nil {
		t.Fatalf("%s: no envoy-rls Deployment", example)
	}
	pod := at(t, dep, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	args := strings.Join(toStrings(at(t, c, "args")), " ")
	mount := at(t, c, "volumeMounts", 0, "mountPath").(string)
	if !strings.Contains(args, "-config="+mount) {
		t.Errorf("%s: args %q do not point -config at the mounted %s", example, args, mount)
	}
	if m := regexp.MustCompile(`-redis-url=redis://([^:/]+)`).FindStringSubmatch(args); m == nil || m[1] != "redis.rate-limit.svc.cluster.local" || objs["Service/redis"] == nil {
		t.Errorf("%s: -redis-url in %q does not name the redis Service", example, args)
	}
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[at(t, p, "name").(string)] = at(t, p, "containerPort").(int)
	}
	if ports["grpc"] != 8081 || ports["http"] != 8080 {
		t.Errorf("%s: container ports %v, want grpc 8081 and http 8080 (the flag defaults)", example, ports)
	}
	if at(t, c, "readinessProbe", "grpc", "port") != 8081 || at(t, c, "readinessProbe", "grpc", "service") != "envoy.service.ratelimit.v3.RateLimitService" {
		t.Errorf("%s: the readiness probe is not the gRPC health of the service", example)
	}
	if at(t, c, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("%s: the liveness probe is not /healthz", example)
	}
	if at(t, c, "resources", "requests") == nil {
		t.Errorf("%s: no resource requests", example)
	}
	svc := objs["Service/envoy-rls"]
	grpcPort := at(t, svc, "spec", "ports", 0)
	if at(t, grpcPort, "name") != "grpc" || at(t, grpcPort, "port") != 8081 || at(t, grpcPort, "appProtocol") != "grpc" {
		t.Errorf("%s: the Service's first port %v is not grpc 8081 (Istio needs the name for HTTP/2)", example, grpcPort)
	}
	cmName := at(t, pod, "volumes", 0, "configMap", "name").(string)
	cm := objs["ConfigMap/"+cmName]
	if cm == nil {
		t.Fatalf("%s: the mounted ConfigMap %s is not in the example", example, cmName)
	}
	var sources []descriptors.Source
	for name, data := range at(t, cm, "data").(map[string]any) {
		sources = append(sources, descriptors.Source{Name: example + ":" + name, Data: []byte(data.(string))})
	}
	cfg, warnings, err := descriptors.Parse(sources...)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("%s: the ConfigMap's config: %v %v", example, err, warnings)
	}
	return cfg
}

func TestExampleConfigsAreValid(t *testing.T) {
	for _, dir := range []string{"envoy/envoy-rls", "envoy-gateway/budgets.yaml", "../config"} {
		loadConfig(t, dir)
	}
}

func loadConfig(t *testing.T, path string) *descriptors.Config {
	t.Helper()
	cfg, warnings, err := descriptors.Load(path)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("%s: %v %v", path, err, warnings)
	}
	return cfg
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestReleaseWorkflow: the release workflow parses, and passes the build
// arguments the Dockerfile stamps the version with.
func TestReleaseWorkflow(t *testing.T) {
	data, err := os.ReadFile("../.github/workflows/release.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On   map[string]any `yaml:"on"`
		Jobs map[string]struct {
			Steps []struct {
				Uses string            `yaml:"uses"`
				With map[string]string `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	var buildArgs string
	for _, st := range wf.Jobs["image"].Steps {
		if strings.HasPrefix(st.Uses, "docker/build-push-action") {
			buildArgs = st.With["build-args"]
		}
	}
	args := dockerfileLines(t, "../Dockerfile", "ARG")
	for _, name := range []string{"VERSION", "COMMIT"} {
		if !strings.Contains(buildArgs, name+"=") || !strings.Contains(args, name+"=") {
			t.Errorf("%s: build-args %q, Dockerfile ARG %q", name, buildArgs, args)
		}
	}
	if wf.On["push"] == nil {
		t.Errorf("the workflow runs on %v, want tag pushes", wf.On)
	}
}
