package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/relay/es"
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
		&cli.StringSliceFlag{Name: "es", Value: []string{es.DefaultURL}, Usage: "Elasticsearch/OpenSearch URL (repeat for several nodes)", Sources: cli.EnvVars("ESCF_ES_URL")},
		&cli.StringFlag{Name: "feed", Value: "default", Usage: "feed name: the Redis keys are escf:{<feed>}:…", Sources: cli.EnvVars("ESCF_FEED")},
		&cli.StringSliceFlag{Name: "index", Usage: "index, pattern (logs-*,-logs-debug*), alias or data stream to follow (repeatable, comma-separated)", Sources: cli.EnvVars("ESCF_INDEX")},
		&cli.BoolFlag{Name: "hidden", Usage: "let wildcards match hidden indices too", Sources: cli.EnvVars("ESCF_HIDDEN")},
		&cli.DurationFlag{Name: "poll-interval", Value: relay.DefaultPollInterval, Usage: "pause after a round that found nothing, and the least time between two refreshes forced on an index", Sources: cli.EnvVars("ESCF_POLL_INTERVAL"), Validator: positiveDuration("poll-interval")},
		&cli.IntFlag{Name: "read-concurrency", Value: relay.DefaultReadConcurrency, Usage: "shards read at once, over every followed index (1..256; each shard's pages stay in order)", Sources: cli.EnvVars("ESCF_READ_CONCURRENCY")},
		&cli.IntFlag{Name: "batch-size", Value: relay.DefaultBatchSize, Usage: "search page size = most events per commit (1..10000)", Sources: cli.EnvVars("ESCF_BATCH_SIZE")},
		&cli.StringFlag{Name: "from", Value: relay.FromBeginning, Usage: "start of shards without a checkpoint: beginning or now", Sources: cli.EnvVars("ESCF_FROM")},
		&cli.DurationFlag{Name: "lease-ttl", Value: redisx.DefaultLeaseTTL, Usage: "relay lease TTL; a standby takes over within 2×TTL of the owner's death", Sources: cli.EnvVars("ESCF_LEASE_TTL"), Validator: positiveDuration("lease-ttl")},
		&cli.BoolFlag{Name: "deletes", Usage: "detect deleted documents and emit delete events", Sources: cli.EnvVars("ESCF_DELETES")},
		&cli.DurationFlag{Name: "delete-scan-interval", Value: deletes.DefaultInterval, Usage: "least time between two delete scans of a shard", Sources: cli.EnvVars("ESCF_DELETE_SCAN_INTERVAL"), Validator: positiveDuration("delete-scan-interval")},
		&cli.FloatFlag{Name: "max-delete-fraction", Value: deletes.DefaultMaxDeleteFraction, Usage: "a scan deleting more than this share of a shard's documents is confirmed by a second scan first", Sources: cli.EnvVars("ESCF_MAX_DELETE_FRACTION")},
		&cli.StringFlag{Name: "delete-listing", Value: "auto", Usage: "how scans list live ids: auto, pit or scroll", Sources: cli.EnvVars("ESCF_DELETE_LISTING")},
		&cli.BoolFlag{Name: "index-deleted-event", Usage: "end a deleted index with its index_deleted event only, without a delete per document first", Sources: cli.EnvVars("ESCF_INDEX_DELETED_EVENT")},
		&cli.BoolFlag{Name: "trim", Usage: "trim the stream below the oldest entry some consumer group has not acknowledged", Sources: cli.EnvVars("ESCF_TRIM")},
		&cli.DurationFlag{Name: "trim-interval", Value: 10 * time.Second, Usage: "how often --trim trims", Sources: cli.EnvVars("ESCF_TRIM_INTERVAL")},
		&cli.Int64Flag{Name: "max-stream-len", Value: 1_000_000, Usage: "with --trim and no consumer group: keep at most this many entries (with a warning)", Sources: cli.EnvVars("ESCF_MAX_STREAM_LEN")},
		&cli.DurationFlag{Name: "min-retention", Usage: "with --trim: keep entries at least this long, acknowledged or not", Sources: cli.EnvVars("ESCF_MIN_RETENTION")},
		&cli.Int64Flag{Name: "max-backlog", Usage: "pause reading the cluster while a consumer group lags by more than this many entries (0: never)", Sources: cli.EnvVars("ESCF_MAX_BACKLOG")},
		&cli.IntFlag{Name: "wait-replicas", Usage: "after each commit, wait (Redis WAIT) until this many replicas have it; fewer within --wait-timeout: the relay reloads its state and goes on (0: do not wait)", Sources: cli.EnvVars("ESCF_WAIT_REPLICAS")},
		&cli.DurationFlag{Name: "wait-timeout", Value: checkpoint.DefaultWaitTimeout, Usage: "with --wait-replicas: how long each commit waits for the replicas", Sources: cli.EnvVars("ESCF_WAIT_TIMEOUT"), Validator: positiveDuration("wait-timeout")},
		metricsFlag(), partitionsFlag(),
	}
	flags = append(flags, redisFlags("redis", "ESCF_REDIS", "the feed's Redis", defaultRedisURL)...)
	return slices.Insert(flags, 1, clusterFlags("es", "ESCF_ES", "the cluster")...) // after --es
}

