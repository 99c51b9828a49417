package main

// consume and status over a feed split in partitions (issue #10): the
// --partitions flag of the reading commands, its check against the count
// the feed records, and consume's pools, one per partition.

import (
	"context"
	"log/slog"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// resolvePartitions is the partition count to read: --partitions when
// given (refused with a *redisx.PartitionsError when the feed records
// another one), else the feed's recorded count (logged when > 1), else 1.
// It reads the record with HGET and TYPE (a consumer's ACL).
func resolvePartitions(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, feed string, log *slog.Logger) (int, error) {
	if err := cmdflags.CheckPartitionsFlag(cmd); err != nil {
		return 0, err
	}
	rec, err := redisx.ReadPartitions(ctx, rdb, feed)
	if err != nil {
		return 0, err
	}
	return choosePartitions(cmd, rec, feed, log)
}

// choosePartitions is resolvePartitions on a record already read.
func choosePartitions(cmd *cli.Command, rec redisx.PartitionRecord, feed string, log *slog.Logger) (int, error) {
	passed := cmd.Int("partitions")
	if !cmd.IsSet("partitions") {
		if rec.Partitions > 1 && log != nil {
			log.Info("the feed records its partition count; reading every partition", logkey.Partitions, rec.Partitions,
				logkey.RecordedIn, redisx.NewKeys(feed).Meta())
		}
		return rec.Effective(), nil
	}
	if err := rec.Check(feed, passed); err != nil {
		return 0, err
	}
	return passed, nil
}
