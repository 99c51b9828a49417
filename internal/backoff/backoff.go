package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay is the pause before retry attempt (1 for the first retry):
// min·2^(attempt-1), capped at max, then jittered down to a random point
// in [d/2, d] ("equal jitter": never more than the cap, never less than
// half the exponential step, so that many clients failing together spread
// out). A max below min is taken as min; attempt < 1 as 1.
func Delay(min, max time.Duration, attempt int) time.Duration {
	if max < min {
		max = min
	}
	d := max
	if attempt < 1 {
		attempt = 1
	}
	if shift := attempt - 1; shift < 62 {
		if s := min << shift; s > 0 && s < max && s>>shift == min {
			d = s
		}
	}
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Backoff counts the attempts of one retry loop: Next is the pause before
// the next one, Reset starts over after a success. The zero value with Min
// and Max set is ready to use. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	attempt  int
}

// Next returns the pause before the next attempt (see Delay).
func (b *Backoff) Next() time.Duration {
	b.attempt++
	return Delay(b.Min, b.Max, b.attempt)
}

// Reset makes the next pause the first one again.
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempts is how many pauses Next has returned since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }
