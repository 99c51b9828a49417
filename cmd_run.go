package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/cmdflags"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "follow indices and write their changes to the feed's Redis Stream",
		// --index is split by SplitTargets, which keeps "a-*,-a-x" whole;
		// --es by splitList.
		DisableSliceFlagSeparator: true,
		Flags:                     append(relayFlags(), logFlags()...),
		Action:                    func(ctx context.Context, cmd *cli.Command) error { return relayAction(ctx, cmd, false) },
	}
}

func resyncCommand() *cli.Command {
	return &cli.Command{
		Name: "resync",
		Usage: "rebuild a feed whose state was lost (or that you want to rebuild): snapshot_start, every current document, " +
			"snapshot_end with counts; then follow as run does",
		DisableSliceFlagSeparator: true, // as run
		Flags:                     append(relayFlags(), logFlags()...),
		Action:                    func(ctx context.Context, cmd *cli.Command) error { return relayAction(ctx, cmd, true) },
	}
}

// relayFlags are the flags of run and resync.
func relayFlags() []cli.Flag {
	flags := []cli.Flag{
		cmdflags.EsFlag("Elasticsearch/OpenSearch URL (repeat for several nodes; default " + es.DefaultURL + ")"),
		cmdflags.FeedFlag(),
		&cli.StringSliceFlag{Name: "index", Usage: "index, pattern (logs-*,-logs-debug*), alias or data stream to follow (repeatable, comma-separated)", Sources: cli.EnvVars("ESCF_INDEX")},
		&cli.BoolFlag{Name: "hidden", Usage: "let wildcards match hidden indices too", Sources: cli.EnvVars("ESCF_HIDDEN")},
		&cli.DurationFlag{Name: "poll-interval", Value: relay.DefaultPollInterval, Usage: "the poll tick: followed indices are looked at on shared ticks this far apart, with at most one forced refresh per index and tick", Sources: cli.EnvVars("ESCF_POLL_INTERVAL"), Validator: positiveDuration("poll-interval")},
		&cli.IntFlag{Name: "read-concurrency", Value: relay.DefaultReadConcurrency, Usage: fmt.Sprintf("shards read at once, over every followed index (1..%d; each shard's pages stay in order)", relay.MaxReadConcurrency), Sources: cli.EnvVars("ESCF_READ_CONCURRENCY")},
		&cli.IntFlag{Name: "batch-size", Value: relay.DefaultBatchSize, Usage: fmt.Sprintf("search page size = most events per commit (1..%d)", relay.MaxBatchSize), Sources: cli.EnvVars("ESCF_BATCH_SIZE")},
		&cli.StringFlag{Name: "from", Value: relay.FromBeginning, Usage: "start of shards without a checkpoint: beginning or now", Sources: cli.EnvVars("ESCF_FROM")},
		&cli.DurationFlag{Name: "lease-ttl", Value: redisx.DefaultLeaseTTL, Usage: "relay lease TTL; a standby takes over within 2×TTL of the owner's death", Sources: cli.EnvVars("ESCF_LEASE_TTL"), Validator: positiveDuration("lease-ttl")},
		&cli.BoolFlag{Name: "deletes", Usage: "detect deleted documents and emit delete events", Sources: cli.EnvVars("ESCF_DELETES")},
		&cli.DurationFlag{Name: "delete-scan-interval", Value: deletes.DefaultInterval, Usage: "least time between two delete scans of a shard (0: none, scans are paced by --delete-scan-budget alone)", Sources: cli.EnvVars("ESCF_DELETE_SCAN_INTERVAL"), Validator: nonNegativeDuration("delete-scan-interval")},
		&cli.FloatFlag{Name: "delete-scan-budget", Value: deletes.DefaultBudget, Usage: "share of wall time a shard's delete scans may keep the cluster busy: after a scan whose requests took t, the shard waits t×(1−budget)/budget (0 < budget ≤ 1; 1: no pause)", Sources: cli.EnvVars("ESCF_DELETE_SCAN_BUDGET"), Validator: shareOfTime("delete-scan-budget")},
		&cli.FloatFlag{Name: "max-delete-fraction", Value: deletes.DefaultMaxDeleteFraction, Usage: "a scan deleting more than this share of a shard's documents is confirmed by a second scan first", Sources: cli.EnvVars("ESCF_MAX_DELETE_FRACTION")},
		&cli.StringFlag{Name: "delete-listing", Value: "auto", Usage: "how a shard's first scan after the upgrade to delivered ranges lists its live ids (once, to move the delivered set of the older version into ranges): auto, pit or scroll", Sources: cli.EnvVars("ESCF_DELETE_LISTING")},
		&cli.BoolFlag{Name: "index-deleted-event", Usage: "end a deleted index with its index_deleted event only, without a delete per document first", Sources: cli.EnvVars("ESCF_INDEX_DELETED_EVENT")},
		&cli.BoolFlag{Name: "trim", Usage: "trim the stream below the oldest entry some consumer group has not acknowledged", Sources: cli.EnvVars("ESCF_TRIM")},
		&cli.DurationFlag{Name: "trim-interval", Value: relay.DefaultTrimInterval, Usage: "how often --trim trims", Sources: cli.EnvVars("ESCF_TRIM_INTERVAL")},
		&cli.Int64Flag{Name: "max-stream-len", Value: relay.DefaultMaxStreamLen, Usage: "with --trim and no consumer group: keep at most this many entries (with a warning)", Sources: cli.EnvVars("ESCF_MAX_STREAM_LEN")},
		&cli.DurationFlag{Name: "min-retention", Usage: "with --trim: keep entries at least this long, acknowledged or not", Sources: cli.EnvVars("ESCF_MIN_RETENTION")},
		&cli.Int64Flag{Name: "max-backlog", Usage: "pause reading the cluster while a consumer group lags by more than this many entries (0: never)", Sources: cli.EnvVars("ESCF_MAX_BACKLOG")},
		&cli.IntFlag{Name: "wait-replicas", Usage: "after each commit, wait (Redis WAIT) until this many replicas have it; fewer within --wait-timeout: the relay reloads its state and goes on (0: do not wait)", Sources: cli.EnvVars("ESCF_WAIT_REPLICAS")},
		&cli.DurationFlag{Name: "wait-timeout", Value: checkpoint.DefaultWaitTimeout, Usage: "with --wait-replicas: how long each commit waits for the replicas", Sources: cli.EnvVars("ESCF_WAIT_TIMEOUT"), Validator: positiveDuration("wait-timeout")},
		metricsFlag(),
		cmdflags.PartitionsFlag(fmt.Sprintf("split the feed in this many partitions (1..%d), each with its own stream, checkpoints and lease under escf:{<feed>:<p>}:…; ", redisx.MaxPartitions) +
			"relays run with the same count share them; fixed for the life of the feed"),
	}
	flags = append(flags, cmdflags.RedisFlags("redis", "ESCF_REDIS", "the feed's Redis", redisx.DefaultURL)...)
	return slices.Insert(flags, 1, cmdflags.ClusterFlags("es", "ESCF_ES", "the cluster")...) // after --es
}

