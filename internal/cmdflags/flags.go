package cmdflags

import (
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// The flags several commands share, each defined once here with its
// default, and the one check of its value every command calls.

// FeedFlag is --feed of every command; CheckFeed checks its value.
func FeedFlag() cli.Flag {
	return &cli.StringFlag{Name: "feed", Value: redisx.DefaultFeed, Usage: "feed name: the Redis keys are escf:{<feed>}:…",
		Sources: cli.EnvVars("ESCF_FEED")}
}

// CheckFeed validates a feed name: redisx.ValidateFeed (braces, ':' and
// whitespace would break the hash tag or the key layout), and no control
// characters (they would garble every log line and redis-cli listing).
func CheckFeed(feed string) error {
	if err := redisx.ValidateFeed(feed); err != nil {
		return Usagef("--feed: %v", err)
	}
	for _, r := range feed {
		if r < 0x20 || r == 0x7f {
			return Usagef("--feed: feed name %q contains the control character %q: use letters, digits, '-', '_' or '.'", feed, r)
		}
	}
	return nil
}

// EsFlag is --es, the cluster's URLs (repeatable, comma-separated), of
// run, resync, status and consume --bootstrap; usage says what the
// command does with it. It has no default of its own: run and resync
// follow es.DefaultURL without it (EsURLs), status shows no cluster side,
// consume --bootstrap refuses to start.
func EsFlag(usage string) cli.Flag {
	return &cli.StringSliceFlag{Name: "es", Usage: usage, Sources: cli.EnvVars("ESCF_ES_URL")}
}

// EsURLs are the URLs of --es, or def when none is given.
func EsURLs(cmd *cli.Command, def ...string) []string {
	if urls := SplitList(cmd.StringSlice("es")); len(urls) > 0 {
		return urls
	}
	return def
}

// PartitionsFlag is --partitions (default redisx.DefaultPartitions);
// usage says whether the command chooses the count (run, resync) or
// reads it (consume, status). CheckPartitionsFlag checks its value.
func PartitionsFlag(usage string) cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: redisx.DefaultPartitions, Usage: usage, Sources: cli.EnvVars("ESCF_PARTITIONS")}
}

// ReadPartitionsFlag is --partitions of the commands that read a feed
// (consume, status): its default is the feed's own count, not 1.
func ReadPartitionsFlag() cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: redisx.DefaultPartitions, Usage: readPartitionsUsage,
		DefaultText: "the count the feed records, else 1", Sources: cli.EnvVars("ESCF_PARTITIONS")}
}

// CheckPartitionsFlag refuses a --partitions outside 1..MaxPartitions.
func CheckPartitionsFlag(cmd *cli.Command) error {
	if n := cmd.Int("partitions"); n < 1 || n > redisx.MaxPartitions {
		return Usagef("--partitions %d: want 1..%d", n, redisx.MaxPartitions)
	}
	return nil
}

// readPartitionsUsage is --partitions of consume and status: they read the
// feed's partitions, they never choose them.
const readPartitionsUsage = "the feed's partition count (recorded in escf:{feed}:meta, field partitions)"

// SplitList flattens repeatable, comma-separated flag values.
func SplitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
