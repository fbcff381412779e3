package region

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refLedger works out claims as the ledger did with a map of every
// bucket's held claims (each its own slices, made anew at every
// division): what the ledger must work out the same.
type refLedger struct {
	*Ledger // its reports, heard, silence and lag; not its held claims
	held    map[uint64]*refHeld
}

type refHeld struct {
	claims []Claim
	epoch  int64
	limit  Bucket
}

func (l *refLedger) Claims(epoch int64, buckets map[uint64]Bucket) map[uint64]Claim {
	prev := epoch - 1
	n := len(l.regions)
	states := make([]State, n)
	fresh := 0
	for i := range l.regions {
		switch {
		case i == l.self || l.heard[i] >= prev:
			states[i] = Fresh
			fresh++
		case l.heard[i] >= 0 && prev-l.heard[i] <= l.silence:
			states[i] = Late
		default:
			states[i] = Gone
		}
	}
	if 2*fresh < n {
		for i, st := range states {
			if st == Gone && l.heard[i] >= 0 {
				states[i] = Late
			}
		}
	}
	sums := make(map[uint64][]Record, len(buckets))
	limits := make(map[uint64]Bucket, len(buckets))
	for key, b := range buckets {
		sums[key] = make([]Record, n)
		limits[key] = b
	}
	for _, two := range l.reports {
		for _, r := range two {
			if r.Epoch != prev {
				continue
			}
			place := l.place(r.Region)
			for key, rec := range r.all() {
				s := sums[key]
				if s == nil {
					s = make([]Record, n)
					sums[key] = s
					limits[key] = rec.Bucket
				}
				s[place].Demand += want(rec.Demand)
				s[place].Usage += want(rec.Usage)
				b := limits[key]
				limits[key] = Bucket{Size: min(b.Size, want(rec.Size)), Rate: min(b.Rate, want(rec.Rate))}
			}
		}
	}
	late := slices.Contains(states, Late)
	if late {
		for key, h := range l.held {
			if _, ok := limits[key]; !ok && heldByLate(h.claims, states) {
				sums[key] = make([]Record, n)
				limits[key] = h.limit
			}
		}
	}
	out := make(map[uint64]Claim, len(sums))
	views := make([]View, n)
	for key, b := range limits {
		h := l.held[key]
		for i := range views {
			sum := sums[key][i]
			views[i] = View{State: states[i], Demand: sum.Demand, Usage: sum.Usage}
			if states[i] == Fresh && h != nil {
				views[i].Pending = min(sum.Demand*l.lag, max(h.claims[i].Size-sum.Usage, 0))
			}
			if states[i] == Late {
				views[i].Held = Claim{Size: b.Size / float64(n), Share: 1 / float64(n)}
				if h != nil {
					views[i].Held = h.claims[i]
				}
			}
		}
		claims := make([]Claim, n)
		Divide(b.Size, b.Rate, views, claims)
		if late && h != nil {
			for i := range claims {
				if states[i] == Fresh {
					claims[i] = Claim{Size: min(claims[i].Size, h.claims[i].Size), Share: min(claims[i].Share, h.claims[i].Share)}
				}
			}
		}
		l.held[key] = &refHeld{claims: claims, epoch: epoch, limit: b}
		out[key] = claims[l.self]
	}
	for key, h := range l.held {
		if epoch-h.epoch > l.silence {
			delete(l.held, key)
		}
	}
	return out
}

// TestLedgerAsMaps: over random exchanges (regions of two replicas
// late, cut off, silent past the silence and back; buckets coming and
// going; limits changing), the ledger works out every claim a map of
// held claims did, and holds the same.
func TestLedgerAsMaps(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			names := []string{"ap", "eu", "us"}
			got := NewLedger("eu", names, 3, 500*time.Millisecond)
			want := &refLedger{Ledger: NewLedger("eu", names, 3, 500*time.Millisecond), held: map[uint64]*refHeld{}}
			keys := 60
			// Quantities of a few bits, so that sums are exact in any order.
			q := func(n int) float64 { return float64(rng.IntN(4*n)) / 4 }
			limitOf := func(key uint64) Bucket {
				return Bucket{Size: float64(10 + key%7), Rate: float64(5 + key%5)}
			}
			down := map[string]int{} // epochs a region's reports stay away
			seen := map[State]int{}
			for epoch := int64(1); epoch <= 400; epoch++ {
				for _, name := range names {
					if down[name] > 0 {
						down[name]--
						continue
					}
					if name != "eu" && rng.IntN(40) == 0 {
						down[name] = rng.IntN(8) // late, then past the silence
					}
					for replica := range 2 {
						r := Report{Region: name, Replica: fmt.Sprint(replica), Epoch: epoch - 1, Buckets: map[uint64]Record{}}
						if rng.IntN(10) == 0 {
							r.Epoch = epoch - 1 - int64(rng.IntN(3)) // a report delayed
						}
						for range rng.IntN(keys / 2) {
							key := uint64(rng.IntN(keys))
							b := limitOf(key)
							if rng.IntN(30) == 0 {
								b.Size-- // a config changing
							}
							r.Buckets[key] = Record{Demand: q(20), Usage: q(10), Bucket: b}
						}
						if rng.IntN(2) == 0 {
							got.Take(r)
							want.Take(r)
							continue
						}
						// As an exchange reads it: a list, each its own.
						enc := AppendReport(nil, r)
						for _, l := range []*Ledger{got, want.Ledger} {
							read, err := parseReport(r.Region, r.Replica, enc, l.spare())
							if err != nil {
								t.Fatal(err)
							}
							l.Take(read)
						}
					}
				}
				mine := map[uint64]Bucket{}
				for range rng.IntN(keys / 3) {
					key := uint64(rng.IntN(keys))
					mine[key] = limitOf(key)
				}
				g, w := got.Claims(epoch, mine), want.Claims(epoch, mine)
				if !maps.Equal(g, w) {
					t.Fatalf("epoch %d: claims %v, want %v", epoch, g, w)
				}
				for _, st := range got.states {
					seen[st]++
				}
				got.Forget(epoch)
				want.Forget(epoch)
				if len(got.held.keys) != len(want.held) {
					t.Fatalf("epoch %d: %d buckets held, want %d", epoch, len(got.held.keys), len(want.held))
				}
				for key, h := range want.held {
					if !slices.Equal(got.held.of(key, len(names)), h.claims) {
						t.Fatalf("epoch %d, bucket %d: holds %v, want %v", epoch, key, got.held.of(key, len(names)), h.claims)
					}
				}
			}
			if seen[Late] == 0 || seen[Gone] == 0 {
				t.Fatalf("regions were late %d times and gone %d: the run tried too little", seen[Late], seen[Gone])
			}
		})
	}
}