// runConfig is everything `run` and `resync` need, parsed and validated.
type runConfig struct {
	es          es.Config // URLs, TLS and credentials
	redis       redisx.ClientConfig
	metricsAddr string
	// feed is the Feed's config without its clients (runFeed connects
	// them) and without Snapshot (relayAction sets it for resync).
	feed relay.FeedConfig
}

func parseRunFlags(cmd *cli.Command) (runConfig, error) {
	f := relay.FeedConfig{
		Feed: cmd.String("feed"), Targets: relay.SplitTargets(cmd.StringSlice("index")), Hidden: cmd.Bool("hidden"),
		PollInterval: cmd.Duration("poll-interval"), BatchSize: cmd.Int("batch-size"), ReadConcurrency: cmd.Int("read-concurrency"),
		From: cmd.String("from"), LeaseTTL: cmd.Duration("lease-ttl"), Partitions: cmd.Int("partitions"),
		Deletes: relay.Deletes{Enabled: cmd.Bool("deletes"), Interval: cmd.Duration("delete-scan-interval"),
			Budget: cmd.Float("delete-scan-budget"), MaxDeleteFraction: cmd.Float("max-delete-fraction"), Listing: cmd.String("delete-listing"),
			IndexDeletedEvent: cmd.Bool("index-deleted-event")},
		Retention: relay.Retention{Trim: cmd.Bool("trim"), TrimInterval: cmd.Duration("trim-interval"), MaxStreamLen: cmd.Int64("max-stream-len"),
			MinRetention: cmd.Duration("min-retention"), MaxBacklog: cmd.Int64("max-backlog")},
		Durability: relay.Durability{WaitReplicas: cmd.Int("wait-replicas"), WaitTimeout: cmd.Duration("wait-timeout")},
	}
	c := runConfig{metricsAddr: cmd.String("metrics-addr"), feed: f}
	if err := needs(cmd, "deletes", "delete-scan-interval", "delete-scan-budget", "max-delete-fraction", "delete-listing", "index-deleted-event"); err != nil {
		return c, err
	}
	if err := needs(cmd, "trim", "trim-interval", "max-stream-len", "min-retention"); err != nil {
		return c, err
	}
	if f.Durability.WaitReplicas < 0 {
		return c, usagef("--wait-replicas %d: want the number of replicas each commit waits for (0: none)", f.Durability.WaitReplicas)
	}
	if cmd.IsSet("wait-timeout") && f.Durability.WaitReplicas == 0 {
		return c, usagef("--wait-timeout needs --wait-replicas N (N > 0)")
	}
	var err error
	if c.es, err = cmdflags.ClusterConn(cmd, "es", cmdflags.EsURLs(cmd, es.DefaultURL)); err != nil {
		return c, err
	}
	if rt := f.Retention; rt.MaxBacklog < 0 || rt.MaxStreamLen < 1 || rt.TrimInterval <= 0 || rt.MinRetention < 0 {
		return c, usagef("--max-backlog, --max-stream-len, --trim-interval and --min-retention must be positive (--max-backlog 0: never pause)")
	}
	if d := f.Deletes.MaxDeleteFraction; d <= 0 || d > 1 {
		return c, usagef("--max-delete-fraction %g: want a share in (0, 1], e.g. 0.5", d)
	}
	switch f.Deletes.Listing {
	case "auto":
		c.feed.Deletes.Listing = es.ListingAuto
	case es.ListingPIT, es.ListingScroll:
	default:
		return c, usagef("--delete-listing %q: want auto, pit or scroll", f.Deletes.Listing)
	}
	if len(f.Targets) == 0 {
		return c, usagef("no index to follow: pass --index <name, pattern, alias or data stream> (or ESCF_INDEX)")
	}
	if err := cmdflags.CheckFeed(f.Feed); err != nil {
		return c, err
	}
	if f.ReadConcurrency < 1 || f.ReadConcurrency > relay.MaxReadConcurrency {
		return c, usagef("--read-concurrency %d: want 1..%d", f.ReadConcurrency, relay.MaxReadConcurrency)
	}
	if f.BatchSize < 1 || f.BatchSize > relay.MaxBatchSize {
		return c, usagef("--batch-size %d: want 1..%d", f.BatchSize, relay.MaxBatchSize)
	}
	if f.From != relay.FromBeginning && f.From != relay.FromNow {
		return c, usagef("--from %q: want beginning or now", f.From)
	}
	if err := (es.Config{URLs: c.es.URLs}).Validate(); err != nil {
		return c, usagef("--es: %v", err)
	}
	if c.redis, err = cmdflags.RedisConfig(cmd, "redis"); err != nil {
		return c, err
	}
	if err := cmdflags.CheckPartitionsFlag(cmd); err != nil {
		return c, err
	}
	return c, nil
}

