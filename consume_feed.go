package main

// consume on a feed that does not exist (issue #23): it refuses, naming
// what to check, instead of creating the feed's stream and waiting for
// ever; --wait-for-feed lets consumers start before the relay.

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

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
