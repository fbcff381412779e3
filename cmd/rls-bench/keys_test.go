package main

import (
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPickTurn: the pickers of three workers share one counter, so that
// together, drawing concurrently, they visit every key index exactly once
// per cycle of keys draws.
func TestPickTurn(t *testing.T) {
	const keys, cycles, workers = 97, 5, 3
	pick := keyPick{name: pickTurn}
	var turn atomic.Uint64
	counts := make([][]int, workers)
	var wg sync.WaitGroup
	var draws atomic.Int64
	for w := range workers {
		next := pick.picker(keys, rand.New(rand.NewPCG(1, uint64(w))), &turn)
		counts[w] = make([]int, keys)
		wg.Go(func() {
			for draws.Add(1) <= keys*cycles {
				counts[w][next()]++
			}
		})
	}
	wg.Wait()
	for k := range keys {
		total := 0
		for w := range workers {
			total += counts[w][k]
		}
		if total != cycles {
			t.Errorf("key %d drawn %d times over %d cycles, want once a cycle", k, total, cycles)
		}
	}
	// Drawn in turn, a cycle's draws are a permutation of the indexes
	// whoever draws them.
	var one atomic.Uint64
	a := pick.picker(keys, nil, &one)
	b := pick.picker(keys, nil, &one)
	for i := range 2 * keys {
		next := a
		if i%3 == 0 {
			next = b
		}
		if got := next(); got != i%keys {
			t.Fatalf("draw %d gave key %d, want %d", i, got, i%keys)
		}
	}
}

// TestPickZipf: with s=1.1 over 1000 keys, lower indexes are picked more
// often, every draw is in range, and workers draw distinct streams.
func TestPickZipf(t *testing.T) {
	const keys, draws = 1000, 200000
	pick, err := parsePick(pickZipf, 1.1, true)
	if err != nil {
		t.Fatal(err)
	}
	next := pick.picker(keys, rand.New(rand.NewPCG(1, 0)), nil)
	counts := make([]int, keys)
	for range draws {
		k := next()
		if k < 0 || k >= keys {
			t.Fatalf("drew key %d, outside [0, %d)", k, keys)
		}
		counts[k]++
	}
	// P(k) is proportional to (1+k)^-1.1: about 18%, 1.3% and 0.02% of
	// the draws for keys 0, 10 and 500.
	if !(counts[0] > counts[10] && counts[10] > counts[500] && counts[500] > 0) {
		t.Errorf("key 0 drawn %d times, 10 %d, 500 %d: want decreasing, all drawn", counts[0], counts[10], counts[500])
	}
	if counts[0] < draws/10 || counts[0] > draws/4 {
		t.Errorf("key 0 drawn %d times in %d, want about 18%%", counts[0], draws)
	}
	other := pick.picker(keys, rand.New(rand.NewPCG(1, 1)), nil)
	again := pick.picker(keys, rand.New(rand.NewPCG(1, 0)), nil)
	first := pick.picker(keys, rand.New(rand.NewPCG(1, 0)), nil)
	same, repeat := 0, 0
	for range 1000 {
		k := first()
		if other() == k {
			same++
		}
		if again() == k {
			repeat++
		}
	}
	if same > 500 || repeat != 1000 {
		t.Errorf("another worker's stream matched %d draws in 1000, the same seed's %d: want distinct streams, repeatable ones", same, repeat)
	}
}

func TestPickUniformInRange(t *testing.T) {
	next := keyPick{name: pickUniform}.picker(10, rand.New(rand.NewPCG(1, 0)), nil)
	counts := make([]int, 10)
	for range 10000 {
		counts[next()]++
	}
	for k, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("key %d drawn %d times in 10000, want about 1000", k, n)
		}
	}
}

// TestLoadPicksInTurn: over several workers and connections, the server
// sees every key index exactly once per -keys requests.
func TestLoadPicksInTurn(t *testing.T) {
	s, addr := startOddServer(t)
	rep := runLoadJSON(t, "-addr", addr, "-n", "300", "-c", "3", "-conns", "2", "-warmup", "0",
		"-keys", "100", "-pick", "turn")
	if rep.Requests != 300 || rep.Pick != "turn" {
		t.Errorf("requests %d pick %q, want 300 and turn", rep.Requests, rep.Pick)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.indexes) != 100 {
		t.Errorf("server saw %d key indexes, want 100", len(s.indexes))
	}
	for k := range 100 {
		if s.indexes[k] != 3 {
			t.Errorf("key %d requested %d times, want 3", k, s.indexes[k])
		}
	}
}

// TestLoadPicksZipf: the server sees the hottest keys most and the report
// names the exponent, in each format.
func TestLoadPicksZipf(t *testing.T) {
	s, addr := startOddServer(t)
	rep := runLoadJSON(t, "-addr", addr, "-n", "3000", "-c", "4", "-warmup", "0",
		"-keys", "1000", "-pick", "zipf", "-zipf-s", "1.5")
	if rep.Requests != 3000 || rep.Pick != "zipf1.5" {
		t.Errorf("requests %d pick %q, want 3000 and zipf1.5", rep.Requests, rep.Pick)
	}
	s.mu.Lock()
	if !(s.indexes[0] > s.indexes[3] && s.indexes[3] > s.indexes[100]) {
		t.Errorf("key 0 requested %d times, 3 %d, 100 %d: want decreasing", s.indexes[0], s.indexes[3], s.indexes[100])
	}
	for k := range s.indexes {
		if k < 0 || k >= 1000 {
			t.Errorf("server saw key index %d, outside [0, 1000)", k)
		}
	}
	s.mu.Unlock()

	for format, want := range map[string]string{"tsv": "\tcpu_us_per_call\tpick\n", "text": "keys 1000  pick zipf1.1  c 4"} {
		var stdout, stderr strings.Builder
		args := []string{"load", "-addr", addr, "-n", "10", "-c", "4", "-warmup", "0", "-keys", "1000", "-pick", "zipf", "-format", format}
		if code := run(args, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), want) {
			t.Errorf("%s: exit %d, report %q, want %q", format, code, stdout.String(), want)
		}
		if format == "tsv" && !strings.HasSuffix(stdout.String(), "\tzipf1.1\n") {
			t.Errorf("tsv report %q does not end with the default pick zipf1.1", stdout.String())
		}
	}
}
