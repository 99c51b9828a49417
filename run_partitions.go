package main

// run over a feed split in partitions (issue #10): one process is a
// partition manager that holds a balanced share of the partitions and runs
// one relay per partition held.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/relay/es"
	"github.com/es-changefeed/es-changefeed/relay/partition"
)

// partitionsFlag is --partitions of run and resync.
func partitionsFlag() cli.Flag {
	return &cli.IntFlag{Name: "partitions", Value: 1, Sources: cli.EnvVars("ESCF_PARTITIONS"),
		Usage: "split the feed in this many partitions (1..1024), each with its own stream, checkpoints and lease under escf:{<feed>:<p>}:…; " +
			"relays run with the same count share them; fixed for the life of the feed"}
}

// parsePartitions validates --partitions.
func parsePartitions(cmd *cli.Command) (int, error) {
	p := cmd.Int("partitions")
	if p < 1 || p > redisx.MaxPartitions {
		return 0, usagef("--partitions %d: want 1..%d (1: one stream, as without the flag)", p, redisx.MaxPartitions)
	}
	return p, nil
}

// runPartitioned runs a partition manager for a feed of cfg.partitions > 1
// partitions until ctx ends. With resync it first rebuilds every partition
// (resyncPartitions).
func runPartitioned(ctx, pctx context.Context, cfg runConfig, log *slog.Logger, rdb redis.UniversalClient, client *es.Client, resync bool) error {
	parts := cfg.partitions
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	stores := make([]*checkpoint.Store, parts)
	for p := range parts {
		keys := redisx.PartitionKeys(cfg.feed, p, parts)
		prometheus.WrapRegistererWith(partitionLabel(p), reg).MustRegister(redisx.NewStreamCollector(rdb, keys))
		// Refuse a lost partition at once, before leases are taken (the
		// relay of the partition would refuse it too).
		store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys})
		if err != nil {
			return err
		}
		if resync {
			stores[p] = store
			continue // a resync rebuilds whatever is there
		}
		if err := store.CheckState(pctx); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
		stores[p] = store
	}
	// Every partition records every index it follows: partition 0's
	// records say which indices the feed followed.
	if err := checkTargets(pctx, client, stores[0], cfg, log); err != nil {
		return err
	}
	// newRelay builds partition p's relay; preg nil: no metrics (the
	// relays of a resync's snapshots, replaced by the manager's).
	newRelay := func(p int, snapshot bool, preg prometheus.Registerer) (*relay.Relay, *redisx.Lease, error) {
		keys := redisx.PartitionKeys(cfg.feed, p, parts)
		plog := log.With("partition", p)
		lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: cfg.leaseTTL, Owner: ownerName()})
		if err != nil {
			return nil, nil, err
		}
		store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease, Metrics: preg,
			WaitReplicas: cfg.waitReplicas, WaitTimeout: cfg.waitTimeout})
		if err != nil {
			return nil, nil, err
		}
		var scanner *deletes.Scanner
		if cfg.deletes {
			scanner, err = deletes.New(deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store,
				Interval: cfg.scanInterval, MaxDeleteFraction: cfg.maxDeleteFraction, Listing: cfg.listing, Logger: plog, Metrics: preg})
			if err != nil {
				return nil, nil, err
			}
		}
		r, err := relay.New(relay.Config{ES: client, Store: store, Lease: lease, Targets: cfg.targets, Hidden: cfg.hidden,
			PollInterval: cfg.poll, BatchSize: cfg.batch, ReadConcurrency: cfg.reads, From: cfg.from, Deletes: scanner,
			IndexDeletedEvent: cfg.indexDeletedEvent, Logger: plog, Metrics: preg,
			Trim: cfg.trim, TrimInterval: cfg.trimInterval, MaxStreamLen: cfg.maxStreamLen, MinRetention: cfg.minRetention,
			MaxBacklog: cfg.maxBacklog, Partitions: parts, Partition: p, ReturnOnLostLease: !snapshot, Snapshot: snapshot})
		return r, lease, err
	}
	if resync {
		if err := resyncPartitions(ctx, parts, newRelay, log); err != nil || ctx.Err() != nil {
			return err
		}
	}
	open := func(p int) (partition.Worker, error) {
		r, lease, err := newRelay(p, false, prometheus.WrapRegistererWith(partitionLabel(p), reg))
		if err != nil {
			return partition.Worker{}, err
		}
		return partition.Worker{Lease: lease, Run: r.Run}, nil
	}
	m, err := partition.New(partition.Config{Client: rdb, Feed: cfg.feed, Partitions: parts, TTL: cfg.leaseTTL,
		Owner: ownerName(), Open: open, Logger: log})
	if err != nil {
		return err
	}
	held := func() string {
		return fmt.Sprintf("holding partitions %v of %d (%d relays)", m.Held(), parts, m.Members())
	}
	role := func() (bool, string) { return true, held() }
	ready := func() (bool, string) { return len(m.Held()) > 0, held() }
	if err := serveOps(ctx, cfg.metricsAddr, reg, rdb, redisx.NewKeys(cfg.feed), client, role, ready, log); err != nil {
		return err
	}
	log.Info("relay starting", "feed", cfg.feed, "partitions", parts, "relays_key", partition.RelaysKey(cfg.feed),
		"streams", "escf:{"+cfg.feed+":0.."+strconv.Itoa(parts-1)+"}:events", "targets", cfg.targets)
	return m.Run(ctx)
}

// resyncPartitions rebuilds every partition of a feed: one relay per
// partition waits for the partition's lease (as a standby while another
// relay holds it), resets the partition's state and writes its snapshot
// (snapshot_start, the documents of its shards, snapshot_end with its
// counts) to its stream. Once every partition's snapshot is written the
// relays stop, releasing their leases, and the caller runs the partition
// manager. A relay that fails stops the resync with its error (the
// partitions not finished still say so: run resync again).
func resyncPartitions(ctx context.Context, parts int,
	newRelay func(p int, snapshot bool, preg prometheus.Registerer) (*relay.Relay, *redisx.Lease, error), log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	relays := make([]*relay.Relay, parts)
	errs := make(chan error, parts)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // the relays release their leases
	for p := range parts {
		r, _, err := newRelay(p, true, nil)
		if err != nil {
			return err
		}
		relays[p] = r
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("resync of partition %d: %w", p, err)
			}
		})
	}
	log.Info("resync: rebuilding every partition", "partitions", parts)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done := 0
		for _, r := range relays {
			if r.Snapshotted() {
				done++
			}
		}
		if done == parts {
			log.Info("resync: every partition's snapshot is written; following as a partition manager", "partitions", parts)
			return nil
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
