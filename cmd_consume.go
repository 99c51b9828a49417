package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

func consumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "apply the feed's events to a sink with a worker pool in a Redis consumer group",
		Flags: append([]cli.Flag{
			cmdflags.FeedFlag(),
			&cli.StringFlag{Name: "group", Usage: "consumer group (required)", Sources: cli.EnvVars("ESCF_GROUP")},
			&cli.StringFlag{Name: "consumer", Usage: "this consumer's name in the group", DefaultText: "<host>-<pid>", Sources: cli.EnvVars("ESCF_CONSUMER")},
			&cli.IntFlag{Name: "workers", Value: consumer.DefaultWorkers, Usage: "lanes: events of one document always go to the same lane", Sources: cli.EnvVars("ESCF_WORKERS")},
			cmdflags.ReadPartitionsFlag(),
			waitForFeedFlag(),
			&cli.StringFlag{Name: "start", Value: consumer.DefaultStart, Usage: "where a new group starts: 0 (the whole stream; refused once the stream was trimmed: use --bootstrap) or $ (new events only)", Sources: cli.EnvVars("ESCF_START")},
			&cli.BoolFlag{Name: "bootstrap", Usage: "join the feed with no gap however much was trimmed, or re-initialize a group that lost history: copy the cluster's current documents (--es) through the sink, then follow the stream from where it was when the copy began", Sources: cli.EnvVars("ESCF_BOOTSTRAP")},
			&cli.BoolFlag{Name: "bootstrap-only", Usage: "with --bootstrap: exit 0 once the copy is done and the group positioned (its events are then for workers of your own)", Sources: cli.EnvVars("ESCF_BOOTSTRAP_ONLY")},
			&cli.IntFlag{Name: "prefetch", Usage: "most events read and not yet done", DefaultText: "16 × workers", Sources: cli.EnvVars("ESCF_PREFETCH")},
			&cli.DurationFlag{Name: "min-idle", Value: consumer.DefaultMinIdle, Usage: "a dead consumer's pending events are reclaimed after this idle time", Sources: cli.EnvVars("ESCF_MIN_IDLE")},
			&cli.DurationFlag{Name: "repair-grace", Value: consumer.DefaultRepairGrace, Usage: "how long to wait, once the feed's Redis is found to have lost entries the sink applied, for the relay to record that it repaired the loss, before stopping with history lost", Sources: cli.EnvVars("ESCF_REPAIR_GRACE")},
			&cli.IntFlag{Name: "max-deliveries", Value: consumer.DefaultMaxDeliveries, Usage: "attempts before an event goes to the dead-letter stream", Sources: cli.EnvVars("ESCF_MAX_DELIVERIES")},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: consumer.DefaultShutdownTimeout, Usage: "time events in flight get to finish after SIGTERM", Sources: cli.EnvVars("ESCF_SHUTDOWN_TIMEOUT")},
			metricsFlag(),
		}, slices.Concat(sinkFlags(), bootstrapFlags(), logFlags(),
			cmdflags.RedisFlags("redis", "ESCF_REDIS", "the feed's Redis", redisx.DefaultURL))...),
		Action: consumeAction,
	}
}

