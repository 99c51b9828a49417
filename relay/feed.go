package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/partition"
)

// Defaults of FeedConfig fields left at their zero value (the others are
// Config's, and the deletes.Scanner's).
const (
	DefaultOwner = "relay"
	// startTimeout bounds the start-up checks of Feed.Run (the partition
	// count, the feed's state, the targets).
	startTimeout = 10 * time.Second
)

// Retention says how long the feed's stream keeps entries, and when the
// relay stops reading because consumers lag.
type Retention struct {
	// Trim enables safe trimming: every TrimInterval the stream is trimmed
	// (XTRIM MINID) below the oldest entry some consumer group has not
	// acknowledged. Default false: never trimmed.
	Trim bool
	// TrimInterval is the period of trimming. Default DefaultTrimInterval.
	TrimInterval time.Duration
	// MaxStreamLen bounds the stream while no group exists (with a
	// warning). Default DefaultMaxStreamLen.
	MaxStreamLen int64
	// MinRetention keeps entries at least this long, acknowledged or not.
	// Default 0.
	MinRetention time.Duration
	// MaxBacklog, when > 0, pauses reading the cluster while the slowest
	// group lags by more than this many entries. Default 0: never pauses.
	MaxBacklog int64
}

// Deletes configures delete detection.
type Deletes struct {
	// Enabled scans shards for deleted documents and emits their deletes.
	// Default false.
	Enabled bool
	// Interval is the least time between two scans of a shard. Default
	// deletes.DefaultInterval (0: none).
	Interval time.Duration
	// Budget is the share of wall time a shard's scans may keep the
	// cluster busy (deletes.Config.Budget). Default deletes.DefaultBudget.
	Budget float64
	// MaxDeleteFraction: a scan deleting more than this share of a shard's
	// documents is confirmed by a second scan first. Default
	// deletes.DefaultMaxDeleteFraction.
	MaxDeleteFraction float64
	// Listing is how a shard's first scan after the upgrade to delivered
	// ranges lists its live ids, to move the older version's delivered set
	// into ranges: es.ListingAuto, es.ListingPIT or es.ListingScroll.
	// Default es.ListingAuto.
	Listing string
	// IndexDeletedEvent ends a deleted index with its index_deleted event
	// only, without a delete per delivered document first. Without Enabled
	// it is always the single event. Default false.
	IndexDeletedEvent bool
}

// Snapshot configures a resync: the feed is rebuilt before it is followed.
type Snapshot struct {
	// Enabled resets the feed's state (every partition's) and writes
	// snapshot_start, every current document of the targets and
	// snapshot_end with counts, then follows as usual. Default false.
	Enabled bool
	// Progress, if set, is called after each page of the snapshot with the
	// documents written and the total expected. Unpartitioned feeds only.
	Progress func(done, total int64)
}

// Durability configures how a commit is acknowledged.
type Durability struct {
	// WaitReplicas, when > 0, makes each commit wait (Redis WAIT) until
	// this many replicas have it. Default 0: no wait.
	WaitReplicas int
	// WaitTimeout bounds that wait. Default checkpoint.DefaultWaitTimeout.
	WaitTimeout time.Duration
}

// FeedConfig configures a Feed: a feed of one or more partitions, and what
// its relays read and write.
type FeedConfig struct {
	// ES is the cluster client. Required.
	ES *es.Client
	// Redis is the feed's Redis. Required. The Feed does not close it.
	Redis redis.UniversalClient
	// Feed is the feed name (redisx.ValidateFeed). Required.
	Feed string
	// Targets are the index expressions to follow (Config.Targets).
	// Required.
	Targets []string
	// Hidden makes wildcards match hidden indices too.
	Hidden bool
	// From, PollInterval, BatchSize and ReadConcurrency are Config's; their
	// defaults are Config's.
	From            string
	PollInterval    time.Duration
	BatchSize       int
	ReadConcurrency int
	// Partitions is the feed's partition count, 1..redisx.MaxPartitions,
	// fixed for the life of the feed (recorded in Redis at the first run).
	// Default 1: one stream, one lease.
	Partitions int
	// LeaseTTL is the TTL of the lease (each partition's). Default
	// redisx.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Owner names this process in the leases and the partition manager's
	// relays ZSET (e.g. host-pid). Default DefaultOwner.
	Owner string
	// Retention, Deletes, Snapshot and Durability: see their types.
	Retention  Retention
	Deletes    Deletes
	Snapshot   Snapshot
	Durability Durability
	// Metrics registers the feed's collectors: the stream's
	// (redisx.NewStreamCollector), the commits', the delete scans' and the
	// relay's; with Partitions > 1 once per partition, with the const
	// label partition="<p>". Default nil: not registered.
	Metrics prometheus.Registerer
	// Logger receives the logs. Default slog.Default().
	Logger *slog.Logger
	// Tune, if set, adjusts each relay Config the Feed builds, after the
	// Feed filled it in (tests and the demo: backoffs, intervals). Default
	// nil.
	Tune func(*Config)
}

