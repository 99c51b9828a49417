package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// DefaultPartitionsRecheck is Config.PartitionsRecheck when zero.
const DefaultPartitionsRecheck = 30 * time.Second

// Config configures a Feed: one consumer group reading every partition of
// a feed.
type Config struct {
	// Client is the feed's Redis. Required; the Feed does not close it.
	Client redis.UniversalClient
	// Feed is the feed's name. Required.
	Feed string
	// Partitions is the feed's partition count (redisx.ReadPartitions:
	// the count the feed records). Default 1.
	Partitions int
	// Pool is the template of each partition's pool: its Group, Consumer,
	// Workers, Prefetch, MinIdle, MaxDeliveries, ShutdownTimeout,
	// Positions, RepairGrace and Logger. Client, Keys and Metrics are the
	// Feed's. With partitions, Workers and Prefetch are spread over them
	// (ceil(n/partitions) each).
	Pool PoolConfig
	// Metrics registers each pool's collectors (with a partition label
	// when there are several) and the stream collector of each partition
	// (redisx.StreamCollector). Default nil: not registered.
	Metrics prometheus.Registerer
	// PartitionsRecheck is how often Run reads the feed's partition record
	// again: a relay that records another count than Partitions stops Run
	// with a *redisx.PartitionsError (a consumer started first on a new
	// feed read one partition). Default DefaultPartitionsRecheck.
	PartitionsRecheck time.Duration
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("consumer config: Client is nil: pass the feed's Redis client")
	case c.Partitions < 0 || c.Partitions > redisx.MaxPartitions:
		return fmt.Errorf("consumer config: Partitions = %d: want 1..%d (0 means 1)", c.Partitions, redisx.MaxPartitions)
	case c.PartitionsRecheck < 0:
		return fmt.Errorf("consumer config: PartitionsRecheck = %s: want more than 0 (0 means %s)", c.PartitionsRecheck, DefaultPartitionsRecheck)
	}
	if err := redisx.ValidateFeed(c.Feed); err != nil {
		return fmt.Errorf("consumer config: Feed: %w", err)
	}
	pc := c.Pool
	pc.Client, pc.Keys = c.Client, redisx.NewKeys(c.Feed)
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("consumer config: Pool: %w", err)
	}
	return nil
}

// Feed is a consumer of a feed, the counterpart of relay.Feed: one Pool
// per partition in the same group, run together. Build it with New, run
// it once with Run.
type Feed struct {
	cfg   Config
	pools []*Pool
}

// New validates cfg, fills its defaults and builds the pools (and
// registers the metrics).
func New(cfg Config) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.PartitionsRecheck == 0 {
		cfg.PartitionsRecheck = DefaultPartitionsRecheck
	}
	if cfg.Pool.Logger == nil {
		cfg.Pool.Logger = slog.Default()
	}
	f := &Feed{cfg: cfg}
	pools, err := f.partitionPools()
	if err != nil {
		return nil, err
	}
	f.pools = pools
	return f, nil
}

// Partitions is the partition count the Feed reads.
func (f *Feed) Partitions() int { return f.cfg.Partitions }

// Pools are the Feed's pools, one per partition, in order.
func (f *Feed) Pools() []*Pool { return f.pools }

// Streams are the streams the Feed reads, in partition order.
func (f *Feed) Streams() []string {
	var out []string
	for _, k := range redisx.AllPartitionKeys(f.cfg.Feed, f.cfg.Partitions) {
		out = append(out, k.Events())
	}
	return out
}

// Run runs every partition's pool with h until ctx ends, and returns once
// all have drained (Pool.Run: nil after a clean stop). A pool that fails
// (history lost, a group it cannot create) stops the others; its error
// is returned. So does a change of the feed's partition count (a
// *redisx.PartitionsError).
func (f *Feed) Run(ctx context.Context, h redisx.Handler) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go f.watchPartitions(ctx, func(err error) {
		err = fmt.Errorf("the feed recorded its partition count after this consumer started: %w", err)
		f.cfg.Pool.Logger.Error("stopping", logkey.Error, err.Error())
		stop(err)
	})
	err := f.runPools(ctx, h)
	var pe *redisx.PartitionsError
	if cause := context.Cause(ctx); err == nil && errors.As(cause, &pe) {
		return cause
	}
	return err
}

// partitionPools builds one pool per partition: the same group and
// consumer name on each partition's stream, its dead letters in the
// partition's dead stream, the lanes and prefetch spread over the pools,
// metrics with a partition label.
func (f *Feed) partitionPools() ([]*Pool, error) {
	cfg, parts := f.cfg.Pool, f.cfg.Partitions
	cfg.Client = f.cfg.Client
	if parts > 1 {
		workers := cfg.Workers
		if workers == 0 {
			workers = DefaultWorkers
		}
		cfg.Workers = spread(workers, parts)
		if cfg.Prefetch > 0 {
			cfg.Prefetch = spread(cfg.Prefetch, parts)
		}
	}
	pools := make([]*Pool, parts)
	for p := range pools {
		pc := cfg
		pc.Keys = redisx.PartitionKeys(f.cfg.Feed, p, parts)
		reg := f.cfg.Metrics
		if parts > 1 {
			pc.Logger = cfg.Logger.With(logkey.Partition, p)
			if reg != nil {
				reg = prometheus.WrapRegistererWith(redisx.PartitionLabels(p), reg)
			}
		}
		pc.Metrics = reg
		pool, err := NewPool(pc)
		if err != nil {
			return nil, err
		}
		if reg != nil {
			if err := reg.Register(redisx.NewStreamCollector(f.cfg.Client, pc.Keys)); err != nil {
				return nil, fmt.Errorf("register the stream collector of %s: %w", pc.Keys.Events(), err)
			}
		}
		pools[p] = pool
	}
	return pools, nil
}

// runPools runs the pools with h until ctx ends; the first that fails
// stops the others.
func (f *Feed) runPools(ctx context.Context, h redisx.Handler) error {
	if len(f.pools) == 1 {
		return f.pools[0].Run(ctx, h)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(f.pools))
	var wg sync.WaitGroup
	for i, p := range f.pools {
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

// spread is n over partitions: ceil(n/partitions).
func spread(n, partitions int) int { return (n + partitions - 1) / partitions }

// watchPartitions reads the feed's partition record every
// PartitionsRecheck until ctx ends, and calls stop with a
// *redisx.PartitionsError once it no longer matches. Read errors are left
// to the pools, which log Redis outages themselves.
func (f *Feed) watchPartitions(ctx context.Context, stop func(error)) {
	t := time.NewTicker(f.cfg.PartitionsRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec, err := redisx.ReadPartitions(ctx, f.cfg.Client, f.cfg.Feed)
		if err != nil {
			continue
		}
		if err := rec.Check(f.cfg.Feed, f.cfg.Partitions); err != nil {
			stop(err)
			return
		}
	}
}
