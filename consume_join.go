package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/sink"
)

// bootstrapGroup is consume --bootstrap: the copy's flags and source
// cluster are checked first (a refused copy leaves no holding group
// behind), then f.Join records the streams' positions, runs the copy
// through the sink and moves the group there (consumer.Feed.Join).
func bootstrapGroup(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, f *consumer.Feed, s sink.Sink, log *slog.Logger) error {
	copyDocs, err := prepareBootstrapCopy(ctx, cmd, cmd.String("feed"), rdb, s.Handler(), s)
	if err != nil {
		return err
	}
	var res bootstrap.Result
	if err := f.Join(ctx, func(ctx context.Context) (err error) {
		res, err = copyDocs(ctx)
		return err
	}); err != nil {
		return err
	}
	log.Info("bootstrap: done", logkey.Group, cmd.String("group"), logkey.Documents, res.Total(), logkey.Took, res.Duration.Round(time.Millisecond).String())
	return nil
}
