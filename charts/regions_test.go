package charts

import (
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
)

// regionsDir is where the peers' passwords are mounted, a file each.
const regionsDir = "/etc/envoy-rls-regions"

// TestRegions renders ci/regions-values.yaml: -region and the other
// regions' flags, each peer's URL as given (without a password), and the
// password of each peer with a Secret mounted from it as a file named
// as the region, where -region-peer-password-files points; a peer
// without a Secret has no file. (TestChartRendersEachExample starts the
// binary with these arguments.)
func TestRegions(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(path.Join(chartDir, "ci", "regions-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep, objs := deployment(t, "ci/regions-values.yaml", vals)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	for _, want := range []string{
		"-store=redis",
		"-region=eu",
		"-region-peers=us=redis://redis.us.example.com:6379/0," +
			"ap=rediss://redis-1.ap.example.com:6380?addr=redis-2.ap.example.com:6380&addr=redis-3.ap.example.com:6380," +
			"sa=redis://redis.sa.example.com:6379/0",
		"-region-peer-password-files=us=" + regionsDir + "/us,ap=" + regionsDir + "/ap",
		"-region-interval=2s",
		"-region-silence=2m",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("no %s in %q", want, c.Args)
		}
	}
	if got := regionSecrets(t, pod); !maps.Equal(got, map[string]string{"us": "redis-us-auth/password", "ap": "redis-ap-auth/redis-password"}) {
		t.Errorf("peer passwords mounted: %v", got)
	}
	for key, doc := range objs {
		if m := passwordURL.Find(doc); m != nil {
			t.Errorf("%s holds a URL with a password: %s", key, m)
		}
	}

	// A Secret's key defaults to password; a region's name that YAML
	// would read as a number stays a file name.
	vals["regions"] = map[string]any{"name": "1", "peers": []any{
		map[string]any{"name": "2", "url": "redis://redis.2:6379/0", "existingSecret": map[string]any{"name": "redis-2-auth"}},
	}}
	dep, _ = deployment(t, "regions named 1 and 2", vals)
	pod = dep.Spec.Template.Spec
	if got := regionSecrets(t, pod); !maps.Equal(got, map[string]string{"2": "redis-2-auth/password"}) {
		t.Errorf("peer passwords mounted: %v", got)
	}
	if v, _ := flagValue(pod.Containers[0].Args, "region-peer-password-files"); v != "2="+regionsDir+"/2" {
		t.Errorf("-region-peer-password-files=%s", v)
	}
	if v, _ := flagValue(pod.Containers[0].Args, "region-interval"); v != "1s" {
		t.Errorf("-region-interval=%s, not the default 1s", v)
	}

	// A region alone (the others not yet named) has no -region-peers; no
	// peer with a Secret, no volume.
	vals["regions"] = map[string]any{"name": "eu"}
	dep, _ = deployment(t, "a region without peers", vals)
	pod = dep.Spec.Template.Spec
	for _, name := range []string{"region-peers", "region-peer-password-files"} {
		if v, ok := flagValue(pod.Containers[0].Args, name); ok {
			t.Errorf("-%s=%s without peers", name, v)
		}
	}
	if got := regionSecrets(t, pod); len(got) != 0 {
		t.Errorf("peer passwords mounted without peers: %v", got)
	}

	// Without regions.name, no region flag and no volume.
	for _, file := range []string{"", path.Join(chartDir, "ci", "redis-secret-values.yaml")} {
		out, err := renderAs(t, file, "rls")
		if err != nil {
			t.Fatal(err)
		}
		if d := out["envoy-rls/templates/deployment.yaml"]; strings.Contains(d, "-region") || strings.Contains(d, "region-passwords") {
			t.Errorf("%q: region settings without regions.name:\n%s", file, d)
		}
	}
}

// passwordURL matches a redis:// or rediss:// URL with a user's part.
var passwordURL = regexp.MustCompile(`rediss?://[^/\s",?]*@`)

// regionSecrets is the peer passwords the pod mounts where
// -region-peer-password-files points: the file's name (the region's) to
// secret/key. It checks that the volume is the projected one, mounted at
// regionsDir read-only, and that each file the flag names is one of them.
func regionSecrets(t *testing.T, pod corev1.PodSpec) map[string]string {
	t.Helper()
	got := map[string]string{}
	c := pod.Containers[0]
	for _, v := range pod.Volumes {
		if v.Name != "region-passwords" {
			continue
		}
		if v.Projected == nil {
			t.Fatalf("region-passwords is not a projected volume: %+v", v)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == v.Name && m.MountPath == regionsDir && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("region-passwords is not mounted read-only at %s: %+v", regionsDir, c.VolumeMounts)
		}
		for _, src := range v.Projected.Sources {
			if src.Secret == nil || len(src.Secret.Items) != 1 {
				t.Fatalf("a source not of one Secret's key: %+v", src)
			}
			it := src.Secret.Items[0]
			got[it.Path] = src.Secret.Name + "/" + it.Key
		}
	}
	files, _ := flagValue(c.Args, "region-peer-password-files")
	peers, _ := flagValue(c.Args, "region-peers")
	for item := range strings.SplitSeq(files, ",") {
		if item == "" {
			continue
		}
		region, file, _ := strings.Cut(item, "=")
		if dir, name := path.Split(file); dir != regionsDir+"/" || name != region || got[name] == "" {
			t.Errorf("-region-peer-password-files: %s is not a mounted Secret's file", item)
		}
		if !strings.Contains(","+peers, ","+region+"=") {
			t.Errorf("-region-peer-password-files: %s is not a peer of -region-peers=%s", region, peers)
		}
	}
	if len(got) > 0 && files == "" {
		t.Errorf("passwords mounted, but no -region-peer-password-files")
	}
	for item := range strings.SplitSeq(peers, ",") {
		if _, raw, ok := strings.Cut(item, "="); ok {
			if u, err := url.Parse(raw); err != nil || u.User != nil {
				t.Errorf("-region-peers: %s: %v, or a user's part", item, err)
			}
		}
	}
	return got
}
