package region

import "slices"

// statesAt is each region's state at a division of the reports of epoch
// prev: fresh if its report of prev arrived (and Self's reached it), late
// if not and it reported within the silence, gone if silent longer.
func (l *Ledger) statesAt(prev int64) []State {
	n := len(l.regions)
	states := make([]State, n)
	fresh := 0
	for i := range l.regions {
		switch {
		case i == l.self || l.heard[i] >= prev && l.undelivered[i] < prev:
			states[i] = Fresh
			fresh++
		case l.heard[i] >= prev:
			states[i] = Late // it did not get Self's report: it counts Self late
		case l.heard[i] >= 0 && prev-l.heard[i] <= l.silence:
			states[i] = Late
		default:
			states[i] = Gone
		}
	}
	// The regions counted late first-hand, for Self's next report; then
	// those whose report of the epoch counts Self late, late in turn: a
	// link cut one way, or a write that landed though its answer did not
	// come back, leaves one side hearing the other but not the other
	// way, and each must hold to what it had while the other does.
	l.late = l.late[:0]
	for i, st := range states {
		if st != Fresh {
			l.late = append(l.late, KeyHash(l.regions[i]))
		}
	}
	for _, two := range l.reports {
		for _, r := range two {
			if i := l.place(r.Region); i >= 0 && i != l.self && r.Epoch == prev && states[i] == Fresh && slices.Contains(r.Late, l.selfHash) {
				states[i] = Late
				fresh--
			}
		}
	}
	// A region that hears from fewer than half the regions (itself
	// included) is more likely the one cut off than they are gone: it
	// gives no silent region's claim to itself, however long the silence.
	if 2*fresh < n {
		for i, st := range states {
			if st == Gone && l.heard[i] >= 0 {
				states[i] = Late
			}
		}
	}
	return states
}

// Undelivered notes that Self's report of epoch did not reach region's
// store: that region counts Self late, and Self counts it late in turn,
// so that neither takes more than it held while one hears the other and
// the other does not (a link cut one way).
func (l *Ledger) Undelivered(region string, epoch int64) {
	if i := l.place(region); i >= 0 && i != l.self {
		l.undelivered[i] = max(l.undelivered[i], epoch)
	}
}

// lateHere is what Self's next report says it counted late (Report.Late).
func (l *Ledger) lateHere() []uint64 { return slices.Clone(l.late) }
