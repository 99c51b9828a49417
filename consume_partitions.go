package main

// consume and status over a feed split in partitions (issue #10): the
// --partitions flag of the reading commands, its check against the count
// the feed records, and consume's pools, one per partition.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

// readPartitionsUsage is --partitions of consume and status: they read the
// feed's partitions, they never choose them.
const readPartitionsUsage = "the feed's partition count; when left out, the count the feed records (escf:{feed}:meta partitions), else 1"

// resolvePartitions is the partition count to read: --partitions when
// given (refused with a *redisx.PartitionsError when the feed records
// another one), else the feed's recorded count (logged when > 1), else 1.
// It reads the record with HGET and TYPE (a consumer's ACL).
func resolvePartitions(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, feed string, log *slog.Logger) (int, error) {
	if err := checkPartitionsFlag(cmd); err != nil {
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

// consumeRegistry is consume's metrics registry (newRegistry) with the
// feed's stream collector: for more than one partition, one per partition,
// each with a partition label.
func consumeRegistry(rdb redis.UniversalClient, feed string, partitions int) (*prometheus.Registry, error) {
	reg, err := newRegistry()
	if err != nil {
		return nil, err
	}
	if partitions <= 1 {
		if err := reg.Register(redisx.NewStreamCollector(rdb, redisx.NewKeys(feed))); err != nil {
			return nil, fmt.Errorf("register the stream collector of feed %s: %w", feed, err)
		}
		return reg, nil
	}
	for p := range partitions {
		wrapped := prometheus.WrapRegistererWith(relay.PartitionLabels(p), reg)
		if err := wrapped.Register(redisx.NewStreamCollector(rdb, redisx.PartitionKeys(feed, p, partitions))); err != nil {
			return nil, fmt.Errorf("register the stream collector of partition %d of feed %s: %w", p, feed, err)
		}
	}
	return reg, nil
}

// partitionPools builds one pool per partition from cfg (the pool of the
// whole feed): the same group and consumer name on each partition's
// stream, its dead letters in the partition's dead stream, the lanes and
// prefetch spread over the pools (ceil(n/partitions) each), metrics with a
// partition label. With one partition it is NewPool(cfg).
func partitionPools(cfg consumer.PoolConfig, feed string, partitions int) ([]*consumer.Pool, error) {
	if partitions <= 1 {
		p, err := consumer.NewPool(cfg)
		return []*consumer.Pool{p}, err
	}
	workers := cfg.Workers
	if workers == 0 {
		workers = consumer.DefaultWorkers
	}
	if workers > 0 {
		cfg.Workers = spread(workers, partitions)
	}
	if cfg.Prefetch > 0 {
		cfg.Prefetch = spread(cfg.Prefetch, partitions)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	reg := cfg.Metrics
	pools := make([]*consumer.Pool, partitions)
	for p := range pools {
		pc := cfg
		pc.Keys = redisx.PartitionKeys(feed, p, partitions)
		pc.Logger = log.With(logkey.Partition, p)
		if reg != nil {
			pc.Metrics = prometheus.WrapRegistererWith(relay.PartitionLabels(p), reg)
		}
		pool, err := consumer.NewPool(pc)
		if err != nil {
			return nil, err
		}
		pools[p] = pool
	}
	return pools, nil
}

// runPools runs the pools with h until ctx ends, and returns when all
// have drained. A pool that fails (its group cannot be created) stops the
// others; its error is returned.
func runPools(ctx context.Context, pools []*consumer.Pool, h redisx.Handler) error {
	if len(pools) == 1 {
		return pools[0].Run(ctx, h)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() {
			if err := p.Run(ctx, h); err != nil {
				errs[i] = err
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// streamsOf lists the pools' streams, for logs.
func streamsOf(feed string, partitions int) []string {
	var out []string
	for _, k := range redisx.AllPartitionKeys(feed, partitions) {
		out = append(out, k.Events())
	}
	return out
}

// spread is n over partitions: ceil(n/partitions).
func spread(n, partitions int) int { return (n + partitions - 1) / partitions }

// partitionsRecheck is how often consume re-reads the feed's partition
// record.
const partitionsRecheck = 30 * time.Second

// watchPartitions re-reads the feed's partition record every interval
// until ctx ends, and calls stop with a *redisx.PartitionsError once it no
// longer matches partitions: a relay recorded another count after consume
// started (consume started first on a new feed and read one partition).
// Read errors are left to the pools, which log Redis outages themselves.
func watchPartitions(ctx context.Context, rdb redis.UniversalClient, feed string, partitions int, interval time.Duration, stop func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec, err := redisx.ReadPartitions(ctx, rdb, feed)
		if err != nil {
			continue
		}
		if err := rec.Check(feed, partitions); err != nil {
			stop(err)
			return
		}
	}
}
