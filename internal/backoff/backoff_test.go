package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name     string
		min, max time.Duration
		attempt  int
		want     time.Duration // before jitter: the result is in [want/2, want]
	}{
		{name: "first", min: 10 * ms, max: time.Second, attempt: 1, want: 10 * ms},
		{name: "second doubles", min: 10 * ms, max: time.Second, attempt: 2, want: 20 * ms},
		{name: "fifth", min: 10 * ms, max: time.Second, attempt: 5, want: 160 * ms},
		{name: "capped", min: 10 * ms, max: 100 * ms, attempt: 5, want: 100 * ms},
		{name: "huge attempt stays capped", min: 10 * ms, max: 100 * ms, attempt: 1000, want: 100 * ms},
		{name: "overflowing shift stays capped", min: time.Hour, max: 2 * time.Hour, attempt: 40, want: 2 * time.Hour},
		{name: "attempt 0 is the first", min: 10 * ms, max: time.Second, attempt: 0, want: 10 * ms},
		{name: "max below min", min: 50 * ms, max: 10 * ms, attempt: 3, want: 50 * ms},
		{name: "zero", min: 0, max: 0, attempt: 3, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 200 {
				got := Delay(tt.min, tt.max, tt.attempt)
				if got < tt.want/2 || got > tt.want {
					t.Fatalf("Delay(%v, %v, %d) = %v, want in [%v, %v]", tt.min, tt.max, tt.attempt, got, tt.want/2, tt.want)
				}
			}
		})
	}
}

// TestDelay_Jitter: the pauses of one attempt differ (clients that failed
// together do not retry together).
func TestDelay_Jitter(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[Delay(time.Second, time.Minute, 3)] = true
	}
	if got := len(seen); got < 50 {
		t.Errorf("100 pauses took %d distinct values, want at least 50", got)
	}
}

func TestBackoff_NextReset(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for i, want := range []time.Duration{10, 20, 40, 80, 80} {
		want *= time.Millisecond
		got := b.Next()
		if got < want/2 || got > want {
			t.Fatalf("Next #%d = %v, want in [%v, %v]", i+1, got, want/2, want)
		}
	}
	if got, want := b.Attempts(), 5; got != want {
		t.Errorf("Attempts = %d, want %d", got, want)
	}
	b.Reset()
	if got, want := b.Attempts(), 0; got != want {
		t.Errorf("Attempts after Reset = %d, want %d", got, want)
	}
	if got := b.Next(); got < 5*time.Millisecond || got > 10*time.Millisecond {
		t.Errorf("Next after Reset = %v, want in [5ms, 10ms]", got)
	}
}