// runConfig is everything `run` needs, parsed and validated.
type runConfig struct {
	es       es.Config // URLs, TLS and credentials
	redis    redisx.ClientConfig
	feed     string
	targets  []string
	hidden   bool
	poll     time.Duration
	batch    int
	reads    int
	from     string
	leaseTTL time.Duration

	trim         bool
	trimInterval time.Duration
	maxStreamLen int64
	minRetention time.Duration
	maxBacklog   int64
	metricsAddr  string
	waitReplicas int
	waitTimeout  time.Duration
	partitions   int // > 1: run a partition manager (run_partitions.go)

	deletes           bool
	scanInterval      time.Duration
	maxDeleteFraction float64
	listing           string
	indexDeletedEvent bool
}

func parseRunFlags(cmd *cli.Command) (runConfig, error) {
	c := runConfig{
		feed: cmd.String("feed"), targets: relay.SplitTargets(cmd.StringSlice("index")),
		hidden: cmd.Bool("hidden"),
		poll:   cmd.Duration("poll-interval"), batch: cmd.Int("batch-size"), reads: cmd.Int("read-concurrency"), from: cmd.String("from"),
		leaseTTL: cmd.Duration("lease-ttl"), deletes: cmd.Bool("deletes"), scanInterval: cmd.Duration("delete-scan-interval"),
		maxDeleteFraction: cmd.Float("max-delete-fraction"), listing: cmd.String("delete-listing"),
		indexDeletedEvent: cmd.Bool("index-deleted-event"),
		trim:              cmd.Bool("trim"), trimInterval: cmd.Duration("trim-interval"), maxStreamLen: cmd.Int64("max-stream-len"),
		minRetention: cmd.Duration("min-retention"), maxBacklog: cmd.Int64("max-backlog"), metricsAddr: cmd.String("metrics-addr"),
	}
	if err := needs(cmd, "deletes", "delete-scan-interval", "max-delete-fraction", "delete-listing", "index-deleted-event"); err != nil {
		return c, err
	}
	if err := needs(cmd, "trim", "trim-interval", "max-stream-len", "min-retention"); err != nil {
		return c, err
	}
	c.waitReplicas, c.waitTimeout = cmd.Int("wait-replicas"), cmd.Duration("wait-timeout")
	if c.waitReplicas < 0 {
		return c, usagef("--wait-replicas %d: want the number of replicas each commit waits for (0: none)", c.waitReplicas)
	}
	if cmd.IsSet("wait-timeout") && c.waitReplicas == 0 {
		return c, usagef("--wait-timeout needs --wait-replicas N (N > 0)")
	}
	var err error
	if c.es, err = clusterConn(cmd, "es", splitList(cmd.StringSlice("es"))); err != nil {
		return c, err
	}
	if c.maxBacklog < 0 || c.maxStreamLen < 1 || c.trimInterval <= 0 || c.minRetention < 0 {
		return c, usagef("--max-backlog, --max-stream-len, --trim-interval and --min-retention must be positive (--max-backlog 0: never pause)")
	}
	if c.maxDeleteFraction <= 0 || c.maxDeleteFraction > 1 {
		return c, usagef("--max-delete-fraction %g: want a share in (0, 1], e.g. 0.5", c.maxDeleteFraction)
	}
	switch c.listing {
	case "auto":
		c.listing = es.ListingAuto
	case es.ListingPIT, es.ListingScroll:
	default:
		return c, usagef("--delete-listing %q: want auto, pit or scroll", c.listing)
	}
	if len(c.targets) == 0 {
		return c, usagef("no index to follow: pass --index <name, pattern, alias or data stream> (or ESCF_INDEX)")
	}
	if err := checkFeed(c.feed); err != nil {
		return c, err
	}
	if c.reads < 1 || c.reads > 256 {
		return c, usagef("--read-concurrency %d: want 1..256", c.reads)
	}
	if c.batch < 1 || c.batch > 10000 {
		return c, usagef("--batch-size %d: want 1..10000", c.batch)
	}
	if c.from != relay.FromBeginning && c.from != relay.FromNow {
		return c, usagef("--from %q: want beginning or now", c.from)
	}
	if err := (es.Config{URLs: c.es.URLs}).Validate(); err != nil {
		return c, usagef("--es: %v", err)
	}
	if c.redis, err = redisConfig(cmd, "redis"); err != nil {
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
	if cfg.partitions, err = parsePartitions(cmd); err != nil {
		return err
	}
	var bar func(done, total int64)
	if resync {
		bar = progressBar(cmd.Root().ErrWriter, "resync snapshot")
	}
	return runRelay(ctx, cfg, log, resync, bar)
}

// runRelay connects, checks what the user named, and runs the relay until
// ctx ends. With resync it first rebuilds the feed with a snapshot.
func runRelay(ctx context.Context, cfg runConfig, log *slog.Logger, resync bool, progress func(done, total int64)) (err error) {
	keys := redisx.NewKeys(cfg.feed)
	// A command Redis refuses for lack of a permission stops the relay:
	// retrying cannot help.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer func() {
		if denied := deniedCause(ctx, cfg.redis); denied != nil {
			err = denied
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rdb, err := connectRedis(pctx, cfg.redis, keys, log, permissionStop(stop))
	if err != nil {
		return err
	}
	defer rdb.Close()
	client, err := es.New(cfg.es)
	if err != nil {
		return usageError{err}
	}
	if cfg.es.InsecureSkipVerify {
		warnInsecure(log, "es-insecure", client.URLs())
	}
	info, err := client.Info(pctx)
	if err != nil {
		return explainES(err, "es", "es", cfg.es)
	}
	if err := info.CheckSupported(); err != nil {
		return fmt.Errorf("%s: %w", client.URLs(), err)
	}
	log.Info("connected to "+info.String(), "cluster", info.ClusterName, "distribution", info.Distribution, "version", info.Version, "urls", client.URLs())
	if err := redisx.RecordPartitions(pctx, rdb, cfg.feed, cfg.partitions); err != nil {
		return err
	}
	if cfg.partitions > 1 {
		return runPartitioned(ctx, pctx, cfg, log, rdb, client, resync)
	}
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: cfg.leaseTTL, Owner: ownerName()})
	if err != nil {
		return err
	}
	reg := newRegistry(rdb, keys)
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease, Metrics: reg,
		WaitReplicas: cfg.waitReplicas, WaitTimeout: cfg.waitTimeout})
	if err != nil {
		return err
	}
	if !resync {
		if err := store.CheckState(pctx); err != nil {
			return err
		}
	}
	if err := checkTargets(pctx, client, store, cfg, log); err != nil {
		return err
	}
	var scanner *deletes.Scanner
	if cfg.deletes {
		scanner, err = deletes.New(deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store,
			Interval: cfg.scanInterval, MaxDeleteFraction: cfg.maxDeleteFraction, Listing: cfg.listing, Logger: log, Metrics: reg})
		if err != nil {
			return usageError{err}
		}
	}
	r, err := relay.New(relay.Config{ES: client, Store: store, Lease: lease, Targets: cfg.targets, Hidden: cfg.hidden,
		PollInterval: cfg.poll, BatchSize: cfg.batch, ReadConcurrency: cfg.reads, From: cfg.from, Deletes: scanner,
		IndexDeletedEvent: cfg.indexDeletedEvent, Snapshot: resync, SnapshotProgress: progress, Logger: log, Metrics: reg,
		Trim: cfg.trim, TrimInterval: cfg.trimInterval, MaxStreamLen: cfg.maxStreamLen, MinRetention: cfg.minRetention,
		MaxBacklog: cfg.maxBacklog})
	if err != nil {
		return usageError{err}
	}
	role := func() (bool, string) {
		if r.Leading() {
			return true, "leading"
		}
		return true, "standby"
	}
	ready := func() (bool, string) {
		switch {
		case !r.Leading():
			return false, "standby: another relay leads"
		case r.Paused():
			return false, "leading, paused by backpressure"
		}
		return true, "leading"
	}
	if err := serveOps(ctx, cfg.metricsAddr, reg, rdb, keys, client, role, ready, log); err != nil {
		return err
	}
	log.Info("relay starting", "feed", cfg.feed, "stream", keys.Events(), "targets", cfg.targets, "resync", resync)
	return r.Run(ctx)
}

