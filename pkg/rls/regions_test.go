package rls

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
)

// halfRegions is this region holding half of every limit, as an exchange
// of two regions does before they have exchanged.
type halfRegions struct{}

func (halfRegions) Claim(_ string, l limit.Limit) limit.Limit {
	return region.Scale(l, region.Claim{Size: float64(l.Size) / 2, Share: 0.5})
}

func (halfRegions) Bucket(_ string, l limit.Limit) region.BucketView {
	return region.BucketView{Region: "eu", Size: float64(l.Size) / 2, Share: 0.5, Rate: l.PerSecond() / 2}
}

func (halfRegions) Statuses() []region.Status {
	return []region.Status{{Region: "eu", Own: true, State: "fresh"}, {Region: "us", State: "late", LastExchangeSeconds: 3, FailedExchanges: 2}}
}

// TestAdminUnderRegionClaims: with regions, GET /buckets and POST
// /explain read a bucket under this region's claim, which the store
// decides it under (a bucket of 10 of which the region holds 5 has 5
// left, and 6 hits do not fit), and show the regions' view of it.
func TestAdminUnderRegionClaims(t *testing.T) {
	for _, regions := range []Regions{nil, halfRegions{}} {
		svc, _ := newService(t, Options{Regions: regions})
		h := AdminHandler(svc, false, true)
		wantRemaining, wantAdmits := int64(10), true
		if regions != nil {
			wantRemaining, wantAdmits = 5, false
		}

		code, out := do(t, h, "GET", bucketsURL("api", "user=alice"), "")
		var b Buckets
		if err := json.Unmarshal([]byte(out), &b); code != http.StatusOK || err != nil {
			t.Fatalf("GET /buckets: %d %v\n%s", code, err, out)
		}
		got := b.Descriptors[0].Buckets[0]
		if got.Remaining != wantRemaining || (got.Regions != nil) != (regions != nil) || (b.Regions != nil) != (regions != nil) {
			t.Fatalf("regions %v: GET /buckets of a fresh bucket of 10: remaining %d, want %d; regions shown: %v, %v\n%s",
				regions, got.Remaining, wantRemaining, got.Regions != nil, b.Regions != nil, out)
		}
		if regions != nil && (got.Regions.Region != "eu" || got.Regions.Size != 5 || b.Regions[1].State != "late" || b.Regions[1].FailedExchanges != 2) {
			t.Fatalf("GET /buckets with regions: %s", out)
		}

		body := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}], "hits_addend": 6}]}`
		code, out = do(t, h, "POST", "/explain", body)
		var e Explanation
		if err := json.Unmarshal([]byte(out), &e); code != http.StatusOK || err != nil {
			t.Fatalf("POST /explain: %d %v\n%s", code, err, out)
		}
		st := e.Descriptors[0].Walk[0].Limits[0].Bucket.State
		if st.Admits != wantAdmits || (st.Regions != nil) != (regions != nil) || (e.Regions != nil) != (regions != nil) {
			t.Fatalf("regions %v: POST /explain of 6 hits on a fresh bucket of 10: admits %v, want %v; regions shown: %v, %v\n%s",
				regions, st.Admits, wantAdmits, st.Regions != nil, e.Regions != nil, out)
		}
	}
}