// Validate names the first bad field.
func (c FeedConfig) Validate() error {
	switch {
	case c.ES == nil:
		return errors.New("feed config: ES is nil")
	case c.Redis == nil:
		return errors.New("feed config: Redis is nil")
	case c.Partitions < 0 || c.Partitions > redisx.MaxPartitions:
		return fmt.Errorf("feed config: Partitions = %d: want 1..%d", c.Partitions, redisx.MaxPartitions)
	case c.LeaseTTL < 0:
		return fmt.Errorf("feed config: LeaseTTL = %s: want > 0", c.LeaseTTL)
	case c.Retention.TrimInterval < 0:
		return fmt.Errorf("feed config: Retention.TrimInterval = %s: want > 0", c.Retention.TrimInterval)
	case c.Retention.MaxStreamLen < 0:
		return fmt.Errorf("feed config: Retention.MaxStreamLen = %d: want > 0", c.Retention.MaxStreamLen)
	case c.Retention.MinRetention < 0:
		return fmt.Errorf("feed config: Retention.MinRetention = %s: want >= 0", c.Retention.MinRetention)
	case c.Retention.MaxBacklog < 0:
		return fmt.Errorf("feed config: Retention.MaxBacklog = %d: want >= 0 (0: never pause)", c.Retention.MaxBacklog)
	case c.Durability.WaitReplicas < 0:
		return fmt.Errorf("feed config: Durability.WaitReplicas = %d: want >= 0", c.Durability.WaitReplicas)
	}
	if err := redisx.ValidateFeed(c.Feed); err != nil {
		return fmt.Errorf("feed config: Feed: %w", err)
	}
	return nil
}

func (c FeedConfig) withDefaults() FeedConfig {
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = redisx.DefaultLeaseTTL
	}
	if c.Owner == "" {
		c.Owner = DefaultOwner
	}
	// Retention's and Deletes' defaults are the relay's and the scanner's.
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Feed runs a feed of 1..N partitions: it owns the wiring of each
// partition's lease, checkpoint.Store, deletes.Scanner and Relay, and, for
// more than one partition, the partition manager. Run it once (a second
// Run returns ErrRanTwice).
type Feed struct {
	cfg   FeedConfig
	log   *slog.Logger
	parts []*part

	ran     atomic.Bool
	one     atomic.Pointer[Relay]             // the relay of an unpartitioned feed, once built
	manager atomic.Pointer[partition.Manager] // the manager of a partitioned one, once built
}

// part is what one partition's successive relays share in this process:
// the lease (each tenure a relay), the store (it remembers the commits it
// made, to tell a Redis rollback), the scanner, the metrics (registered
// once) and the carried state.
type part struct {
	n       int
	keys    redisx.Keys
	log     *slog.Logger
	lease   *redisx.Lease
	store   *checkpoint.Store
	scanner *deletes.Scanner
	carry   *carry
}

// carry is what a partition's relay hands on to the next one: a Relay is
// run once, so a re-acquired partition gets a fresh Relay, which must
// still know what this process saw of the partition.
type carry struct {
	m       *metrics
	mu      sync.Mutex
	sawMeta bool                  // Relay.sawMeta
	lost    checkpoint.RolledBack // Relay.lost: commits Redis lost, not repaired yet
}