func relayAction(ctx context.Context, cmd *cli.Command, resync bool) error {
	log, err := newLogger(cmd, cmd.Root().ErrWriter)
	if err != nil {
		return err
	}
	cfg, err := parseRunFlags(cmd)
	if err != nil {
		return err
	}
	cfg.feed.Snapshot.Enabled = resync
	if resync {
		cfg.feed.Snapshot.Progress = progressBar(cmd.Root().ErrWriter, "resync snapshot")
	}
	return runFeed(ctx, cfg, log)
}

// runFeed connects to Redis and the cluster, checks them, and runs the
// feed (relay.Feed) until ctx ends.
func runFeed(ctx context.Context, cfg runConfig, log *slog.Logger) (err error) {
	keys := redisx.NewKeys(cfg.feed.Feed)
	// A command Redis refuses for lack of a permission stops the relay:
	// retrying cannot help.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer func() {
		if denied := cmdflags.DeniedCause(ctx, cfg.redis); denied != nil {
			err = denied
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, err := cmdflags.ConnectRedis(pctx, cfg.redis, keys, log, cmdflags.PermissionStop(stop))
	if err != nil {
		return err
	}
	defer rdb.Close()
	cmdflags.WarnPersistence(pctx, rdb, log)
	client, err := cmdflags.ConnectCluster(pctx, cfg.es, "es", "es", "", true, log)
	if err != nil {
		return err
	}
	fc := cfg.feed
	fc.ES, fc.Redis, fc.Owner, fc.Logger = client, rdb, ownerName(), log
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	fc.Metrics = reg
	f, err := relay.NewFeed(fc)
	if err != nil {
		return usageError{Err: err}
	}
	if err := serveOps(ctx, cfg.metricsAddr, reg, rdb, keys, client, f.Health, f.Ready, log); err != nil {
		return err
	}
	if err := f.Run(ctx); err != nil {
		return cmdflags.ExplainES(err, "es", "es", cfg.es)
	}
	return nil
}
