//go:build race

package rls

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts vary by one or so from run to run.
const raceEnabled = true