func consumeAction(ctx context.Context, cmd *cli.Command) (err error) {
	log, err := newLogger(cmd, cmd.Root().ErrWriter)
	if err != nil {
		return err
	}
	feed, group := cmd.String("feed"), cmd.String("group")
	if group == "" {
		return usagef("no consumer group: pass --group <name> (or ESCF_GROUP)")
	}
	defer func() { err = cmdflags.ExplainLost(err, feed, group) }()
	if err := cmdflags.CheckFeed(feed); err != nil {
		return err
	}
	if err := checkSinkFlags(cmd); err != nil {
		return err
	}
	if err := cmdflags.CheckPartitionsFlag(cmd); err != nil {
		return err
	}
	if err := checkWaitForFeed(cmd); err != nil {
		return err
	}
	if err := needs(cmd, "bootstrap", "bootstrap-only"); err != nil {
		return err
	}
	rcfg, err := cmdflags.RedisConfig(cmd, "redis")
	if err != nil {
		return err
	}
	keys := redisx.NewKeys(feed)
	// A command Redis refuses for lack of a permission stops the pool:
	// retrying cannot help.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer func() {
		if denied := cmdflags.DeniedCause(ctx, rcfg); denied != nil {
			err = denied
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, err := cmdflags.ConnectRedis(pctx, rcfg, keys, log, cmdflags.PermissionStop(stop))
	if err != nil {
		return err
	}
	defer rdb.Close()
	// keys are the feed-level keys: with partitions > 1 the bulk sink reads
	// the feed-level generations hash every partition's relay writes to,
	// and each index's layout from its partition's indices hash. The sink
	// is built before the feed is waited for (its flag errors come first),
	// with the partition count recorded now; built again below if the
	// feed's relay records another one meanwhile.
	sinkPartitions := 1
	if rec, err := redisx.ReadPartitions(pctx, rdb, feed); err == nil {
		sinkPartitions = rec.Effective()
	}
	s, err := newSink(pctx, cmd, rdb, keys, sinkPartitions, log)
	if err != nil {
		return err
	}
	closeSink := func() { _ = s.Close(context.WithoutCancel(ctx)) }
	// The feed must exist before anything reads its partition count or
	// creates a group (and with it the stream): after a wait, the count
	// the relay recorded at its start is there to read.
	wait := cmd.Duration("wait-for-feed")
	lookIn := 1
	if cmd.IsSet("partitions") {
		lookIn = cmd.Int("partitions")
	}
	if err := consumer.WaitForFeed(ctx, rdb, feed, lookIn, wait, consumer.FeedPoll, log); err != nil {
		closeSink()
		var nf *redisx.FeedNotFoundError
		switch {
		case errors.As(err, &nf):
			return cmdflags.Advise(err, nf, explainNoFeed(nf, rcfg.Redacted(), wait, cmd.Bool("bootstrap")))
		case ctx.Err() != nil:
			return nil // stopped while waiting: nothing was read
		}
		return cmdflags.ExplainRedis(err, "redis", rcfg)
	}
	pctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	partitions, err := resolvePartitions(pctx, cmd, rdb, feed, log)
	if err != nil {
		closeSink()
		return err
	}
	if partitions != sinkPartitions {
		closeSink()
		if s, err = newSink(pctx, cmd, rdb, keys, partitions, log); err != nil {
			return err
		}
	}
	name := cmd.String("consumer")
	if name == "" {
		name = ownerName()
	}
	reg, err := newRegistry()
	if err != nil {
		closeSink()
		return err
	}
	f, err := consumer.New(consumer.Config{Client: rdb, Feed: feed, Partitions: partitions, Metrics: reg,
		Pool: consumer.PoolConfig{Group: group, Consumer: name, Workers: cmd.Int("workers"), Start: cmd.String("start"),
			Prefetch: cmd.Int("prefetch"), MinIdle: cmd.Duration("min-idle"), MaxDeliveries: int64(cmd.Int("max-deliveries")),
			ShutdownTimeout: cmd.Duration("shutdown-timeout"), RepairGrace: cmd.Duration("repair-grace"),
			Positions: sinkPositions(s), Logger: log}})
	if err != nil {
		closeSink()
		return usageError{Err: err}
	}
	if cmd.Bool("bootstrap") {
		if err := bootstrapGroup(ctx, cmd, rdb, f, s, log); err != nil {
			closeSink()
			return err
		}
		if cmd.Bool("bootstrap-only") {
			return s.Close(context.WithoutCancel(ctx))
		}
	}
	alive := func() (bool, string) { return true, "consuming as " + name }
	if err := serveOps(ctx, cmd.String("metrics-addr"), reg, rdb, keys, nil, alive, alive, log); err != nil {
		closeSink()
		return err
	}
	if partitions > 1 {
		log.Info("consuming", logkey.Streams, f.Streams(), logkey.Partitions, partitions, logkey.Group, group, logkey.Consumer, name, logkey.Sink, cmd.String("sink"))
	} else {
		log.Info("consuming", logkey.Stream, keys.Events(), logkey.Group, group, logkey.Consumer, name, logkey.Sink, cmd.String("sink"))
	}
	runErr := f.Run(ctx, s.Handler())
	if pe := (*redisx.PartitionsError)(nil); errors.As(runErr, &pe) {
		runErr = fmt.Errorf("%w; restart consume (without --partitions it reads every recorded partition)", runErr)
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cmd.Duration("shutdown-timeout"))
	defer ccancel()
	if err := s.Close(cctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("close the %s sink: %w", cmd.String("sink"), err)
	}
	return runErr
}
