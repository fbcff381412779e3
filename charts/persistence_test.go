package charts

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// snapshotMarginSeconds is what the grace period must leave, past the
// shutdown delay and timeout, for the memory store's final snapshot.
const snapshotMarginSeconds = 10

// TestPersistence renders ci/persistence.yaml: a claim, mounted where the
// snapshot flags point, a Deployment that replaces its pod by Recreate
// (the volume is ReadWriteOnce), and a grace period past the drain and the
// final write.
func TestPersistence(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "ci", "persistence.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep, objs := deployment(t, "ci/persistence.yaml", vals)
	doc := objs["PersistentVolumeClaim/rls-envoy-rls-data"]
	if doc == nil {
		t.Fatalf("no PersistentVolumeClaim rls-envoy-rls-data among %v", keys(objs))
	}
	var pvc corev1.PersistentVolumeClaim
	decodeStrict(t, "the claim", doc, &pvc)
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		pvc.Spec.Resources.Requests.Storage().String() != "1Gi" || pvc.Spec.StorageClassName != nil {
		t.Errorf("the claim: %+v", pvc.Spec)
	}
	checkSnapshot(t, dep, "rls-envoy-rls-data", "/var/lib/envoy-rls", "5s")
}

// checkSnapshot checks a Deployment with persistence: claim mounted at
// mount, the snapshot written there every interval.
func checkSnapshot(t *testing.T, dep *appsv1.Deployment, claim, mount, interval string) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q: a rolling update would start the new pod while the old one holds the volume", dep.Spec.Strategy.Type)
	}
	volume := ""
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			volume = v.Name
		}
	}
	if volume == "" {
		t.Fatalf("no volume of claim %s: %+v", claim, pod.Volumes)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == volume && m.MountPath == mount && !m.ReadOnly)
	}
	if !mounted {
		t.Errorf("volume %s is not mounted writable at %s: %+v", volume, mount, c.VolumeMounts)
	}
	if got, _ := flagValue(c.Args, "memory-snapshot"); got != strings.TrimSuffix(mount, "/")+"/buckets.snapshot" {
		t.Errorf("-memory-snapshot=%q, not a file of the volume at %s", got, mount)
	}
	if got, _ := flagValue(c.Args, "memory-snapshot-interval"); got != interval {
		t.Errorf("-memory-snapshot-interval=%q, want %s", got, interval)
	}
	if sc := pod.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != 65532 {
		t.Errorf("the pod's fsGroup is not the image's user, 65532, which writes the snapshot: %+v", sc)
	}
	delay, timeout := shutdownSeconds(t, c.Args)
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= delay+timeout+snapshotMarginSeconds {
		t.Errorf("terminationGracePeriodSeconds %v, not past the shutdown delay (%ds), timeout (%ds) and %ds for the final snapshot", g, delay, timeout, snapshotMarginSeconds)
	}
}

// TestPersistenceValues: an existing claim, a storage class, longer
// shutdowns; and nothing of it when persistence is off.
func TestPersistenceValues(t *testing.T) {
	on := func(p map[string]any) map[string]any { p["enabled"] = true; return p }

	dep, objs := deployment(t, "existingClaim", chartutil.Values{"persistence": on(map[string]any{"existingClaim": "budgets", "mountPath": "/data/"})})
	for k := range objs {
		if strings.HasPrefix(k, "PersistentVolumeClaim/") {
			t.Errorf("with an existing claim, the chart makes %s", k)
		}
	}
	checkSnapshot(t, dep, "budgets", "/data/", "10s")

	for class, want := range map[string]string{"fast-ssd": "fast-ssd", "-": ""} {
		_, objs := deployment(t, "storageClass "+class, chartutil.Values{"persistence": on(map[string]any{"storageClass": class})})
		var pvc corev1.PersistentVolumeClaim
		decodeStrict(t, "the claim", objs["PersistentVolumeClaim/rls-envoy-rls-data"], &pvc)
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != want {
			t.Errorf("storageClass %q: storageClassName %v, want %q", class, pvc.Spec.StorageClassName, want)
		}
	}

	dep, _ = deployment(t, "long shutdown", chartutil.Values{"shutdownDelay": "1m", "drainSeconds": 45, "persistence": on(map[string]any{})})
	checkSnapshot(t, dep, "rls-envoy-rls-data", "/var/lib/envoy-rls", "10s")
	if g := *dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 60+45+5+snapshotMarginSeconds {
		t.Errorf("terminationGracePeriodSeconds %d, want 60 + 45 + 5 + %d", g, snapshotMarginSeconds)
	}

	dep, objs = deployment(t, "defaults", chartutil.Values{})
	c := dep.Spec.Template.Spec.Containers[0]
	if _, ok := objs["PersistentVolumeClaim/rls-envoy-rls-data"]; ok || dep.Spec.Strategy.Type != "" || len(dep.Spec.Template.Spec.Volumes) != 1 || len(c.VolumeMounts) != 1 {
		t.Errorf("persistence off: a claim, a volume or a strategy: %+v %+v", dep.Spec.Strategy, dep.Spec.Template.Spec.Volumes)
	}
	if _, ok := flagValue(c.Args, "memory-snapshot"); ok {
		t.Errorf("persistence off: args %q", c.Args)
	}
}

func keys(objs map[string][]byte) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
