// Package charts tests the Helm chart: it lints and renders it for every
// values file of envoy-rls/ci, decodes every object strictly into its
// Kubernetes type, runs the binary's own checks on the rendered config and
// container arguments, and checks that the schema refuses bad values. It
// is a module of its own, so that Helm's and Kubernetes's libraries stay
// out of the service's.
package charts

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

const chartDir = "envoy-rls"

// render lints and renders the chart with the values of file, as helm
// template would, and returns the rendered manifests by template name.
func render(t *testing.T, file string) (map[string]string, error) {
	t.Helper()
	return renderAs(t, file, "rls")
}

// renderAs is render for release release; file "" is the chart's
// default values.
func renderAs(t *testing.T, file, release string) (map[string]string, error) {
	t.Helper()
	vals := chartutil.Values{}
	if file != "" {
		var err error
		if vals, err = chartutil.ReadValuesFile(file); err != nil {
			t.Fatal(err)
		}
	}
	if file == "" {
		file = "the default values"
	}
	return renderValues(t, file, vals, release)
}

// renderValues lints and renders the chart with vals (named what) as
// release release.
func renderValues(t *testing.T, what string, vals chartutil.Values, release string) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: "rate-limit", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err // a template's check refused the values
	}
	linted := lint.All(chartDir, vals, "rate-limit", false)
	for _, m := range linted.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint with %s: %s", what, m)
		}
	}
	return out, nil
}

// objects splits rendered manifests into documents, keyed by kind/name.
func objects(t *testing.T, out map[string]string) map[string][]byte {
	t.Helper()
	objs := map[string][]byte{}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(out[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			if meta.Kind == "" {
				continue // a template that rendered nothing but comments
			}
			if meta.Metadata.Namespace != "rate-limit" {
				t.Errorf("%s %s: namespace %q, not the release's", meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace)
			}
			objs[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
		}
	}
	return objs
}

// decodeStrict decodes a manifest into v, failing on any field v's type
// does not have.
func decodeStrict(t *testing.T, what string, doc []byte, v any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s does not decode strictly: %v\n%s", what, err, doc)
	}
}

// typed is the Kubernetes type of each kind the chart renders; a
// ServiceMonitor (a CRD) is checked for its fields by hand.
func typed(kind string) any {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "Service":
		return &corev1.Service{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}
	}
	return nil
}

func TestChartRendersEachExample(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("values files in ci/: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			out, err := render(t, file)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs := objects(t, out)
			var dep *appsv1.Deployment
			var cms []*corev1.ConfigMap
			for key, doc := range objs {
				kind, _, _ := strings.Cut(key, "/")
				v := typed(kind)
				if v == nil {
					if kind != "ServiceMonitor" {
						t.Fatalf("%s: a kind the test does not know", key)
					}
					continue
				}
				decodeStrict(t, key, doc, v)
				switch o := v.(type) {
				case *appsv1.Deployment:
					dep = o
				case *corev1.ConfigMap:
					cms = append(cms, o)
				}
			}
			if dep == nil {
				t.Fatal("no Deployment")
			}
			checkPod(t, file, dep, cms)
		})
	}
}

// checkPod checks the pod the Deployment runs: hardened, probed, given a
// grace period past its shutdown delay, and started with a config and
// arguments the binary accepts.
func checkPod(t *testing.T, file string, dep *appsv1.Deployment, cms []*corev1.ConfigMap) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("the container is not hardened: %+v", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Service == nil ||
		*c.ReadinessProbe.GRPC.Service != "envoy.service.ratelimit.v3.RateLimitService" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: readiness %+v, liveness %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	var config *corev1.ConfigMap
	for _, cm := range cms {
		if !strings.HasSuffix(cm.Name, "-dashboard") {
			config = cm
		}
	}
	if config == nil {
		t.Fatal("no config ConfigMap")
	}
	dir := t.TempDir()
	for name, body := range config.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(binary(t), "check-config", dir).CombinedOutput(); err != nil {
		t.Errorf("check-config of the rendered ConfigMap: %v\n%s", err, out)
	}
	if len(c.Command) > 0 {
		return // the drop-in start: the reference's environment, no flags
	}
	delay, timeout := shutdownSeconds(t, c.Args)
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= delay+timeout {
		t.Errorf("terminationGracePeriodSeconds %v, not past the shutdown delay (%ds) and timeout (%ds)", pod.TerminationGracePeriodSeconds, delay, timeout)
	}
	startsWith(t, c.Args, dir)
}

// flagValue is the value of the last -name=value of args, as the flag
// package keeps the last, and whether there is one.
func flagValue(args []string, name string) (string, bool) {
	value, found := "", false
	for _, a := range args {
		n, v, ok := strings.Cut(a, "=")
		if ok && (n == "-"+name || n == "--"+name) {
			value, found = v, true
		}
	}
	return value, found
}

// shutdownSeconds is the -shutdown-delay and -shutdown-timeout of args, in
// whole seconds (the binary's defaults, 0s and 15s, when absent).
func shutdownSeconds(t *testing.T, args []string) (delay, timeout int64) {
	t.Helper()
	seconds := func(name, def string) int64 {
		v, ok := flagValue(args, name)
		if !ok {
			v = def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("-%s=%s: %v", name, v, err)
		}
		return int64(d / time.Second)
	}
	return seconds("shutdown-delay", "0s"), seconds("shutdown-timeout", "15s")
}

