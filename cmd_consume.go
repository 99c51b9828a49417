package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

func consumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "apply the feed's events to a sink with a worker pool in a Redis consumer group",
		Flags: append([]cli.Flag{
			feedFlag(),
			&cli.StringFlag{Name: "group", Usage: "consumer group (required)", Sources: cli.EnvVars("ESCF_GROUP")},
			&cli.StringFlag{Name: "consumer", Usage: "this consumer's name in the group (default <host>-<pid>)", Sources: cli.EnvVars("ESCF_CONSUMER")},
			&cli.IntFlag{Name: "workers", Value: consumer.DefaultWorkers, Usage: "lanes: events of one document always go to the same lane", Sources: cli.EnvVars("ESCF_WORKERS")},
			partitionsFlag(readPartitionsUsage),
			waitForFeedFlag(),
			&cli.StringFlag{Name: "start", Value: consumer.DefaultStart, Usage: "where a new group starts: 0 (the whole stream; refused once the stream was trimmed: use --bootstrap) or $ (new events only)", Sources: cli.EnvVars("ESCF_START")},
			&cli.BoolFlag{Name: "bootstrap", Usage: "join the feed with no gap however much was trimmed, or re-initialize a group that lost history: copy the cluster's current documents (--es) through the sink, then follow the stream from where it was when the copy began", Sources: cli.EnvVars("ESCF_BOOTSTRAP")},
			&cli.BoolFlag{Name: "bootstrap-only", Usage: "with --bootstrap: exit 0 once the copy is done and the group positioned (its events are then for workers of your own)", Sources: cli.EnvVars("ESCF_BOOTSTRAP_ONLY")},
			&cli.IntFlag{Name: "prefetch", Usage: "most events read and not yet done (default 16 × workers)", Sources: cli.EnvVars("ESCF_PREFETCH")},
			&cli.DurationFlag{Name: "min-idle", Value: consumer.DefaultMinIdle, Usage: "a dead consumer's pending events are reclaimed after this idle time", Sources: cli.EnvVars("ESCF_MIN_IDLE")},
			&cli.DurationFlag{Name: "repair-grace", Value: consumer.DefaultRepairGrace, Usage: "how long to wait, once the feed's Redis is found to have lost entries the sink applied, for the relay to record that it repaired the loss, before stopping with history lost", Sources: cli.EnvVars("ESCF_REPAIR_GRACE")},
			&cli.IntFlag{Name: "max-deliveries", Value: consumer.DefaultMaxDeliveries, Usage: "attempts before an event goes to the dead-letter stream", Sources: cli.EnvVars("ESCF_MAX_DELIVERIES")},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: consumer.DefaultShutdownTimeout, Usage: "time events in flight get to finish after SIGTERM", Sources: cli.EnvVars("ESCF_SHUTDOWN_TIMEOUT")},
			&cli.StringFlag{Name: "sink", Value: "stdout", Usage: "stdout, file, http, bulk or redis", Sources: cli.EnvVars("ESCF_SINK")},
			&cli.StringFlag{Name: "file-path", Usage: "file sink: the file JSON lines are appended to", Sources: cli.EnvVars("ESCF_FILE_PATH")},
			&cli.Int64Flag{Name: "file-max-bytes", Value: sink.DefaultFileMaxBytes, Usage: "file sink: rotate past this size", Sources: cli.EnvVars("ESCF_FILE_MAX_BYTES")},
			&cli.IntFlag{Name: "file-keep", Value: sink.DefaultFileKeep, Usage: "file sink: rotated files kept", Sources: cli.EnvVars("ESCF_FILE_KEEP")},
			&cli.StringFlag{Name: "http-url", Usage: "http sink: the webhook URL", Sources: cli.EnvVars("ESCF_HTTP_URL")},
			&cli.DurationFlag{Name: "http-timeout", Value: sink.DefaultHTTPTimeout, Usage: "http sink: timeout of one request", Sources: cli.EnvVars("ESCF_HTTP_TIMEOUT")},
			&cli.StringSliceFlag{Name: "http-header", Usage: `http sink: a header "Name: value" sent with every request (repeatable)`, Sources: cli.EnvVars("ESCF_HTTP_HEADER")},
			&cli.StringSliceFlag{Name: "bulk-es", Usage: "bulk sink: the target cluster's URL (repeatable)", Sources: cli.EnvVars("ESCF_BULK_ES_URL")},
			&cli.StringFlag{Name: "bulk-index", Value: sink.DefaultBulkIndexTemplate, Usage: "bulk sink: target index name template ({index}, {index_uuid})", Sources: cli.EnvVars("ESCF_BULK_INDEX")},
			&cli.StringFlag{Name: "bulk-positions-index", Value: sink.DefaultBulkPositionsIndex, Usage: "bulk sink: the target index where the sink records how far it applied the stream (checked at start: a feed's Redis that lost entries the mirror applied is history lost)", Sources: cli.EnvVars("ESCF_BULK_POSITIONS_INDEX")},
			&cli.DurationFlag{Name: "bulk-tombstone-keep", Value: idempotency.DefaultTombstoneKeep, Usage: "bulk sink: how long a delete is remembered in Redis, so that an older upsert applied later cannot bring the document back once the target forgot the delete (index.gc_deletes)", Sources: cli.EnvVars("ESCF_BULK_TOMBSTONE_KEEP")},
			&cli.StringFlag{Name: "cache-key", Value: sink.DefaultRedisKey, Usage: "redis sink: key template ({index}, {index_uuid}, {shard}, {id}, {routing})", Sources: cli.EnvVars("ESCF_CACHE_KEY")},
			&cli.StringFlag{Name: "cache-mode", Value: string(sink.DefaultRedisMode), Usage: "redis sink: del (invalidate) or set (write the document)", Sources: cli.EnvVars("ESCF_CACHE_MODE")},
			&cli.DurationFlag{Name: "cache-ttl", Usage: "redis sink: TTL of keys written in set mode (0: none)", Sources: cli.EnvVars("ESCF_CACHE_TTL")},
			metricsFlag(),
		}, slices.Concat(bootstrapFlags(), clusterFlags("bulk", "ESCF_BULK", "the bulk sink's target cluster"), logFlags(),
			redisFlags("redis", "ESCF_REDIS", "the feed's Redis", redisx.DefaultURL),
			redisFlags("cache-redis", "ESCF_CACHE_REDIS", "the redis sink's cache (default: the feed's Redis)", ""))...),
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
	defer func() { err = explainLost(err, feed, group) }()
	if err := checkFeed(feed); err != nil {
		return err
	}
	if err := checkSinkFlags(cmd); err != nil {
		return err
	}
	if err := checkPartitionsFlag(cmd); err != nil {
		return err
	}
	if err := checkWaitForFeed(cmd); err != nil {
		return err
	}
	if err := needs(cmd, "bootstrap", "bootstrap-only"); err != nil {
		return err
	}
	rcfg, err := redisConfig(cmd, "redis")
	if err != nil {
		return err
	}
	keys := redisx.NewKeys(feed)
	// A command Redis refuses for lack of a permission stops the pool:
	// retrying cannot help.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer func() {
		if denied := deniedCause(ctx, rcfg); denied != nil {
			err = denied
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, err := connectRedis(pctx, rcfg, keys, log, permissionStop(stop))
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
			return advise(err, nf, explainNoFeed(nf, rcfg.Redacted(), wait, cmd.Bool("bootstrap")))
		case ctx.Err() != nil:
			return nil // stopped while waiting: nothing was read
		}
		return explainRedis(err, "redis", rcfg)
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
		return usageError{err}
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

