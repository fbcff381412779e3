package leaky

import (
	"fmt"
	"time"
)

// MaxSize is the largest Size and DripSize a Bucket may have. It keeps
// every product of the algorithm far from int64 overflow and exact in a
// double (2^53).
const MaxSize = 1 << 40

// MaxValue bounds every count and every time in microseconds (2^53, some
// 285 years): values beyond saturate to it. Below it, every value and every
// product the algorithm takes is exact in a double, so the Redis script,
// whose numbers are doubles, reaches the same results bit for bit.
const MaxValue = 1 << 53

// MaxDripRate is the longest drip rate: 2^53 microseconds, some 285 years.
const MaxDripRate = MaxValue * time.Microsecond

// Bucket is a leaky bucket's parameters: it holds at most Size requests
// and leaks DripSize of them every DripRate.
//
// The zero Bucket admits nothing. Decide treats a field out of range as its
// nearest valid value; Validate reports such fields.
type Bucket struct {
	// Size is the most requests the bucket holds at once; 0 rejects every
	// request.
	Size int64
	// DripRate is the time between two drips: at least one microsecond and
	// a whole number of microseconds.
	DripRate time.Duration
	// DripSize is how many requests leak out at each drip; at least 1.
	DripSize int64
}

// Validate reports the first field of b that is out of range.
func (b Bucket) Validate() error {
	switch {
	case b.Size < 0:
		return fmt.Errorf("size must be >= 0, got %d", b.Size)
	case b.Size > MaxSize:
		return fmt.Errorf("size must be <= %d, got %d", int64(MaxSize), b.Size)
	case CheckDripRate(b.DripRate) != nil:
		return CheckDripRate(b.DripRate)
	case b.DripSize < 1:
		return fmt.Errorf("drip_size must be >= 1, got %d", b.DripSize)
	case b.DripSize > MaxSize:
		return fmt.Errorf("drip_size must be <= %d, got %d", int64(MaxSize), b.DripSize)
	}
	return nil
}

// CheckDripRate reports a drip rate out of range: under a microsecond, not
// a whole number of microseconds, or over MaxDripRate.
func CheckDripRate(d time.Duration) error {
	switch {
	case d < time.Microsecond:
		return fmt.Errorf("drip_rate must be at least 1us, got %s", d)
	case d%time.Microsecond != 0:
		return fmt.Errorf("drip_rate must be a whole number of microseconds, got %s", d)
	case d > MaxDripRate:
		return fmt.Errorf("drip_rate must be at most %s, got %s", MaxDripRate, d)
	}
	return nil
}

// String formats b as "size (drip_size per drip_rate)", e.g. "60 (1 per 1s)".
func (b Bucket) String() string {
	return fmt.Sprintf("%d (%d per %s)", b.Size, b.DripSize, b.DripRate)
}

// Clamped returns b with every field moved into its valid range, which is
// how Decide reads a Bucket.
func (b Bucket) Clamped() Bucket {
	if b.Size < 0 {
		b.Size = 0
	}
	if b.Size > MaxSize {
		b.Size = MaxSize
	}
	b.DripRate = min(max(b.DripRate, time.Microsecond), MaxDripRate)
	if b.DripSize < 1 {
		b.DripSize = 1
	}
	if b.DripSize > MaxSize {
		b.DripSize = MaxSize
	}
	return b
}
