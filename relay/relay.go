package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/es"
)

// Start positions for shards that have no stored checkpoint.
const (
	FromBeginning = "beginning"
	FromNow       = "now"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultPollInterval = time.Second
	DefaultBatchSize    = 1000
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	// commitTimeout bounds a commit that runs after shutdown began.
	commitTimeout = 10 * time.Second
)

// Log attribute keys.
const (
	logIndex   = "index"
	logShard   = "shard"
	logUUID    = "index_uuid"
	logErr     = "error"
	logEvents  = "events"
	logCP      = "checkpoint"
	logGCP     = "global_checkpoint"
	logHolder  = "holder"
	logBackoff = "retry_in"
)

// Config configures a Relay.
type Config struct {
	// ES is the cluster client. Required.
	ES *es.Client
	// Store commits events and checkpoints. Required; it must have a Lease.
	Store *checkpoint.Store
	// Lease fences the feed: only its holder reads and writes. Required.
	Lease *redisx.Lease
	// Indices are the concrete index names to follow. Required.
	Indices []string
	// PollInterval is the pause after a round that found nothing new.
	// Default 1s.
	PollInterval time.Duration
	// BatchSize is the search page size, and so the most events per commit.
	// Default 1000.
	BatchSize int
	// From is where shards without a stored checkpoint start: FromBeginning
	// (every existing document once) or FromNow (the current global
	// checkpoint). Default FromBeginning.
	From string
	// MinBackoff and MaxBackoff bound the retry delay after errors.
	// Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
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
	case len(c.Indices) == 0:
		return errors.New("relay config: no Indices: name at least one index with --index")
	case c.PollInterval < 0:
		return fmt.Errorf("relay config: PollInterval = %s: want > 0", c.PollInterval)
	case c.BatchSize < 0 || c.BatchSize > 10000:
		return fmt.Errorf("relay config: BatchSize = %d: want 1..10000 (index.max_result_window)", c.BatchSize)
	case c.From != "" && c.From != FromBeginning && c.From != FromNow:
		return fmt.Errorf("relay config: From = %q: want %q or %q", c.From, FromBeginning, FromNow)
	case c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MaxBackoff > 0 && c.MaxBackoff < c.MinBackoff):
		return fmt.Errorf("relay config: backoff %s..%s is not a range", c.MinBackoff, c.MaxBackoff)
	}
	seen := map[string]bool{}
	for _, ix := range c.Indices {
		if ix == "" {
			return errors.New("relay config: an index name is empty")
		}
		if seen[ix] {
			return fmt.Errorf("relay config: index %q is named twice", ix)
		}
		seen[ix] = true
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
	return c
}

// Relay turns shard sequence numbers into stream entries. Run it once.
type Relay struct {
	cfg Config
	log *slog.Logger
}

// New returns a Relay.
func New(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Relay{cfg: cfg, log: cfg.Logger}, nil
}

// Run follows the indices until ctx ends. It waits as a standby while
// another relay holds the lease, leads while it holds it, and goes back to
// standby if it loses it. On cancellation it lets a commit in flight finish,
// releases the lease and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	for {
		if err := r.acquire(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err := r.lead(ctx)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := r.cfg.Lease.Release(rctx); rerr != nil {
				r.log.Warn("could not release the lease; a standby takes over when it expires", logErr, rerr)
			} else {
				r.log.Info("released the lease")
			}
			cancel()
			return nil
		}
		if errors.Is(err, redisx.ErrLeaseLost) {
			r.log.Warn("lost the lease: another relay owns the feed; waiting as standby", logErr, err)
			continue
		}
		return err
	}
}