// sinkFlags are the flags that belong to each sink.
var sinkFlags = map[string][]string{
	"file":  {"file-path", "file-max-bytes", "file-keep"},
	"http":  {"http-url", "http-timeout", "http-header"},
	"bulk":  append([]string{"bulk-es", "bulk-index", "bulk-positions-index", "bulk-tombstone-keep"}, clusterFlagNames("bulk")...),
	"redis": append([]string{"cache-key", "cache-mode", "cache-ttl"}, redisFlagNames("cache-redis")...),
}

// checkSinkFlags refuses a flag of another sink than --sink's: it would be
// silently ignored.
func checkSinkFlags(cmd *cli.Command) error {
	chosen := cmd.String("sink")
	for _, name := range []string{"file", "http", "bulk", "redis"} {
		if name == chosen {
			continue
		}
		for _, f := range sinkFlags[name] {
			if cmd.IsSet(f) {
				return usagef("--%s belongs to --sink %s, but --sink is %q: drop --%s, or pass --sink %s", f, name, chosen, f, name)
			}
		}
	}
	return nil
}

// newSink builds the sink named by --sink from its flags. The bulk sink's
// cluster is contacted once, so bad URLs, credentials or certificates stop
// consume at once instead of dead-lettering events.
func newSink(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, keys redisx.Keys, partitions int, log *slog.Logger) (sink.Sink, error) {
	switch name := cmd.String("sink"); name {
	case "stdout":
		s, err := sink.NewStdout(sink.StdoutConfig{Writer: cmd.Root().Writer})
		return s, wrapUsage("stdout", err)
	case "file":
		if cmd.String("file-path") == "" {
			return nil, usagef("--sink file needs --file-path")
		}
		s, err := sink.NewFile(sink.FileConfig{Path: cmd.String("file-path"), MaxBytes: cmd.Int64("file-max-bytes"), Keep: cmd.Int("file-keep")})
		return s, wrapUsage("file", err)
	case "http":
		if cmd.String("http-url") == "" {
			return nil, usagef("--sink http needs --http-url")
		}
		headers := map[string]string{}
		for _, h := range cmd.StringSlice("http-header") {
			k, v, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, usagef("--http-header %q: want \"Name: value\"", h)
			}
			headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		s, err := sink.NewHTTP(sink.HTTPConfig{URL: cmd.String("http-url"), Headers: headers, Timeout: cmd.Duration("http-timeout")})
		return s, wrapUsage("http", err)
	case "bulk":
		urls := splitList(cmd.StringSlice("bulk-es"))
		if len(urls) == 0 {
			return nil, usagef("--sink bulk needs --bulk-es <target cluster URL>")
		}
		ecfg, err := clusterConn(cmd, "bulk", urls)
		if err != nil {
			return nil, err
		}
		client, err := es.New(ecfg)
		if err != nil {
			return nil, usagef("--bulk-es: %v", err)
		}
		if ecfg.InsecureSkipVerify {
			warnInsecure(log, "bulk-insecure", client.URLs())
		}
		info, err := client.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("--sink bulk: %w", explainES(err, "bulk-es", "bulk", ecfg))
		}
		log.Info("bulk sink: connected to "+info.String(), logkey.Cluster, info.ClusterName, logkey.URLs, client.URLs())
		s, err := sink.NewBulk(sink.BulkConfig{ES: client, Redis: rdb, Keys: keys, Partitions: partitions, IndexTemplate: cmd.String("bulk-index"),
			TombstoneKeep: cmd.Duration("bulk-tombstone-keep"), PositionsIndex: cmd.String("bulk-positions-index"), Logger: log})
		return s, wrapUsage("bulk", err)
	case "redis":
		cfg := sink.RedisConfig{Key: cmd.String("cache-key"), Mode: sink.RedisMode(cmd.String("cache-mode")), TTL: cmd.Duration("cache-ttl")}
		cfg.Client = rdb
		var cache redis.UniversalClient
		if cmd.String("cache-redis") != "" {
			var err error
			if cache, err = connectCache(ctx, cmd, log); err != nil {
				return nil, err
			}
			cfg.Client = cache
		} else if used := setFlags(cmd, redisFlagNames("cache-redis")); len(used) > 0 {
			return nil, usagef("--%s needs --cache-redis: add --cache-redis <URL>, or drop --%s (the feed's Redis is the cache by default, with the --redis flags)", used[0], used[0])
		}
		s, err := sink.NewRedis(cfg)
		if err != nil {
			if cache != nil {
				cache.Close()
			}
			return nil, wrapUsage("redis", err)
		}
		if cache != nil {
			return closingSink{s, cache}, nil
		}
		return s, nil
	default:
		return nil, usagef("--sink %q: want stdout, file, http, bulk or redis", name)
	}
}

// sinkPositions is the sink's store of applied positions, if it keeps
// one (redisx.Positions); nil otherwise.
func sinkPositions(s sink.Sink) redisx.Positions {
	p, _ := unwrapSink(s).(redisx.Positions)
	return p
}

// unwrapSink is the sink itself, without main's closingSink around it
// (whose methods are only Sink's).
func unwrapSink(s sink.Sink) sink.Sink {
	if c, ok := s.(closingSink); ok {
		return c.Sink
	}
	return s
}

// wrapUsage marks a sink's configuration error as a usage error.
func wrapUsage(sinkName string, err error) error {
	if err == nil {
		return nil
	}
	return usagef("--sink %s: %v", sinkName, err)
}
