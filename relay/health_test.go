package relay

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestFeed_HealthAndReady: what /healthz and /readyz report through the
// life of a feed: starting, standby while another relay holds the lease,
// leading, paused by backpressure; partitioned, the partitions held.
func TestFeed_HealthAndReady(t *testing.T) {
	type report struct {
		healthy bool
		health  string
		ready   bool
		why     string
	}
	get := func(f *Feed) report {
		h, hs := f.Health()
		r, rs := f.Ready()
		return report{h, hs, r, rs}
	}
	waitReport := func(t *testing.T, f *Feed, want report) {
		t.Helper()
		wait(t, fmt.Sprintf("the feed reports %+v (now %+v)", want, get(f)), func() bool { return get(f) == want })
	}
	t.Run("unpartitioned", func(t *testing.T) {
		ctx := context.Background()
		env := newFeedEnv(t)
		env.create(t, "h-a", 1)
		cfg := FeedConfig{Feed: "health", Targets: []string{"h-a"}, Retention: Retention{MaxBacklog: 2}}
		f, err := NewFeed(FeedConfig{ES: env.client, Redis: env.rdb, Feed: cfg.Feed, Targets: cfg.Targets})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := get(f), (report{true, "starting", false, "starting"}); got != want {
			t.Errorf("before Run: %+v, want %+v", got, want)
		}
		lease := f.Keys(0).Lease()
		if err := env.rdb.Set(ctx, lease, "another-relay", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		f = env.runFeed(t, cfg)
		wait(t, "the feed's relay starts", func() bool { return f.one.Load() != nil })
		if got, want := get(f), (report{true, "standby", false, "standby: another relay leads"}); got != want {
			t.Errorf("while another relay holds the lease: %+v, want %+v", got, want)
		}
		if err := env.rdb.Del(ctx, lease).Err(); err != nil {
			t.Fatal(err)
		}
		waitReport(t, f, report{true, "leading", true, "leading"})
		// A group that reads nothing: past MaxBacklog entries, reading
		// pauses and the relay is not ready.
		if err := env.rdb.XGroupCreateMkStream(ctx, f.Keys(0).Events(), "slow", "0").Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			env.do(t, http.MethodPut, fmt.Sprintf("/h-a/_doc/%d", i), `{}`)
		}
		waitReport(t, f, report{true, "leading", false, "leading, paused by backpressure"})
	})
	t.Run("partitioned", func(t *testing.T) {
		env := newFeedEnv(t)
		env.create(t, "h-b", 2)
		f := env.runFeed(t, FeedConfig{Feed: "health-parts", Targets: []string{"h-b"}, Partitions: 2})
		waitHeld(t, f, "start")
		want := "holding partitions [0 1] of 2 (1 relays)"
		waitReport(t, f, report{true, want, true, want})
	})
}