// acquire waits for the lease, retrying Redis errors with backoff.
func (r *Relay) acquire(ctx context.Context) error {
	b := r.newBackoff()
	for {
		err := r.cfg.Lease.Acquire(ctx, func(holder string) {
			r.log.Info("another relay holds the lease; waiting as standby", logHolder, holder)
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
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.cfg.Lease.Keep(ctx); err != nil {
			cancel(err)
		}
	}()
	for _, name := range r.cfg.Indices {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			if err := r.follow(ctx, name); err != nil {
				cancel(err)
			}
		}(name)
	}
	<-ctx.Done()
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return ctx.Err()
}

// cursor is what an index loop knows of its index.
type cursor struct {
	loaded bool
	stored map[checkpoint.ShardID]int64 // checkpoints as last loaded
	known  map[string]bool              // index uuids recorded in the indices hash
	seen   bool                         // an index of this name was adopted by this process
	told   string                       // the uuid last announced in the log

	uuid string
	cps  map[int]int64 // shard -> checkpoint of uuid; absent: never read
}

// follow runs rounds on one index until ctx ends. Errors are retried with
// backoff; after any error the cursor is reloaded from Redis, because a
// failed commit may have been written.
func (r *Relay) follow(ctx context.Context, name string) error {
	log := r.log.With(logIndex, name)
	b := r.newBackoff()
	var cur cursor
	for {
		progressed, err := r.round(ctx, name, &cur)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, redisx.ErrLeaseLost) {
			return err
		}
		if err != nil {
			cur.loaded = false
			d := b.next()
			b.report(log, "round failed; retrying", err, d)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		b.recovered(log)
		if !progressed && !sleep(ctx, r.cfg.PollInterval) {
			return nil
		}
	}
}

// round reads every shard whose global checkpoint moved past its checkpoint.
// It reports whether anything was committed.
func (r *Relay) round(ctx context.Context, name string, cur *cursor) (bool, error) {
	if !cur.loaded {
		if err := r.load(ctx, cur); err != nil {
			return false, err
		}
	}
	stats, err := r.cfg.ES.Stats(ctx, []string{name})
	if err != nil {
		return false, err
	}
	st, ok := stats[name]
	if !ok {
		return false, fmt.Errorf("stats of %s do not list the index", name)
	}
	if st.UUID != cur.uuid {
		if err := r.adopt(ctx, name, st, cur); err != nil {
			return false, err
		}
	}
	type work struct{ shard, cp, gcp int64 }
	var todo []work
	for _, sc := range st.Shards {
		cp, ok := cur.cps[sc.Shard]
		if !ok {
			cp = -1
		}
		if sc.GlobalCheckpoint > cp {
			todo = append(todo, work{int64(sc.Shard), cp, sc.GlobalCheckpoint})
		}
	}
	if len(todo) == 0 {
		return false, nil
	}
	// After the refresh every op <= gcp is searchable on every copy, so
	// preference=_shards:N may be served by a replica.
	if err := r.cfg.ES.Refresh(ctx, name); err != nil {
		return false, err
	}
	for _, w := range todo {
		if err := r.readShard(ctx, name, cur, int(w.shard), w.cp, w.gcp); err != nil {
			return true, err
		}
	}
	return true, nil
}

// load reads the stored checkpoints and known indices. The index's uuid is
// adopted again by the next round.
func (r *Relay) load(ctx context.Context, cur *cursor) error {
	state, err := r.cfg.Store.Load(ctx)
	if err != nil {
		return err
	}
	cur.loaded, cur.uuid, cur.cps = true, "", nil
	cur.stored = state.Checkpoints
	cur.known = make(map[string]bool, len(state.Indices))
	for uuid := range state.Indices {
		cur.known[uuid] = true
	}
	return nil
}

// adopt makes st's uuid the index followed: its stored checkpoints become
// the cursor. An index seen for the first time is checked (sequence numbers
// must be enabled) and recorded; with From=now, shards without a checkpoint
// that exist when the relay starts begin at the current global checkpoint,
// while an index created later (a new uuid for the name) starts from its
// beginning.
func (r *Relay) adopt(ctx context.Context, name string, st es.IndexStats, cur *cursor) error {
	settings, err := r.cfg.ES.Settings(ctx, name)
	if err != nil {
		return err
	}
	if settings.SequenceNumbersDisabled {
		return fmt.Errorf("index %s has sequence numbers disabled (index.disable_sequence_numbers: true): a change feed cannot follow it", name)
	}
	if settings.UUID != "" && settings.UUID != st.UUID {
		return fmt.Errorf("index %s changed while being read (uuid %s, then %s)", name, st.UUID, settings.UUID)
	}
	if cur.told != "" && cur.told != st.UUID {
		r.log.Warn("index was re-created: following the new index from its beginning", logIndex, name, "old_uuid", cur.told, logUUID, st.UUID)
	}
	cps := map[int]int64{}
	for id, cp := range cur.stored {
		if id.IndexUUID == st.UUID {
			cps[id.Shard] = cp
		}
	}
	batch := checkpoint.Batch{Checkpoints: map[checkpoint.ShardID]int64{}}
	if !cur.known[st.UUID] {
		batch.Indices = map[string]checkpoint.IndexInfo{st.UUID: {Name: name, Target: name, Shards: settings.Shards, FirstSeen: time.Now().UTC()}}
	}
	if r.cfg.From == FromNow && !cur.seen {
		for _, sc := range st.Shards {
			if _, ok := cps[sc.Shard]; !ok {
				batch.Checkpoints[checkpoint.ShardID{IndexUUID: st.UUID, Shard: sc.Shard}] = sc.GlobalCheckpoint
			}
		}
	}
	if err := r.commit(ctx, batch); err != nil {
		return err
	}
	for id, cp := range batch.Checkpoints {
		cps[id.Shard] = cp
		cur.stored[id] = cp
	}
	cur.known[st.UUID] = true
	cur.uuid, cur.cps, cur.seen = st.UUID, cps, true
	if cur.told != st.UUID {
		cur.told = st.UUID
		r.log.Info("following index", logIndex, name, logUUID, st.UUID, "shards", settings.Shards, "checkpoints", len(cps))
	}
	return nil
}

// readShard pages through (cp, gcp] of one shard, committing each page with
// its events, delivered ids and new checkpoint in one transaction. After the
// last page the checkpoint is the gcp even if no hit has that seq no:
// deletes, superseded versions and no-ops consume seq nos too.
func (r *Relay) readShard(ctx context.Context, name string, cur *cursor, shard int, cp, gcp int64) error {
	id := checkpoint.ShardID{IndexUUID: cur.uuid, Shard: shard}
	after := cp
	for {
		hits, err := r.cfg.ES.SearchShard(ctx, es.ShardPage{Index: name, Shard: shard, After: after, UpTo: gcp, Size: r.cfg.BatchSize})
		if err != nil {
			return err
		}
		next := gcp
		if len(hits) == r.cfg.BatchSize && hits[len(hits)-1].SeqNo < gcp {
			next = hits[len(hits)-1].SeqNo
		}
		batch := checkpoint.Batch{
			Events:      make([]redisx.Event, len(hits)),
			Checkpoints: map[checkpoint.ShardID]int64{id: next},
		}
		ids := make([]string, len(hits))
		for i, h := range hits {
			batch.Events[i] = upsertEvent(name, cur.uuid, shard, name, h)
			ids[i] = h.ID
		}
		if len(ids) > 0 {
			batch.Delivered = map[checkpoint.ShardID][]string{id: ids}
		}
		if err := r.commit(ctx, batch); err != nil {
			return err
		}
		cur.cps[shard] = next
		if len(hits) > 0 {
			r.log.Debug("committed", logIndex, name, logShard, shard, logEvents, len(hits), logCP, next, logGCP, gcp)
		}
		if next == gcp {
			return nil
		}
		after = next
	}
}

// upsertEvent maps a hit to its event: the document as the op with that seq
// no wrote it.
func upsertEvent(index, uuid string, shard int, target string, h es.Hit) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: index, IndexUUID: uuid, Shard: shard,
		ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm, Version: h.Version,
		Source: h.Source, Target: target}
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

