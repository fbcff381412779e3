package region

import (
	"fmt"
	"testing"
)

// TestLedgersThroughOneLinkCut: three regions, each a ledger; from epoch
// 3 the reports between eu and ap are lost (us still hears both) while
// eu's demand rises and ap's falls. Each region's own claim, as its
// ledger works it out, must add up with the others' to no more than the
// limit at every epoch.
func TestLedgersThroughOneLinkCut(t *testing.T) {
	names := []string{"ap", "eu", "us"}
	ledgers := map[string]*Ledger{}
	for _, n := range names {
		ledgers[n] = NewLedger(n, names, 30, 0)
	}
	limit := Bucket{Size: 60, Rate: 60}
	demand := map[string]float64{"eu": 30, "us": 30, "ap": 30}
	usage := map[string]float64{}
	for epoch := int64(1); epoch <= 12; epoch++ {
		if epoch == 4 {
			demand["eu"], demand["ap"] = 90, 5
		}
		for _, from := range names {
			rep := Report{Region: from, Replica: "0", Epoch: epoch - 1, Buckets: map[uint64]Record{1: {Demand: demand[from], Usage: usage[from], Bucket: limit}}}
			for _, to := range names {
				if epoch >= 3 && ((from == "eu" && to == "ap") || (from == "ap" && to == "eu")) {
					continue
				}
				ledgers[to].Take(rep)
			}
		}
		size, share := 0.0, 0.0
		var got []string
		for _, n := range names {
			c := ledgers[n].Claims(epoch, map[uint64]Bucket{1: limit})[1]
			size += c.Size
			share += c.Share
			usage[n] = c.Size // each fills what it holds
			got = append(got, fmt.Sprintf("%s %.0f/%.2f", n, c.Size, c.Share))
		}
		t.Logf("epoch %d: %v", epoch, got)
		if size > 60+1e-9 || share > 1+1e-9 {
			t.Fatalf("epoch %d: the regions' own claims add up to %.1f of 60 and %.2f of the rate: %v", epoch, size, share, got)
		}
	}
}