// checkTargets resolves every target once: a name that exists nowhere is
// refused (unless the feed followed an index of that name: it is gone, and
// the relay emits its end); a pattern that matches nothing yet is a warning;
// an index whose sequence numbers are disabled is refused. A closed index
// is skipped with a warning (the relay reads it once it is reopened) —
// except one named explicitly that the feed never followed: that is almost
// certainly a mistake, and is refused.
func checkTargets(ctx context.Context, client *es.Client, store *checkpoint.Store, cfg runConfig, log *slog.Logger) error {
	var state *checkpoint.State
	followed := func(match func(checkpoint.IndexInfo) bool) (bool, error) {
		if state == nil {
			st, err := store.Load(ctx)
			if err != nil {
				return false, err
			}
			state = &st
		}
		for _, info := range state.Indices {
			if match(info) {
				return true, nil
			}
		}
		return false, nil
	}
	for _, expr := range cfg.targets {
		res, err := client.Resolve(ctx, expr, cfg.hidden)
		if es.IsNotFound(err) {
			known, lerr := followed(func(info checkpoint.IndexInfo) bool { return info.Target == expr || info.Name == expr })
			if lerr != nil {
				return lerr
			}
			if known {
				continue
			}
			return fmt.Errorf("--index %q names no index, alias or data stream on %s (%v): check for a typo, or use a pattern such as %q to wait for indices to appear",
				expr, client.URLs(), err, expr+"*")
		}
		if err != nil {
			return explainES(err, "es", "es", cfg.es)
		}
		if len(res.Indices) == 0 {
			log.Warn("the expression matches no index yet; the relay waits for one", "target", expr)
		}
		for _, ix := range res.Indices {
			if ix.Closed {
				if namesExplicitly(expr, ix.Name) {
					known, lerr := followed(func(info checkpoint.IndexInfo) bool { return info.Name == ix.Name })
					if lerr != nil {
						return lerr
					}
					if !known {
						return fmt.Errorf("index %s (--index %q) is closed, and a closed index cannot be read: open it (POST /%s/_open), or follow it with a pattern such as %q to wait until it is reopened",
							ix.Name, expr, ix.Name, ix.Name+"*")
					}
				}
				log.Warn("index is closed: skipping it until it is reopened", "index", ix.Name, "target", expr)
				continue
			}
			settings, err := client.Settings(ctx, ix.Name)
			if err != nil {
				return explainES(err, "es", "es", cfg.es)
			}
			if settings.SequenceNumbersDisabled {
				todo := fmt.Sprintf("exclude it (e.g. %q)", expr+",-"+ix.Name)
				if namesExplicitly(expr, ix.Name) {
					todo = "remove it from --index"
				}
				return fmt.Errorf("index %s (matched by --index %q) has sequence numbers disabled (index.disable_sequence_numbers: true, the default for index.mode columnar in Elasticsearch 9.5): a change feed reads documents by _seq_no and cannot follow it; %s",
					ix.Name, expr, todo)
			}
		}
	}
	return nil
}

// namesExplicitly reports whether an --index expression names the index
// itself (an element without wildcards), not through a pattern or alias.
func namesExplicitly(expr, index string) bool {
	for _, el := range strings.Split(expr, ",") {
		if el = strings.TrimSpace(el); el == index {
			return true
		}
	}
	return false
}
