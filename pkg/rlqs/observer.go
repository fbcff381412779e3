package rlqs

// Observer receives what the metrics count. Its methods must be quick and
// safe for concurrent use.
type Observer interface {
	// Report is one usage report of buckets buckets.
	Report(buckets int)
	// Assigned is one assignment sent: kind is "token_bucket",
	// "allow_all", "deny_all" or "abandon"; changed says it is not what
	// the stream was sent last for the bucket (a share that moved).
	Assigned(kind string, changed bool)
	// Failed is a report the store or registry could not serve, answered
	// by the failure mode.
	Failed()
	// FailStatic is a report the store or registry could not serve,
	// answered from the last division known.
	FailStatic()
	// Stalled is a stream ended because its client did not read an
	// answer for the stream's TTL.
	Stalled()
}

type noObserver struct{}

func (noObserver) Report(int)            {}
func (noObserver) Assigned(string, bool) {}
func (noObserver) Failed()               {}
func (noObserver) FailStatic()           {}
func (noObserver) Stalled()              {}
