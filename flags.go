package main

import (
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// The flags several commands share, each defined once here with its
// default, and the one check of its value every command calls.

// feedFlag is --feed of every command; checkFeed checks its value.
func feedFlag() cli.Flag {
	return &cli.StringFlag{Name: "feed", Value: redisx.DefaultFeed, Usage: "feed name: the Redis keys are escf:{<feed>}:…",
		Sources: cli.EnvVars("ESCF_FEED")}
}

// checkFeed validates a feed name: redisx.ValidateFeed (braces, ':' and
// whitespace would break the hash tag or the key layout), and no control
// characters (they would garble every log line and redis-cli listing).
func checkFeed(feed string) error {
	if err := redisx.ValidateFeed(feed); err != nil {
		return usagef("--feed: %v", err)
	}
	for _, r := range feed {
		if r < 0x20 || r == 0x7f {
			return usagef("--feed: feed name %q contains the control character %q: use letters, digits, '-', '_' or '.'", feed, r)
		}
	}
	return nil
}

// esFlag is --es, the cluster's URLs (repeatable, comma-separated), of
// run, resync, status and consume --bootstrap; usage says what the
// command does with it. It has no default of its own: run and resync
// follow es.DefaultURL without it (esURLs), status shows no cluster side,
// consume --bootstrap refuses to start.
func esFlag(usage string) cli.Flag {
	return &cli.StringSliceFlag{Name: "es", Usage: usage, Sources: cli.EnvVars("ESCF_ES_URL")}
}

// esURLs are the URLs of --es, or def when none is given.
func esURLs(cmd *cli.Command, def ...string) []string {
	if urls := splitList(cmd.StringSlice("es")); len(urls) > 0 {
		return urls
	}
	return def
}

// partitionsFlag is --partitions (default redisx.DefaultPartitions);
// usage says whether the command chooses the count (run, resync) or
// reads it (consume, status). checkPartitionsFlag checks its value.
func partitionsFlag(usage string) cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: redisx.DefaultPartitions, Usage: usage, Sources: cli.EnvVars("ESCF_PARTITIONS")}
}

// readPartitionsFlag is --partitions of the commands that read a feed
// (consume, status): its default is the feed's own count, not 1.
func readPartitionsFlag() cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: redisx.DefaultPartitions, Usage: readPartitionsUsage,
		DefaultText: "the count the feed records, else 1", Sources: cli.EnvVars("ESCF_PARTITIONS")}
}

// checkPartitionsFlag refuses a --partitions outside 1..MaxPartitions.
func checkPartitionsFlag(cmd *cli.Command) error {
	if n := cmd.Int("partitions"); n < 1 || n > redisx.MaxPartitions {
		return usagef("--partitions %d: want 1..%d", n, redisx.MaxPartitions)
	}
	return nil
}
