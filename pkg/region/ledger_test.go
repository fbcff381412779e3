package region

import (
	"fmt"
	"testing"
)

// TestLedgersThroughOneLinkCut: three regions, each a ledger; from epoch
// 3 the reports between eu and ap are lost (us still hears both), both
// ways or from eu to ap only, while demand moves: at epoch 4 eu's rises
// (and, both ways, ap's falls). A report that is lost is a write that
// failed: its sender knows (Undelivered). Each region's own claim, as its
// ledger works it out, must add up with the others' to no more than the
// limit at every epoch.
func TestLedgersThroughOneLinkCut(t *testing.T) {
	for _, c := range []struct {
		name          string
		lost          func(from, to string) bool
		before, after map[string]float64
	}{
		{"both ways", func(from, to string) bool { return from == "eu" && to == "ap" || from == "ap" && to == "eu" },
			map[string]float64{"eu": 30, "us": 30, "ap": 30}, map[string]float64{"eu": 90, "us": 30, "ap": 5}},
		// eu hears everyone, ap does not hear eu: eu must not take
		// more than it held while ap leaves it only that.
		{"one way", func(from, to string) bool { return from == "eu" && to == "ap" },
			map[string]float64{"eu": 5, "us": 30, "ap": 30}, map[string]float64{"eu": 90, "us": 30, "ap": 30}},
	} {
		t.Run(c.name, func(t *testing.T) { ledgersThroughACut(t, c.lost, nil, c.before, c.after) })
	}
	// eu's reports reach ap, but eu never learns they did (the answers
	// are lost): eu counts ap late and holds to its claim, while demand
	// moves from eu to ap. ap, told so by eu's reports, counts eu late
	// too, and does not take what eu still holds.
	t.Run("answers lost", func(t *testing.T) {
		ledgersThroughACut(t, func(string, string) bool { return false }, func(from, to string) bool { return from == "eu" && to == "ap" },
			map[string]float64{"eu": 90, "us": 5, "ap": 5}, map[string]float64{"eu": 5, "us": 5, "ap": 90})
	})
}

// ledgersThroughACut runs the ledgers of three regions, a report from one
// to another lost from epoch 3 where lost says, or arriving though its
// sender counts it lost where unacked says.
func ledgersThroughACut(t *testing.T, lost, unacked func(from, to string) bool, before, after map[string]float64) {
	names := []string{"ap", "eu", "us"}
	ledgers := map[string]*Ledger{}
	for _, n := range names {
		ledgers[n] = NewLedger(n, names, 30, 0)
	}
	limit := Bucket{Size: 60, Rate: 60}
	demand := before
	usage := map[string]float64{}
	for epoch := int64(1); epoch <= 12; epoch++ {
		if epoch == 4 {
			demand = after
		}
		for _, from := range names {
			rep := Report{Region: from, Replica: "0", Epoch: epoch - 1, Late: ledgers[from].lateHere(),
				Buckets: map[uint64]Record{1: {Demand: demand[from], Usage: usage[from], Bucket: limit}}}
			for _, to := range names {
				if epoch >= 3 && (lost(from, to) || unacked != nil && unacked(from, to)) {
					ledgers[from].Undelivered(to, epoch-1)
				}
				if epoch < 3 || !lost(from, to) {
					ledgers[to].Take(rep)
				}
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
