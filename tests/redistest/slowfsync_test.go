package redistest_test

import (
	"context"
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
			var acked int64
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
				n, err := rdb.Incr(ctx, "n").Result()
				if err != nil {
					t.Fatal(err)
				}
				acked = n
			}
			srv.Stop()
			srv.StartAgain()
			got, err := srv.Client(t).Get(ctx, "n").Int64()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("appendfsync %s: %d increments acknowledged, %d after the SIGKILL", tt.fsync, acked, got)
			if lost := got < acked; lost != tt.wantLoss {
				t.Errorf("appendfsync %s: %d acknowledged, %d kept: loss %v, want %v", tt.fsync, acked, got, lost, tt.wantLoss)
			}
		})
	}
}
