package consumer_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestWaitForFeed: with no wait, a feed that does not exist is refused at
// once; with a wait, a feed a relay starts meanwhile is found, one that
// never appears is refused once the wait is over, and a stop ends the
// wait. Nothing is written in any case.
func TestWaitForFeed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	keyspace := func() []string {
		keys := rdb.Keys(ctx, "*").Val()
		slices.Sort(keys)
		return keys
	}
	const poll = 10 * time.Millisecond

	t.Run("no wait", func(t *testing.T) {
		began := time.Now()
		err := consumer.WaitForFeed(ctx, rdb, "absent", 1, 0, poll, log)
		if !errors.Is(err, redisx.ErrNoFeed) || time.Since(began) > time.Second {
			t.Fatalf("WaitForFeed = %v after %s; want ErrNoFeed at once", err, time.Since(began))
		}
	})
	t.Run("wait over", func(t *testing.T) {
		began := time.Now()
		err := consumer.WaitForFeed(ctx, rdb, "absent", 3, 200*time.Millisecond, poll, log)
		var nf *redisx.FeedNotFoundError
		if !errors.As(err, &nf) || nf.Partitions != 3 {
			t.Fatalf("WaitForFeed = %v; want a *FeedNotFoundError for 3 partitions", err)
		}
		if d := time.Since(began); d < 200*time.Millisecond {
			t.Fatalf("gave up after %s, before the 200ms wait was over", d)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := consumer.WaitForFeed(sctx, rdb, "absent", 1, time.Minute, poll, log); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitForFeed = %v; want the context's error", err)
		}
	})
	if keys := keyspace(); len(keys) != 0 {
		t.Fatalf("waiting for absent feeds wrote %v", keys)
	}
	t.Run("appears", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- consumer.WaitForFeed(ctx, rdb, "late", 1, time.Minute, poll, log) }()
		time.Sleep(100 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("WaitForFeed returned %v before the feed existed", err)
		default:
		}
		if err := rdb.HSet(ctx, redisx.NewKeys("late").Meta(), "created", "2026-01-01T00:00:00Z").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WaitForFeed = %v once the relay wrote the meta hash", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitForFeed did not see the feed appear")
		}
		if keys := keyspace(); !slices.Equal(keys, []string{redisx.NewKeys("late").Meta()}) {
			t.Fatalf("keys %v; want only the meta hash the test wrote", keys)
		}
	})
}