// NewFeed checks cfg and builds every partition's lease, store and scanner,
// registering their collectors on cfg.Metrics. It does no I/O.
func NewFeed(cfg FeedConfig) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &Feed{cfg: cfg, log: cfg.Logger}
	// Check the relays' config (its Store and Lease stand in) before
	// anything is registered, so that Run fails on nothing but I/O.
	if err := f.relayConfig(&part{store: &checkpoint.Store{}, lease: &redisx.Lease{}}, false).Validate(); err != nil {
		return nil, err
	}
	for n := range cfg.Partitions {
		keys, log, reg := redisx.NewKeys(cfg.Feed), cfg.Logger, cfg.Metrics
		if cfg.Partitions > 1 {
			keys, log = redisx.PartitionKeys(cfg.Feed, n, cfg.Partitions), log.With(logkey.Partition, n)
			if reg != nil {
				reg = prometheus.WrapRegistererWith(redisx.PartitionLabels(n), reg)
			}
		}
		p, err := f.newPart(n, keys, log, reg)
		if err != nil {
			return nil, err
		}
		f.parts = append(f.parts, p)
	}
	return f, nil
}

func (f *Feed) newPart(n int, keys redisx.Keys, log *slog.Logger, reg prometheus.Registerer) (*part, error) {
	cfg := f.cfg
	if reg != nil {
		if err := reg.Register(redisx.NewStreamCollector(cfg.Redis, keys)); err != nil {
			return nil, fmt.Errorf("register the stream collector of %s: %w", keys.Events(), err)
		}
	}
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: cfg.Redis, Key: keys.Lease(), TTL: cfg.LeaseTTL, Owner: cfg.Owner})
	if err != nil {
		return nil, err
	}
	store, err := checkpoint.New(checkpoint.Config{Client: cfg.Redis, Keys: keys, Lease: lease, Metrics: reg,
		WaitReplicas: cfg.Durability.WaitReplicas, WaitTimeout: cfg.Durability.WaitTimeout})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	p := &part{n: n, keys: keys, log: log, lease: lease, store: store, carry: &carry{m: m}}
	if d := cfg.Deletes; d.Enabled {
		p.scanner, err = deletes.New(deletes.Config{ES: cfg.ES, Client: cfg.Redis, Keys: keys, Store: store,
			Interval: d.Interval, Budget: d.Budget, MaxDeleteFraction: d.MaxDeleteFraction, Listing: d.Listing, Logger: log, Metrics: reg})
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// relayConfig is the Config of a relay of partition p.
func (f *Feed) relayConfig(p *part, snapshot bool) Config {
	c := f.cfg
	rc := Config{ES: c.ES, Store: p.store, Lease: p.lease, Targets: c.Targets, Hidden: c.Hidden,
		PollInterval: c.PollInterval, BatchSize: c.BatchSize, ReadConcurrency: c.ReadConcurrency, From: c.From,
		Deletes: p.scanner, IndexDeletedEvent: c.Deletes.IndexDeletedEvent, Logger: p.log,
		Trim: c.Retention.Trim, TrimInterval: c.Retention.TrimInterval, MaxStreamLen: c.Retention.MaxStreamLen,
		MinRetention: c.Retention.MinRetention, MaxBacklog: c.Retention.MaxBacklog,
		Snapshot: snapshot, carry: p.carry}
	if c.Partitions > 1 {
		rc.Partitions, rc.Partition = c.Partitions, p.n
		// The manager decides what a partition whose lease is lost does;
		// the relays of a resync wait for their partition's lease.
		rc.ReturnOnLostLease = !snapshot
	} else {
		rc.SnapshotProgress = c.Snapshot.Progress
	}
	if c.Tune != nil {
		c.Tune(&rc)
	}
	return rc
}

// Run checks the feed and its targets, then follows them until ctx ends
// (then it returns nil, every lease released) or a relay fails.
//
// At start it records (or checks) the partition count, refuses a feed
// whose state was lost (unless Snapshot.Enabled: a resync rebuilds it) and
// checks the targets (checkTargets: the target policy), before any lease is
// taken. Unpartitioned, it then runs one Relay, which waits as a standby
// while another process leads. Partitioned, it first rebuilds every
// partition if Snapshot.Enabled, then runs a partition.Manager that holds
// a balanced share of the partitions, with a fresh Relay for each
// acquisition of a partition.
func (f *Feed) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrRanTwice
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c := f.cfg
	if err := redisx.RecordPartitions(sctx, c.Redis, c.Feed, c.Partitions); err != nil {
		return err
	}
	for _, p := range f.parts {
		if c.Snapshot.Enabled {
			break // a resync rebuilds whatever is there
		}
		// Refuse a lost partition at once, before leases are taken (its
		// relay would refuse it too).
		if err := p.store.CheckState(sctx); err != nil {
			if c.Partitions > 1 {
				return fmt.Errorf("partition %d: %w", p.n, err)
			}
			return err
		}
	}
	if c.Partitions <= 1 {
		r, err := New(f.relayConfig(f.parts[0], c.Snapshot.Enabled))
		if err != nil {
			return err
		}
		if err := r.checkTargets(sctx); err != nil {
			return err
		}
		f.one.Store(r)
		f.log.Info("relay starting", logkey.Feed, c.Feed, logkey.Stream, f.parts[0].keys.Events(), logkey.Targets, c.Targets, logkey.Resync, c.Snapshot.Enabled)
		return r.Run(ctx)
	}
	// Every partition records every index it follows: partition 0's
	// records say which indices the feed followed. The checking relay is
	// never run.
	chk := f.relayConfig(f.parts[0], false)
	chk.carry = nil
	r, err := New(chk)
	if err != nil {
		return err
	}
	if err := r.checkTargets(sctx); err != nil {
		return err
	}
	cancel()
	if c.Snapshot.Enabled {
		if err := f.resync(ctx); err != nil || ctx.Err() != nil {
			return err
		}
	}
	m, err := partition.New(partition.Config{Client: c.Redis, Feed: c.Feed, Partitions: c.Partitions, TTL: c.LeaseTTL,
		Owner: c.Owner, Open: f.open, Logger: f.log})
	if err != nil {
		return err
	}
	f.manager.Store(m)
	f.log.Info("relay starting", logkey.Feed, c.Feed, logkey.Partitions, c.Partitions, logkey.RelaysKey, redisx.NewKeys(c.Feed).Relays(),
		logkey.Streams, redisx.PartitionStreams(c.Feed, c.Partitions), logkey.Targets, c.Targets)
	return m.Run(ctx)
}

