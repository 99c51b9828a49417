package consumer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// FeedPoll is how often WaitForFeed looks for the feed.
const FeedPoll = 500 * time.Millisecond

// WaitForFeed returns nil once the feed exists in rdb (redisx.FindFeed;
// partitions > 1 also looks at the partitions' keys). When it does not, it
// looks again every poll for up to wait, logging once that it waits and
// once that the feed appeared, and returns the last *redisx.FeedNotFoundError
// when wait is over (at once for wait 0). It returns ctx's error when ctx
// ends first, and a Redis error at once. It writes nothing.
func WaitForFeed(ctx context.Context, rdb redis.UniversalClient, feed string, partitions int, wait, poll time.Duration, log *slog.Logger) error {
	began := time.Now()
	deadline := began.Add(wait)
	for logged := false; ; logged = true {
		_, err := redisx.FindFeed(ctx, rdb, feed, partitions)
		if err == nil || !errors.Is(err, redisx.ErrNoFeed) {
			if err == nil && logged {
				log.Info("the feed exists: a relay started on it", logkey.Feed, feed, logkey.Took, time.Since(began).Round(time.Millisecond).String())
			}
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		if !logged {
			log.Info("waiting for the feed: no relay has written to it yet", logkey.Feed, feed, logkey.Timeout, wait.String())
		}
		t := time.NewTimer(min(poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