// snapshotFlag matches the -memory-snapshot flag in serve's usage.
var snapshotFlag = regexp.MustCompile(`(?m)^\s+-memory-snapshot(\s|$)`)

// startsWith starts the binary with a container's arguments, its paths
// moved here (the config to dir, secrets to files made for them): it must
// get past parsing and checking its flags and serve, which it logs. A
// binary without -memory-snapshot yet starts without the snapshot flags.
func startsWith(t *testing.T, args []string, dir string) {
	t.Helper()
	help, _ := exec.Command(binary(t), "serve", "-h").CombinedOutput()
	snapshots := snapshotFlag.Match(help)
	secret := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, a := range args[1:] { // after serve
		name, value, hasValue := strings.Cut(a, "=")
		switch name {
		case "-config":
			value = dir
		case "-grpc-addr", "-http-addr":
			value = "127.0.0.1:0"
		case "-redis-password-file", "-redis-persecond-password-file":
			value = secret
		case "-region-peer-password-files": // NAME=FILE,...
			var files []string
			for _, item := range strings.Split(value, ",") {
				region, _, _ := strings.Cut(item, "=")
				files = append(files, region+"="+secret)
			}
			value = strings.Join(files, ",")
		case "-redis-tls-ca", "-redis-persecond-tls-ca", "-memcached-tls-ca":
			continue // the mounted CA: not here
		case "-memory-snapshot", "-memory-snapshot-interval":
			if !snapshots {
				t.Logf("%s: this envoy-rls has no -memory-snapshot yet: started without it", a)
				continue
			}
			if name == "-memory-snapshot" {
				value = filepath.Join(t.TempDir(), filepath.Base(value)) // the volume: here
			}
		}
		if hasValue {
			run = append(run, name+"="+value)
		} else {
			run = append(run, name)
		}
	}
	run = append([]string{args[0]}, append(run, "-admin-addr=")...)
	cmd := exec.Command(binary(t), run...)
	out := &binarytest.Output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for range 100 {
		select {
		case err := <-done:
			t.Fatalf("envoy-rls %s exited: %v\n%s", strings.Join(run, " "), err, out.String())
		default:
		}
		if strings.Contains(out.String(), "envoy-rls serving") {
			cmd.Process.Kill()
			<-done
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-done
	t.Fatalf("envoy-rls %s did not serve within 5s:\n%s", strings.Join(run, " "), out.String())
}

var update = flag.Bool("update", false, "write examples/kubernetes/envoy-rls.yaml from the chart")

// kindOrder is the order of kinds in a generated manifest: what a kind
// refers to comes before it.
var kindOrder = []string{"ConfigMap", "PersistentVolumeClaim", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "ServiceMonitor"}

// TestKubernetesExample: examples/kubernetes/envoy-rls.yaml is the chart
// rendered with examples/kubernetes/values.yaml, as release envoy-rls in
// namespace rate-limit (-update writes it).
func TestKubernetesExample(t *testing.T) {
	values := filepath.Join("..", "examples", "kubernetes", "values.yaml")
	out, err := renderAs(t, values, "envoy-rls")
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	keys := make([]string, 0, len(objs))
	for k := range objs {
		keys = append(keys, k)
	}
	rank := func(key string) int {
		kind, _, _ := strings.Cut(key, "/")
		for i, k := range kindOrder {
			if k == kind {
				return i
			}
		}
		return len(kindOrder)
	}
	sort.Slice(keys, func(i, j int) bool {
		if ri, rj := rank(keys[i]), rank(keys[j]); ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	b.WriteString("# envoy-rls: three replicas sharing the Redis of redis.yaml.\n#   kubectl apply -f redis.yaml -f envoy-rls.yaml\n")
	b.WriteString("# Envoy reaches it at envoy-rls.rate-limit.svc.cluster.local:8081 (HTTP/2).\n")
	b.WriteString("# Generated from charts/envoy-rls with values.yaml (release envoy-rls):\n#   cd charts && go test -run TestKubernetesExample -update\n")
	for _, k := range keys {
		b.WriteString("---\n")
		b.WriteString(strings.TrimLeft(string(objs[k]), "\n"))
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
	}
	path := filepath.Join("..", "examples", "kubernetes", "envoy-rls.yaml")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != b.String() {
		t.Fatalf("%s is not what the chart renders with values.yaml: run go test -run TestKubernetesExample -update in charts", path)
	}
}

// TestSchemaRefusesBadValues renders each file of testdata/bad: the
// schema, or a template's check, must refuse it, with a message naming
// the value (the file's first line: "# refused for: <part of the
// message>").
func TestSchemaRefusesBadValues(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no bad values files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(body), "\n")
			want := strings.TrimSpace(strings.TrimPrefix(first, "# refused for:"))
			_, err = render(t, file)
			if err == nil {
				t.Fatalf("the schema accepted %s", file)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("refused with %q, which does not name %q", err, want)
			}
		})
	}
}

// binary builds envoy-rls from the repository once.
func binary(t *testing.T) string { return binarytest.Build(t, "..") }
