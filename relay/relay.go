package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// ErrRanTwice is returned by a second Run of a Relay or a Feed: their
// state is one run's.
var ErrRanTwice = errors.New("relay: Run called twice; build a new one")

// Start positions for shards that have no stored checkpoint.
const (
	FromBeginning = "beginning"
	FromNow       = "now"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultPollInterval = time.Second
	DefaultBatchSize    = 1000
	// DefaultReadConcurrency bounds the shard reads in flight at once,
	// over every index the relay follows.
	DefaultReadConcurrency = 8
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 30 * time.Second
	DefaultTrimInterval    = 10 * time.Second
	DefaultMaxStreamLen    = 1_000_000
	// commitTimeout bounds a commit that runs after shutdown began.
	commitTimeout = 10 * time.Second
)

// Bounds of Config fields (Validate refuses values outside them; the CLI's
// flags say and check the same).
const (
	// MaxBatchSize bounds BatchSize: a batch is one search page.
	MaxBatchSize = es.MaxPageSize
	// MaxReadConcurrency bounds ReadConcurrency.
	MaxReadConcurrency = 256
)

// Config configures a Relay.
type Config struct {
	// ES is the cluster client. Required.
	ES *es.Client
	// Store commits events and checkpoints. Required; it must have a Lease.
	Store *checkpoint.Store
	// Lease fences the feed: only its holder reads and writes. Required.
	Lease *redisx.Lease
	// Targets are the index expressions to follow: concrete names, wildcard
	// patterns with -exclusions, aliases, data streams. Each is resolved
	// every round; every concrete index behind it is followed, and its
	// events carry the expression as target. Required.
	Targets []string
	// Hidden makes wildcards match hidden indices too (data stream backing
	// indices are always followed through their data stream).
	Hidden bool
	// Snapshot makes the relay start with a snapshot (resync): reset the
	// feed's state, emit snapshot_start, every current document of the
	// targets, snapshot_end with counts, then follow as usual. With
	// Partitions, the partition's state, stream and shards only.
	Snapshot bool
	// SnapshotProgress, if set, is called after each page of a snapshot
	// with the documents written and the total expected (a progress bar).
	SnapshotProgress func(done, total int64)
	// ProgressInterval is how often a long read (an index's first read from
	// its beginning, a snapshot) logs its progress. Default 5s.
	ProgressInterval time.Duration
	// Metrics registers the relay's Prometheus collectors. Default nil: not
	// registered.
	Metrics prometheus.Registerer
	// Trim enables safe retention: every TrimInterval the stream is trimmed
	// (XTRIM MINID) below the oldest entry some group has not acknowledged.
	Trim bool
	// TrimInterval is the period of trimming. Default DefaultTrimInterval.
	TrimInterval time.Duration
	// MaxStreamLen bounds the stream when no group exists (with a warning).
	// Default DefaultMaxStreamLen.
	MaxStreamLen int64
	// MinRetention keeps entries at least this long whatever the groups
	// acknowledged. Default 0.
	MinRetention time.Duration
	// MaxBacklog, when > 0, pauses reading the cluster while the slowest
	// group lags by more than this many entries (the cursor is durable: the
	// cluster is the buffer).
	MaxBacklog int64
	// PollInterval is the poll tick: the rounds of every followed index
	// start on ticks this far apart, shared by the whole relay (their
	// stats, resolutions and refreshes are joined), and an index gets at
	// most one forced refresh per tick. Default 1s.
	PollInterval time.Duration
	// ReadConcurrency is how many shards are read at once, across and
	// within indices (each shard's pages in order, each page committed
	// atomically; a shard read searches its next page while a page
	// commits). Default DefaultReadConcurrency; 1 reads one shard at a
	// time.
	ReadConcurrency int
	// StatsWindow is how long a round's shard-stats request waits for the
	// rounds of other indices to join it, so that idle indices cost one
	// _stats request per poll between them. Default DefaultStatsWindow;
	// negative: each index asks alone.
	StatsWindow time.Duration
	// BatchSize is the search page size, and so the most events per commit.
	// Memory: a shard read holds at most two pages (the one committing and
	// the next, searched ahead) and one page's events; with the pages held
	// for their settle check, the relay holds at most 3 × ReadConcurrency
	// pages of BatchSize hits, their sources included. Default 1000.
	BatchSize int
	// From is where shards without a stored checkpoint start: FromBeginning
	// (every existing document once) or FromNow (the current global
	// checkpoint). Default FromBeginning.
	From string
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	// Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Deletes, when set, scans shards for deleted documents between their
	// reads (--deletes). Default nil: no delete detection.
	Deletes *deletes.Scanner
	// IndexDeletedEvent makes an index that disappears end with its
	// index_deleted event only, without a delete per delivered document
	// first. Without Deletes it is always the single event.
	IndexDeletedEvent bool
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// Partitions, when > 1, makes this Relay follow only the shards of
	// partition Partition (redisx.Partition(uuid, shard, Partitions) ==
	// Partition); Store and Lease must then be the partition's
	// (redisx.PartitionKeys). Generations are assigned in the feed-level
	// hash (redisx.NewKeys(feed).Generations()), so an index uuid has the
	// same generation in every partition, and an index that disappears
	// ends with its single index_deleted event in the partition owning its
	// shard 0. Default 0: one partition, every shard.
	Partitions int
	// Partition is the partition this Relay follows (0..Partitions-1).
	Partition int
	// ReturnOnLostLease makes Run return (redisx.ErrLeaseLost) when it
	// cannot take the lease at once or loses it, instead of waiting as a
	// standby: a partition manager decides what to do. Default false.
	ReturnOnLostLease bool

	// carry, set by a Feed, is what the successive relays of a partition
	// share: their metrics (registered once) and what this process saw.
	carry *carry
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.ES == nil:
		return errors.New("relay config: ES is nil")
	case c.Store == nil:
		return errors.New("relay config: Store is nil")
	case c.Lease == nil:
		return errors.New("relay config: Lease is nil")
	case len(c.Targets) == 0:
		return errors.New("relay config: no Targets: name at least one index, pattern, alias or data stream")
	case c.PollInterval < 0:
		return fmt.Errorf("relay config: PollInterval = %s: want > 0", c.PollInterval)
	case c.ReadConcurrency < 0 || c.ReadConcurrency > MaxReadConcurrency:
		return fmt.Errorf("relay config: ReadConcurrency = %d: want 1..%d", c.ReadConcurrency, MaxReadConcurrency)
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("relay config: BatchSize = %d: want 1..%d (index.max_result_window)", c.BatchSize, MaxBatchSize)
	case c.From != "" && c.From != FromBeginning && c.From != FromNow:
		return fmt.Errorf("relay config: From = %q: want %q or %q", c.From, FromBeginning, FromNow)
	case c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MaxBackoff > 0 && c.MaxBackoff < c.MinBackoff):
		return fmt.Errorf("relay config: backoff %s..%s is not a range", c.MinBackoff, c.MaxBackoff)
	case c.Partitions < 0 || c.Partitions > redisx.MaxPartitions:
		return fmt.Errorf("relay config: Partitions = %d: want 1..%d", c.Partitions, redisx.MaxPartitions)
	case c.Partition < 0 || (c.Partition > 0 && c.Partition >= c.Partitions):
		return fmt.Errorf("relay config: Partition = %d: want 0..%d", c.Partition, max(c.Partitions, 1)-1)
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		if t == "" {
			return errors.New("relay config: a target expression is empty")
		}
		if seen[t] {
			return fmt.Errorf("relay config: target %q is named twice", t)
		}
		seen[t] = true
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.ReadConcurrency == 0 {
		c.ReadConcurrency = DefaultReadConcurrency
	}
	if c.StatsWindow == 0 {
		c.StatsWindow = DefaultStatsWindow
	}
	if c.From == "" {
		c.From = FromBeginning
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 5 * time.Second
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = DefaultTrimInterval
	}
	if c.MaxStreamLen == 0 {
		c.MaxStreamLen = DefaultMaxStreamLen
	}
	return c
}