// backoff is a capped exponential backoff with full jitter that logs once
// per change of error.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
	lastErr  string
	failing  bool
}

func (r *Relay) newBackoff() *backoff {
	return &backoff{min: r.cfg.MinBackoff, max: r.cfg.MaxBackoff}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur *= 2
		if b.cur > b.max {
			b.cur = b.max
		}
	}
	// Jitter in [cur/2, cur].
	return b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
}

// report logs err unless it is the same kind of error as the previous one.
func (b *backoff) report(log *slog.Logger, msg string, err error, d time.Duration) {
	key := errorKind(err)
	if key != b.lastErr {
		log.Warn(msg, logErr, err.Error(), logBackoff, d.Round(time.Millisecond).String())
		b.lastErr = key
	}
	b.failing = true
}

func (b *backoff) recovered(log *slog.Logger) {
	if b.failing {
		log.Info("recovered")
	}
	b.failing, b.cur, b.lastErr = false, 0, ""
}

// errorKind groups errors for "log once per state change": the same ES
// status and type, or the same message otherwise.
func errorKind(err error) string {
	var ee *es.Error
	if errors.As(err, &ee) {
		return fmt.Sprintf("es:%s:%d:%s", ee.Op, ee.Status, ee.Type)
	}
	return err.Error()
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
