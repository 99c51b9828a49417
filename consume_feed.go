package main

// consume on a feed that does not exist (issue #23): it refuses, naming
// what to check, instead of creating the feed's stream and waiting for
// ever; --wait-for-feed lets consumers start before the relay.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// waitForFeedFlag is consume's --wait-for-feed; checkWaitForFeed checks
// its value.
func waitForFeedFlag() cli.Flag {
	return &cli.DurationFlag{Name: "wait-for-feed", Usage: "when the feed does not exist yet (no relay has started on it), wait up to this long for it before exiting 1; 0: do not wait",
		Sources: cli.EnvVars("ESCF_WAIT_FOR_FEED")}
}

// checkWaitForFeed refuses a negative --wait-for-feed.
func checkWaitForFeed(cmd *cli.Command) error {
	if d := cmd.Duration("wait-for-feed"); d < 0 {
		return usagef("--wait-for-feed %s: want 0 (do not wait) or a positive duration such as 2m", d)
	}
	return nil
}

// feedPoll is how often waitForFeed looks for the feed.
const feedPoll = 500 * time.Millisecond

// waitForFeed returns nil once the feed exists in rdb (redisx.FindFeed;
// partitions > 1 also looks at the partitions' keys). When it does not, it
// looks again every poll for up to wait, logging once that it waits and
// once that the feed appeared, and returns the last *redisx.FeedNotFoundError
// when wait is over (at once for wait 0). It returns ctx's error when ctx
// ends first, and a Redis error at once. It writes nothing.
func waitForFeed(ctx context.Context, rdb redis.UniversalClient, feed string, partitions int, wait, poll time.Duration, log *slog.Logger) error {
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

// explainNoFeed is what to check when a feed does not exist (redisAt is
// the --redis URL, password masked): the --feed spelling, the --redis URL
// and database, and whether the relay ran; for consume (waited ≥ 0: how
// long it waited) --wait-for-feed and where the feeds are listed, and for
// consume --bootstrap that the copy needs the relay's feed. status passes
// waited < 0 (it lists the feeds itself).
func explainNoFeed(nf *redisx.FeedNotFoundError, redisAt string, waited time.Duration, bootstrap bool) string {
	msg := fmt.Sprintf("%s. Check the spelling of --feed %s, the --redis URL and database (%s), and that a relay (`es-changefeed run --feed %s`) has started on that Redis",
		nf.Error(), nf.Feed, redisAt, nf.Feed)
	switch {
	case waited > 0:
		msg += fmt.Sprintf("; waited %s for it (--wait-for-feed)", waited)
	case waited == 0:
		msg += "; to start consumers before the relay, pass --wait-for-feed <duration>"
	}
	if waited >= 0 {
		msg += "; `es-changefeed status --feed " + nf.Feed + "` lists the feeds that Redis holds"
	}
	if bootstrap {
		msg += "; --bootstrap copies the indices the feed's relay follows: start the relay first"
	}
	return msg
}