// Relay turns shard sequence numbers into stream entries. Run it once (a
// second Run returns ErrRanTwice): a Feed gives each acquisition of a
// partition's lease a fresh Relay.
type Relay struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	ran atomic.Bool

	reads     chan struct{} // a slot per shard read in flight (ReadConcurrency)
	heldMu    sync.Mutex
	held      int          // hits of the pages pending their settle check (Relay.hold)
	stats     statsBatcher // joins the indices' shard-stats reads
	refreshes refreshBatcher

	paused atomic.Bool // backpressure: the slowest group lags by more than MaxBacklog
	leader atomic.Bool // this relay holds the lease

	mu          sync.Mutex
	clusterUUID string                // of the cluster this relay reads, from GET /
	sawMeta     bool                  // this process saw the feed's meta hash: its loss is state loss
	snapshotted bool                  // the snapshot of a resync was written
	resolved    bool                  // the first resolution of the targets happened
	lost        checkpoint.RolledBack // commits Redis lost, until repaired
	closedSaid  map[string]uint64     // index → the note at which it was said closed
	notes       uint64                // counts sayClosed and roundNote calls
}

// sayClosed warns once that an index is closed (the resolver and the index's
// own loop may both notice).
func (r *Relay) sayClosed(name, target string) {
	r.mu.Lock()
	if r.closedSaid == nil {
		r.closedSaid = map[string]uint64{}
	}
	_, said := r.closedSaid[name]
	if !said {
		r.notes++
		r.closedSaid[name] = r.notes
	}
	r.mu.Unlock()
	if !said {
		r.log.Warn("index is closed: skipping it until it is reopened", logkey.Index, name, logkey.Target, target)
	}
}