// open is the partition manager's Open: partition n's lease, and a Run
// that builds a fresh Relay for each tenure of the lease.
func (f *Feed) open(n int) (partition.Worker, error) {
	p := f.parts[n]
	return partition.Worker{Lease: p.lease, Run: func(ctx context.Context) error {
		r, err := New(f.relayConfig(p, false))
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}, nil
}

// resync rebuilds every partition of a feed: one relay per partition waits
// for the partition's lease (as a standby while another relay holds it),
// resets the partition's state and writes its snapshot (snapshot_start,
// the documents of its shards, snapshot_end with its counts) to its
// stream. Once every partition's snapshot is written the relays stop,
// releasing their leases, and Run goes on with the partition manager. A
// relay that fails stops the resync with its error (the partitions not
// finished still say so: run resync again).
func (f *Feed) resync(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	parts := len(f.parts)
	relays := make([]*Relay, parts)
	errs := make(chan error, parts)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // the relays release their leases
	for i, p := range f.parts {
		r, err := New(f.relayConfig(p, true))
		if err != nil {
			return err
		}
		relays[i] = r
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("resync of partition %d: %w", p.n, err)
			}
		})
	}
	f.log.Info("resync: rebuilding every partition", logkey.Partitions, parts)
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
			f.log.Info("resync: every partition's snapshot is written; following as a partition manager", logkey.Partitions, parts)
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

// Health reports whether the feed runs, and its role (the status page's
// /healthz).
func (f *Feed) Health() (bool, string) {
	if m := f.manager.Load(); m != nil {
		return true, f.held(m)
	}
	if r := f.one.Load(); r != nil && r.Leading() {
		return true, "leading"
	}
	if f.cfg.Partitions > 1 || f.one.Load() == nil {
		return true, "starting"
	}
	return true, "standby"
}

// Ready reports whether this process writes the feed now (/readyz): an
// unpartitioned feed's relay leads and is not paused by backpressure; a
// partitioned feed's manager holds a partition.
func (f *Feed) Ready() (bool, string) {
	if m := f.manager.Load(); m != nil {
		return len(m.Held()) > 0, f.held(m)
	}
	r := f.one.Load()
	switch {
	case r == nil:
		return false, "starting"
	case !r.Leading():
		return false, "standby: another relay leads"
	case r.Paused():
		return false, "leading, paused by backpressure"
	}
	return true, "leading"
}

func (f *Feed) held(m *partition.Manager) string {
	return fmt.Sprintf("holding partitions %v of %d (%d relays)", m.Held(), f.cfg.Partitions, m.Members())
}

// Keys are the Redis keys of partition p (0 for an unpartitioned feed).
func (f *Feed) Keys(p int) redisx.Keys { return f.parts[p].keys }
