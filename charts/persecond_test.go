package charts

import (
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// TestPerSecondRedis renders ci/redis-persecond-values.yaml: the
// per-second Redis's flags, and its password and CA mounted from their
// Secrets where the flags point; without a per-second url, none of them.
func TestPerSecondRedis(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", "redis-persecond-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep, _ := deployment(t, "ci/redis-persecond-values.yaml", vals)
	pod := dep.Spec.Template.Spec
	args := pod.Containers[0].Args
	for _, want := range []string{
		"-redis-persecond-url=rediss://redis-persecond.rate-limit.svc.cluster.local:6379/0",
		"-redis-persecond-password-file=/etc/envoy-rls-redis-persecond/password",
		"-redis-persecond-tls-ca=/etc/envoy-rls-redis-persecond-tls/ca.crt",
		"-redis-password-file=/etc/envoy-rls-redis/password",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("no %s in %q", want, args)
		}
	}
	secrets := map[string]string{} // mount path: secret
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == v.Name {
				secrets[m.MountPath] = v.Secret.SecretName
			}
		}
	}
	if secrets["/etc/envoy-rls-redis-persecond"] != "redis-persecond-auth" || secrets["/etc/envoy-rls-redis-persecond-tls"] != "redis-persecond-ca" ||
		secrets["/etc/envoy-rls-redis"] != "redis-auth" {
		t.Errorf("secrets mounted: %v", secrets)
	}

	vals, err = chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", "redis-secret-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep, _ = deployment(t, "ci/redis-secret-values.yaml", vals)
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if _, ok := flagValue([]string{a}, "redis-persecond-url"); ok {
			t.Errorf("a per-second Redis without store.redis.perSecond.url: %s", a)
		}
	}
}