// roundNote marks the start of a round, for sayOpen.
func (r *Relay) roundNote() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes++
	return r.notes
}

// sayOpen reports a reopened index once, if it was said to be closed before
// the round that succeeded began (note from roundNote): a round that began
// before the close may still succeed, and proves nothing about a reopening.
func (r *Relay) sayOpen(name string, note uint64) {
	r.mu.Lock()
	at, said := r.closedSaid[name]
	said = said && at < note
	if said {
		delete(r.closedSaid, name)
	}
	r.mu.Unlock()
	if said {
		r.log.Info("index reopened: resuming from its checkpoint", logkey.Index, name)
	}
}

// New returns a Relay.
func New(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &Relay{cfg: cfg, log: cfg.Logger, reads: make(chan struct{}, cfg.ReadConcurrency)}
	if c := cfg.carry; c != nil {
		c.mu.Lock()
		r.m, r.sawMeta, r.lost = c.m, c.sawMeta, c.lost
		c.mu.Unlock()
	} else {
		m, err := newMetrics(cfg.Metrics)
		if err != nil {
			return nil, err
		}
		r.m = m
	}
	r.stats = statsBatcher{r: r, epoch: time.Now(), window: cfg.StatsWindow}
	r.refreshes = refreshBatcher{window: cfg.StatsWindow}
	return r, nil
}

