package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestSlowFsync_LosesAcknowledgedWrites: with the slow-fsync shim and
// appendfsync everysec, a SIGKILL loses writes Redis acknowledged; with
// appendfsync always it loses none. The power-failure tests rely on both.
func TestSlowFsync_LosesAcknowledgedWrites(t *testing.T) {
	for _, tt := range []struct {
		fsync    string
		wantLoss bool
	}{{"everysec", true}, {"always", false}} {
		t.Run(tt.fsync, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{SlowFsync: 500 * time.Millisecond,
				Args: []string{"--appendonly", "yes", "--appendfsync", tt.fsync, "--auto-aof-rewrite-percentage", "0"}})
			ctx := context.Background()
			rdb := srv.Client(t)
			// Increment (in the background) until Redis holds acknowledged
			// writes back from its AOF (everysec, behind a slow fsync), or
			// 1.5 s with always (it never does): then SIGKILL.
			var acked atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if n, err := rdb.Incr(ctx, "n").Result(); err == nil {
						acked.Store(n)
					}
				}
			}()
			deadline := time.Now().Add(30 * time.Second)
			for {
				held, err := redistest.AOFHeldBack(ctx, srv.Client(t), nil)
				if err != nil {
					t.Fatal(err)
				}
				if (tt.wantLoss && held) || (!tt.wantLoss && time.Now().After(deadline.Add(-28500*time.Millisecond))) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("Redis never held writes back from its AOF within 30s")
				}
			}
			n := acked.Load() // acknowledged before the kill
			srv.Stop()
			close(stop)
			<-done
			srv.StartAgain()
			got, err := srv.Client(t).Get(ctx, "n").Int64()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("appendfsync %s: %d increments acknowledged, %d after the SIGKILL", tt.fsync, n, got)
			if lost := got < n; lost != tt.wantLoss {
				t.Errorf("appendfsync %s: %d acknowledged, %d kept: loss %v, want %v", tt.fsync, n, got, lost, tt.wantLoss)
			}
		})
	}
}
