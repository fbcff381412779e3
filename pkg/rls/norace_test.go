//go:build !race

package rls

const raceEnabled = false