// Run follows the indices until ctx ends. It waits as a standby while
// another relay holds the lease, leads while it holds it, and goes back to
// standby if it loses it. On cancellation it lets a commit in flight finish,
// releases the lease and returns nil.
//
// With ReturnOnLostLease it does not wait: it returns redisx.ErrLeaseLost
// when the lease is not free (or already its own) or is lost while leading.
func (r *Relay) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return ErrRanTwice
	}
	defer r.handOn()
	for {
		if r.cfg.ReturnOnLostLease {
			ok, err := r.cfg.Lease.TryAcquire(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %s is held by another relay", redisx.ErrLeaseLost, r.cfg.Lease.Key())
			}
		} else if err := r.acquire(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err := r.lead(ctx)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := r.cfg.Lease.Release(rctx); rerr != nil {
				r.log.Warn("could not release the lease; a standby takes over when it expires", logkey.Error, rerr)
			} else {
				r.log.Info("released the lease")
			}
			cancel()
			return nil
		}
		if errors.Is(err, redisx.ErrLeaseLost) && r.cfg.ReturnOnLostLease {
			return err
		}
		if errors.Is(err, redisx.ErrLeaseLost) {
			r.log.Warn("lost the lease; waiting as standby to take it again", logkey.Error, err)
			continue
		}
		if errors.Is(err, checkpoint.ErrRolledBack) {
			r.log.Warn("Redis lost changes this relay had committed: loading the feed's state again and reading them again from the cluster", logkey.Error, err)
			continue
		}
		if errors.Is(err, checkpoint.ErrInDoubt) {
			// A commit of the start-up whose reply was lost: the store
			// decides it (landed or not) when the state is loaded again.
			r.log.Warn("a commit's reply was lost; loading the feed's state again", logkey.Error, err)
			if !sleep(ctx, r.cfg.MinBackoff) {
				return nil
			}
			continue
		}
		if errors.Is(err, checkpoint.ErrNotReplicated) {
			// A commit of the start-up (--wait-replicas) the replicas did
			// not acknowledge: no replica yet after a failover. Start again.
			r.log.Warn("a commit was not acknowledged by enough replicas; loading the feed's state again", logkey.Error, err)
			if !sleep(ctx, r.cfg.MinBackoff) {
				return nil
			}
			continue
		}
		// Leave no lease behind for a standby to wait out (nor, if Redis
		// lost the feed's state, a key in it).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = r.cfg.Lease.Release(rctx)
		cancel()
		return err
	}
}

// handOn leaves what this relay saw for the next relay of its partition
// (Config.carry).
func (r *Relay) handOn() {
	c := r.cfg.carry
	if c == nil {
		return
	}
	r.mu.Lock()
	saw, lost := r.sawMeta, r.lost
	r.mu.Unlock()
	c.mu.Lock()
	c.sawMeta, c.lost = saw, lost
	c.mu.Unlock()
}

