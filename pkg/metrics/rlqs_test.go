package metrics

import "testing"

// TestRLQSCountsFollowTheService: the streams and buckets gauges read the
// service's own counts at each scrape, and an abandon counts only as one.
func TestRLQSCountsFollowTheService(t *testing.T) {
	m := New(0.8)
	obs := m.RLQS()
	streams, buckets := 3, 7
	m.WatchRLQS(func() int { return streams }, func() int { return buckets })
	if s, b := gatherValue(t, m, "envoy_rls_rlqs_streams"), gatherValue(t, m, "envoy_rls_rlqs_buckets"); s != 3 || b != 7 {
		t.Fatalf("streams %v, buckets %v, want 3 and 7", s, b)
	}
	streams, buckets = 2, 5
	obs.Assigned("abandon", true)
	if s, b := gatherValue(t, m, "envoy_rls_rlqs_streams"), gatherValue(t, m, "envoy_rls_rlqs_buckets"); s != 2 || b != 5 {
		t.Errorf("after the service's counts moved: streams %v, buckets %v, want 2 and 5", s, b)
	}
	if a := gatherValue(t, m, "envoy_rls_rlqs_abandons_total"); a != 1 {
		t.Errorf("abandons %v, want 1", a)
	}
}