// acquire waits for the lease, retrying Redis errors with backoff.
func (r *Relay) acquire(ctx context.Context) error {
	b := r.newBackoff()
	for {
		err := r.cfg.Lease.Acquire(ctx, func(holder string) {
			r.log.Info("another relay holds the lease; waiting as standby", logkey.Holder, holder)
		})
		if err == nil {
			r.log.Info("acquired the lease; leading the feed")
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := b.next()
		b.report(r.log, "cannot acquire the lease", err, d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// lead runs one loop per index while the lease is ours. It returns when ctx
// ends or the lease is lost.
func (r *Relay) lead(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if info, err := r.cfg.ES.Info(ctx); err == nil {
		r.mu.Lock()
		r.clusterUUID = info.ClusterUUID
		r.mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.cfg.Lease.Keep(ctx); err != nil {
			cancel(err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.start(ctx); err != nil {
			cancel(err)
			return
		}
		r.leader.Store(true)
		r.m.leaseHeld.Set(1)
		if r.cfg.Trim || r.cfg.MaxBacklog > 0 {
			wg.Add(1)
			go func() { defer wg.Done(); r.watchStream(ctx) }()
		}
		if err := r.followTargets(ctx); err != nil {
			cancel(err)
		}
	}()
	<-ctx.Done()
	wg.Wait()
	r.leader.Store(false)
	r.m.leaseHeld.Set(0)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return ctx.Err()
}

// start checks the feed's state (refusing a lost one) and, for a resync,
// writes the snapshot once. The state found is what the relay continues
// from (the index loops load it afresh).
func (r *Relay) start(ctx context.Context) error {
	b := r.newBackoff()
	for {
		rb, err := r.cfg.Store.Rebase(ctx)
		r.mu.Lock()
		r.lost.Merge(rb)
		r.mu.Unlock()
		if err == nil {
			err = r.checkState(ctx)
		}
		if err == nil {
			err = r.repair(ctx)
		}
		if err == nil || errors.Is(err, checkpoint.ErrStateLost) || ctx.Err() != nil {
			if err != nil {
				return err
			}
			break
		}
		d := b.next()
		b.report(r.log, "cannot read the feed's state; retrying", err, d)
		if !sleep(ctx, d) {
			return nil
		}
	}
	// Say who leads, and since when (status shows it).
	if err := r.commit(ctx, checkpoint.Batch{Meta: map[string]string{checkpoint.MetaLeaseOwner: r.cfg.Lease.Token(),
		checkpoint.MetaLeaseSince: time.Now().UTC().Format(time.RFC3339), checkpoint.MetaBackpressure: ""}}); err != nil {
		return err
	}
	r.mu.Lock()
	need := r.cfg.Snapshot && !r.snapshotted
	r.mu.Unlock()
	if !need {
		return nil
	}
	b = r.newBackoff()
	for {
		err := r.snapshot(ctx)
		if err == nil {
			r.mu.Lock()
			r.snapshotted = true
			r.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, redisx.ErrLeaseLost) || errors.Is(err, ErrUnfollowable) {
			return err
		}
		d := b.next()
		b.report(r.log, "snapshot failed; starting it again", err, d)
		if !sleep(ctx, d) {
			return nil
		}
	}
}

// checkState refuses to continue a feed whose state is gone: a stream
// without its meta hash, an interrupted resync, or (while this process
// runs) a meta hash that disappeared.
func (r *Relay) checkState(ctx context.Context) error {
	if r.cfg.Snapshot {
		return nil // a resync rebuilds whatever is there
	}
	if err := r.cfg.Store.CheckState(ctx); err != nil {
		return err
	}
	meta, err := r.cfg.Store.Meta(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	saw := r.sawMeta
	r.mu.Unlock()
	if len(meta) == 0 && saw {
		return fmt.Errorf("%w: %s disappeared while this relay ran (Redis restarted without persistence?): run `es-changefeed resync` to rebuild the feed",
			checkpoint.ErrStateLost, r.cfg.Store.Keys().Meta())
	}
	if len(meta) == 0 {
		// A new feed: record it, so that losing its state can be told apart
		// from starting afresh.
		if err := r.commit(ctx, checkpoint.Batch{Meta: map[string]string{checkpoint.MetaCreated: time.Now().UTC().Format(time.RFC3339)}}); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.sawMeta = true
	r.mu.Unlock()
	return nil
}

// repair handles commits of this relay that Redis lost (a restart from an
// older append-only file, a failover to a lagging replica). The state Redis
// holds is consistent, only older: the index loops load it and read the
// lost changes again from the cluster. But consumers may have applied
// documents from the lost entries that were deleted since, so nothing would
// ever delete them: those documents go back into the delivered sets, with
// a gap so their shards get a delete scan, which emits the deletes.
func (r *Relay) repair(ctx context.Context) error {
	r.mu.Lock()
	lost := r.lost
	r.mu.Unlock()
	if lost.Commits == 0 {
		return nil
	}
	if lost.Forgotten {
		return fmt.Errorf("%w: Redis lost %d commits of this relay, some older than it remembers the documents of: consumers may hold documents whose deletes it cannot find: run `es-changefeed resync` to rebuild the feed",
			checkpoint.ErrStateLost, lost.Commits)
	}
	b := checkpoint.Batch{Delivered: lost.Delivered, Gaps: map[checkpoint.ShardID]int64{}}
	docs := 0
	for id, d := range lost.Delivered {
		b.Gaps[id] = 1
		docs += len(d)
	}
	// Say which entries the repair covers, for consumers that applied
	// some of them (redisx.Rollback): those after the stream's last id now,
	// before this moment. Nothing was added since Redis came back: this is
	// the relay's first commit on the older state.
	rec, err := r.rollbackRecord(ctx, redisx.Rollback{Commits: lost.Commits, Acknowledged: lost.Acknowledged, Documents: docs})
	if err != nil {
		return err
	}
	b.Meta = map[string]string{redisx.RollbacksField: rec}
	if err := r.commit(ctx, b); err != nil {
		return err
	}
	r.log.Info("recorded the documents of the lost commits again, for delete scans", logkey.Commits, lost.Commits, logkey.Acknowledged, lost.Acknowledged, logkey.Documents, docs)
	r.mu.Lock()
	r.lost = checkpoint.RolledBack{}
	r.mu.Unlock()
	return nil
}

// rollbackRecord is the meta field redisx.RollbacksField with rec, the
// loss being repaired, added: its window is the stream's last id now to
// this moment.
func (r *Relay) rollbackRecord(ctx context.Context, rec redisx.Rollback) (string, error) {
	client, keys := r.cfg.Store.Client(), r.cfg.Store.Keys()
	st, err := redisx.ReadStream(ctx, client, keys.Events())
	if err != nil {
		return "", err
	}
	now, err := client.Time(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("read Redis's clock: %w", err)
	}
	meta, err := r.cfg.Store.Meta(ctx)
	if err != nil {
		return "", err
	}
	rec.After, rec.Before, rec.At = st.LastID, strconv.FormatInt(now.UnixMilli(), 10)+"-0", now.UTC()
	return redisx.AppendRollback(meta[redisx.RollbacksField], rec)
}

// commit writes a batch. Once started, a commit is not abandoned because
// the relay is stopping: it runs on a context that ignores cancellation,
// bounded by commitTimeout.
func (r *Relay) commit(ctx context.Context, b checkpoint.Batch) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	return r.cfg.Store.Commit(cctx, b)
}

// owns reports whether a shard is this relay's to follow (its partition's).
func (r *Relay) owns(uuid string, shard int) bool {
	return r.cfg.Partitions <= 1 || redisx.Partition(uuid, shard, r.cfg.Partitions) == r.cfg.Partition
}

// Leading reports whether this relay holds the lease now (a standby does
// not).
func (r *Relay) Leading() bool { return r.leader.Load() }

// Snapshotted reports whether the snapshot of a resync (Config.Snapshot)
// is written.
func (r *Relay) Snapshotted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshotted
}

// Paused reports whether backpressure pauses reading now.
func (r *Relay) Paused() bool { return r.paused.Load() }

// retry is the retry pause of a loop (backoff.Backoff) that logs once
// per change of error.
type retry struct {
	pause   backoff.Backoff
	lastErr string
	failing bool
}

func (r *Relay) newBackoff() *retry {
	return &retry{pause: backoff.Backoff{Min: r.cfg.MinBackoff, Max: r.cfg.MaxBackoff}}
}

func (b *retry) next() time.Duration { return b.pause.Next() }

// report logs err unless it is the same kind of error as the previous one.
func (b *retry) report(log *slog.Logger, msg string, err error, d time.Duration) {
	key := errorKind(err)
	if key != b.lastErr {
		log.Warn(msg, logkey.Error, err.Error(), logkey.RetryIn, d.Round(time.Millisecond).String())
		b.lastErr = key
	}
	b.failing = true
}

func (b *retry) recovered(log *slog.Logger) {
	if b.failing {
		log.Info("recovered")
	}
	b.failing, b.lastErr = false, ""
	b.pause.Reset()
}

// errorKind groups errors for "log once per state change": the same ES
// status and type, or the same root cause otherwise (the innermost wrapped
// error: Redis refusing connections is one state, whichever call met it).
func errorKind(err error) string {
	var ee *es.Error
	if errors.As(err, &ee) {
		return fmt.Sprintf("es:%s:%d:%s", ee.Op, ee.Status, ee.Type)
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err.Error()
		}
		err = inner
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
