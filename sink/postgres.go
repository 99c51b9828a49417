package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/internal/urlx"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// PostgresIndexDeleted is what the PostgreSQL sink does with an index's
// rows when the index ends (an index_deleted event).
type PostgresIndexDeleted string

// The PostgreSQL sink's answers to index_deleted.
const (
	// PostgresDeleteRows deletes the index's rows (those of its
	// index_uuid); the table stays, with the indices you added.
	PostgresDeleteRows PostgresIndexDeleted = "delete"
	// PostgresDropTable drops the index's table, unless it holds rows of
	// a newer index of the name (a template without {index_uuid}, an index
	// created again): then it deletes the index's rows.
	PostgresDropTable PostgresIndexDeleted = "drop"
	// PostgresKeepRows leaves the rows.
	PostgresKeepRows PostgresIndexDeleted = "keep"
)

// Defaults of PostgresConfig.
const (
	DefaultPostgresTable        = "escf_{index}"
	DefaultPostgresSchema       = "public"
	DefaultPostgresIndexDeleted = PostgresDeleteRows
	DefaultPostgresMaxBatch     = 1000
)

var _ Sink = (*Postgres)(nil)

// PostgresConfig configures a PostgreSQL sink.
type PostgresConfig struct {
	// Pool is the database; the sink never closes it. Set Pool or URL.
	Pool *pgxpool.Pool
	// URL is the database as libpq names it (postgres://user@host/db?
	// sslmode=verify-full, or "host=… dbname=…"; the PG* environment
	// variables fill what it leaves out), when Pool is nil; the sink opens
	// a pool and Close closes it.
	URL string
	// Password, when not "", replaces the URL's password.
	Password string
	// Schema holds the tables: the documents' and the sink's own
	// (escf__indices, escf__tombstones, escf__applied,
	// escf__applied_slots). It must exist.
	// Default "public".
	Schema string
	// Table names the table of an event's index. Placeholders: {index}
	// (the source index name) and {index_uuid}. The name is made safe
	// (PostgresTableName): every character but a letter, a digit or '_'
	// becomes '_', and a name over 63 bytes is cut and ends with a hash of
	// the whole. Default "escf_{index}".
	Table string
	// Redis is the feed's Redis: the sink reads each index uuid's
	// generation from Keys.Generations() there (a re-created index orders
	// after the old one). Required. The sink does not close it.
	Redis redis.UniversalClient
	// Keys are the feed's key names (redisx.NewKeys(feed)). Required.
	Keys redisx.Keys
	// IndexDeleted is what an index_deleted event does to the index's
	// rows. Default PostgresDeleteRows.
	IndexDeleted PostgresIndexDeleted
	// TombstoneKeep is how long the sink remembers a delete (a row of
	// escf__tombstones), so that an older upsert applied later (a
	// reclaimed pending entry, a stalled consumer) cannot bring the row
	// back. The sink purges older ones about every TombstoneKeep/24.
	// Default idempotency.DefaultTombstoneKeep (24h).
	TombstoneKeep time.Duration
	// MaxBatch is the most events one transaction applies. Default 1000.
	MaxBatch int
	// RetryBackoff and MaxRetryBackoff bound the pauses between attempts
	// while PostgreSQL cannot be reached. Defaults 100ms and 5s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// Logger receives outages and refused batches. Default slog.Default().
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c PostgresConfig) Validate() error {
	_, _, err := c.resolve()
	return err
}

// resolve validates the config and returns it with the defaults filled in
// and its parsed table template.
func (c PostgresConfig) resolve() (PostgresConfig, pgTemplate, error) {
	switch {
	case c.Pool == nil && c.URL == "":
		return c, nil, errors.New("postgres sink config: set Pool or URL")
	case c.Pool != nil && c.URL != "":
		return c, nil, errors.New("postgres sink config: set Pool or URL, not both")
	case c.Pool != nil && c.Password != "":
		return c, nil, errors.New("postgres sink config: Password is only used with URL")
	case c.Redis == nil:
		return c, nil, errors.New("postgres sink config: Redis is nil: pass the feed's Redis client (index generations are read from it)")
	case c.Keys.Feed() == "":
		return c, nil, errors.New("postgres sink config: Keys is empty: pass redisx.NewKeys(feed)")
	case c.TombstoneKeep < 0:
		return c, nil, fmt.Errorf("postgres sink config: TombstoneKeep = %s: want > 0 (0 means %s)", c.TombstoneKeep, idempotency.DefaultTombstoneKeep)
	case c.MaxBatch < 0:
		return c, nil, fmt.Errorf("postgres sink config: MaxBatch = %d: want >= 0 (0 means %d)", c.MaxBatch, DefaultPostgresMaxBatch)
	case c.RetryBackoff < 0 || c.MaxRetryBackoff < 0:
		return c, nil, fmt.Errorf("postgres sink config: RetryBackoff = %s, MaxRetryBackoff = %s: want >= 0", c.RetryBackoff, c.MaxRetryBackoff)
	}
	if c.URL != "" {
		if _, err := pgxpool.ParseConfig(c.URL); err != nil {
			return c, nil, fmt.Errorf("postgres sink config: URL %s: %w", urlx.RedactConn(c.URL), err)
		}
	}
	if c.Schema == "" {
		c.Schema = DefaultPostgresSchema
	}
	if c.Table == "" {
		c.Table = DefaultPostgresTable
	}
	tmpl, err := parsePgTemplate(c.Table)
	if err != nil {
		return c, nil, fmt.Errorf("postgres sink config: %w", err)
	}
	switch c.IndexDeleted {
	case "":
		c.IndexDeleted = DefaultPostgresIndexDeleted
	case PostgresDeleteRows, PostgresDropTable, PostgresKeepRows:
	default:
		return c, nil, fmt.Errorf("postgres sink config: IndexDeleted %q: want %q, %q or %q", c.IndexDeleted, PostgresDeleteRows, PostgresDropTable, PostgresKeepRows)
	}
	if c.TombstoneKeep == 0 {
		c.TombstoneKeep = idempotency.DefaultTombstoneKeep
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultPostgresMaxBatch
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, tmpl, nil
}

// PostgresStats are a PostgreSQL sink's counters since it was created.
type PostgresStats struct {
	// Transactions is the number of batches committed; Events the document
	// events they carried (applied, or refused by a fence: an older or
	// repeated event, one of an ended index).
	Transactions, Events int64
	// Refused counts events PostgreSQL refused (dead-lettered: a source
	// jsonb cannot hold).
	Refused int64
	// Retries counts attempts of a batch that failed for a reason worth
	// retrying (PostgreSQL unreachable, restarting, a deadlock).
	Retries int64
}

// Postgres keeps one PostgreSQL table per source index (Table) equal to
// the index: one row per document, keyed by (id, routing),
//
//	id text, routing text ('' for none), source jsonb, seq_no bigint,
//	primary_term bigint, version bigint, index_uuid text, shard int,
//	updated_at timestamptz
//
// Exactly once: events are applied in batches, each ONE transaction that
// upserts and deletes rows only where the event orders after what the table
// holds, so a redelivered, repeated or reordered event changes nothing.
// The order of a document is its index's generation (from the feed's
// Redis: a re-created index orders after the old one), then 2·seq_no, +1
// for a delete — the row's own index_uuid and seq_no are its fence. A
// delete also leaves a tombstone (escf__tombstones: table, id, routing,
// index_uuid, seq_no), in the same transaction, so that an older upsert
// applied after it cannot bring the row back; tombstones older than
// TombstoneKeep are purged. Each batch first takes a transaction-scoped
// advisory lock per table it writes, so that the transactions of several
// consumers on one table run one after the other and each sees what the
// one before it committed (without it, an older upsert could insert a row
// whose delete a concurrent transaction had not committed yet).
//
// Tables are created on first use (CREATE TABLE IF NOT EXISTS, primary key
// (id, routing)); an existing table is checked: a column missing, of
// another type, or one the sink does not know (generated columns are
// allowed: they derive from source) is an error naming them, as is a
// missing unique index on (id, routing). Each index uuid's generation and
// whether it ended are kept in escf__indices.
//
// Event mapping: upsert and delete as above; index_deleted marks the
// index ended (its late events are refused) and deletes its rows, drops
// its table or keeps them (IndexDeleted); snapshot markers are acknowledged
// without a write. Reconciler lists the rows of an index for a bootstrap's
// reconciliation; Positions records the applied stream position in
// escf__applied, and each batch's transaction records, with its rows, the
// entries it applied in escf__applied_slots (see Applied and Advance).
//
// Outcomes: a handler returns nil once its event's batch committed (or the
// event was refused by a fence). While PostgreSQL cannot be reached or
// restarts, the batch is retried with backoff until it commits or the
// handler's ctx ends (the event then stays pending: nothing is
// acknowledged that was not committed). An event PostgreSQL refuses — a
// source jsonb cannot hold, such as a string with \u0000 — is a
// redisx.Permanent error naming the reason (dead-lettered); the batch it
// was in is applied again without it, one event per transaction, so the
// others go through.
//
// Group commit: handlers from many lanes hand their events to one
// goroutine that applies everything pending (up to MaxBatch) in one
// transaction; a consumer's --workers bounds the batch (each lane has one
// event in flight).
type Postgres struct {
	cfg   PostgresConfig
	tmpl  pgTemplate
	pool  *pgxpool.Pool
	owned bool
	log   *slog.Logger
	sql   pgStatements
	gc    *groupCommit[*pgItem]
	gate  handlerGate

	closeOnce sync.Once

	// slot names this sink's rows in escf__applied_slots (see
	// postgres_positions.go).
	slot string

	mu         sync.Mutex
	stateReady bool
	gens       map[string]int64 // index uuid -> generation
	registered map[string]bool  // index uuid known to escf__indices
	tables     map[string]bool  // tables created or checked
	// slotTx is how many transactions the slot of each stream and group
	// held at this sink's last commit (as the commit returned it);
	// slotLost a loss of them a commit found, for Advance to report.
	slotTx   map[redisx.Delivery]int64
	slotLost map[redisx.Delivery]string

	// Of the flushing goroutine.
	outage    time.Time // first failure of the outage in progress
	lastPurge time.Time

	transactions, events, refused, retries atomic.Int64
	handlerOutage                          atomic.Bool // a handler's own statements are failing (retrying)
}

// pgItem is one document event waiting for its batch.
type pgItem struct {
	e     redisx.Event
	from  redisx.Delivery // the pool's stream and group; zero outside a pool
	gen   int64
	table string // unquoted name
	err   error  // set by the flush
}

// NewPostgres returns a running sink. With URL it opens a pool without
// connecting (the first handler call or Ping connects).
func NewPostgres(cfg PostgresConfig) (*Postgres, error) {
	cfg, tmpl, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	s := &Postgres{cfg: cfg, tmpl: tmpl, pool: cfg.Pool, log: cfg.Logger.With(logkey.Sink, "postgres"),
		gens: map[string]int64{}, registered: map[string]bool{}, tables: map[string]bool{},
		slot: pgSlotName(), slotTx: map[redisx.Delivery]int64{}, slotLost: map[redisx.Delivery]string{}}
	if s.pool == nil {
		pc, err := pgxpool.ParseConfig(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("postgres sink config: URL %s: %w", urlx.RedactConn(cfg.URL), err)
		}
		if cfg.Password != "" {
			pc.ConnConfig.Password = cfg.Password
		}
		if s.pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
			return nil, fmt.Errorf("postgres sink: %s: %w", urlx.RedactConn(cfg.URL), err)
		}
		s.owned = true
	}
	s.sql = newPgStatements(cfg.Schema)
	s.lastPurge = time.Now()
	s.gc = newGroupCommit(cfg.MaxBatch, 0, s.flush)
	return s, nil
}

// Ping checks that the database answers and that the sink may create its
// tables in Schema (creating them if missing).
func (s *Postgres) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	return s.ensureState(ctx)
}

// Stats returns the counters.
func (s *Postgres) Stats() PostgresStats {
	return PostgresStats{Transactions: s.transactions.Load(), Events: s.events.Load(), Refused: s.refused.Load(), Retries: s.retries.Load()}
}

// Handler returns the sink's handler (see Postgres for its outcomes). It
// may be called concurrently.
func (s *Postgres) Handler() redisx.Handler { return s.handle }

func (s *Postgres) handle(ctx context.Context, e redisx.Event) error {
	if !s.gate.enter() {
		return fmt.Errorf("postgres sink: %w", ErrClosed)
	}
	defer s.gate.leave()
	switch e.Op {
	case redisx.OpUpsert, redisx.OpDelete:
	case redisx.OpIndexDeleted:
		if e.IndexUUID == "" || e.Index == "" {
			return nil
		}
		if err := s.retrying(ctx, func() error { return s.endIndex(ctx, e) }); err != nil {
			return fmt.Errorf("postgres sink: %s %s: %w", e.Op, e.Index, err)
		}
		return nil
	case redisx.OpSnapshotStart, redisx.OpSnapshotEnd:
		return nil
	default:
		return redisx.Permanent(fmt.Errorf("postgres sink: event %s: unknown op %q", e.StreamID, e.Op))
	}
	wrap := func(err error) error {
		return fmt.Errorf("postgres sink: %s of %s/%s (event %s): %w", e.Op, e.Index, e.ID, e.StreamID, err)
	}
	it, err := s.prepare(ctx, e)
	if err != nil {
		return wrap(err)
	}
	if it == nil {
		return nil
	}
	it.from, _ = redisx.DeliveryOf(ctx)
	if err := s.gc.submit(ctx, it); err != nil {
		return wrap(err)
	}
	if it.err != nil {
		return wrap(it.err)
	}
	return nil
}

// prepare checks an event, finds its generation and its table, and makes
// sure the table exists. It returns nil, nil for an event of an index that
// ended (refused: done).
func (s *Postgres) prepare(ctx context.Context, e redisx.Event) (*pgItem, error) {
	if e.Index == "" || e.IndexUUID == "" || e.ID == "" {
		return nil, redisx.Permanent(fmt.Errorf("event without index, index_uuid or id (index %q, index_uuid %q, id %q)", e.Index, e.IndexUUID, e.ID))
	}
	if e.SeqNo < 0 {
		return nil, redisx.Permanent(fmt.Errorf("seq_no %d: want >= 0", e.SeqNo))
	}
	if e.Op == redisx.OpUpsert {
		if err := jsonbValid(e.Source); err != nil {
			s.refused.Add(1)
			return nil, redisx.Permanent(err)
		}
	}
	gen, err := s.generation(ctx, e.IndexUUID)
	if err != nil {
		return nil, err
	}
	table, err := s.tableOf(e.Index, e.IndexUUID)
	if err != nil {
		return nil, redisx.Permanent(err)
	}
	var ended bool
	err = s.retrying(ctx, func() error {
		var err error
		ended, err = s.ensureTable(ctx, table, e.Index, e.IndexUUID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ended {
		return nil, nil
	}
	return &pgItem{e: e, gen: gen, table: table}, nil
}

// jsonbValid refuses what a jsonb column cannot hold and json.Valid
// accepts: the escape \u0000 in a string (PostgreSQL's text cannot hold
// U+0000). Other refusals (a number out of jsonb's range, a lone surrogate
// escape) are PostgreSQL's to say; the batch is then applied event by
// event.
func jsonbValid(src json.RawMessage) error {
	if len(src) == 0 {
		return errors.New("upsert without a source")
	}
	if !json.Valid(src) {
		return errors.New("source is not JSON")
	}
	for i := 0; i+6 <= len(src); i++ {
		if src[i] != '\\' {
			continue
		}
		if string(src[i:i+6]) == `\u0000` {
			return errors.New(`source holds the escape \u0000 in a string: PostgreSQL's jsonb cannot store U+0000`)
		}
		i++ // skip the escaped character: "\\u0000" is a backslash and text
	}
	return nil
}

// generation returns the generation of an index uuid, from the cache or
// the feed's Redis. A uuid's generation never changes.
func (s *Postgres) generation(ctx context.Context, uuid string) (int64, error) {
	s.mu.Lock()
	g, ok := s.gens[uuid]
	s.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := checkpoint.ReadGeneration(ctx, s.cfg.Redis, s.cfg.Keys, uuid)
	switch {
	case errors.Is(err, checkpoint.ErrBadGeneration):
		return 0, fmt.Errorf("%w: %w", ErrNoGeneration, err)
	case err != nil:
		return 0, err
	case g == 0:
		return 0, fmt.Errorf("%w: %s has no field %s (the relay writes it before the index's first event; is this the feed's Redis?)", ErrNoGeneration, s.cfg.Keys.Generations(), uuid)
	}
	s.mu.Lock()
	s.gens[uuid] = g
	s.mu.Unlock()
	return g, nil
}

// flush applies one batch (groupCommit's flush: one call at a time). Each
// item gets its own outcome in err; flush itself returns nil.
func (s *Postgres) flush(ctx context.Context, items []*pgItem) error {
	err := s.applyRetrying(ctx, latest(items), pgRecordOf(items))
	switch {
	case err == nil:
		s.events.Add(int64(len(items)))
		s.purgeDue(ctx)
	case pgRefused(err) && len(items) > 1:
		// One event PostgreSQL refuses must not fail the others: apply
		// each alone, in the order the handlers gave them.
		s.log.Warn("a batch was refused: applying its events one per transaction to find the ones at fault", logkey.Events, len(items), logkey.Error, err.Error())
		for _, it := range items {
			_ = s.flush(ctx, []*pgItem{it})
		}
	case pgRefused(err):
		s.refused.Add(1)
		items[0].err = redisx.Permanent(err)
	default:
		if pgUndefinedTable(err) {
			s.mu.Lock()
			clear(s.tables)
			s.mu.Unlock()
		}
		for _, it := range items {
			it.err = err
		}
	}
	return nil
}

// latest keeps, of the items of one document (table, id, routing), the
// one that orders last: a statement may touch a row once. The others are
// superseded by it (nil outcome once it committed).
func latest(items []*pgItem) []*pgItem {
	type key struct{ table, id, routing string }
	idx := make(map[key]int, len(items))
	out := make([]*pgItem, 0, len(items))
	for _, it := range items {
		k := key{it.table, it.e.ID, it.e.Routing}
		if i, ok := idx[k]; ok {
			if pgOrderLess(out[i], it) {
				out[i] = it
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, it)
	}
	return out
}

// pgOrderLess compares two events of one document: generation, then
// 2·seq_no (+1 for a delete).
func pgOrderLess(a, b *pgItem) bool {
	if a.gen != b.gen {
		return a.gen < b.gen
	}
	return pgOrder(a.e) < pgOrder(b.e)
}

func pgOrder(e redisx.Event) int64 {
	o := 2 * e.SeqNo
	if e.Op == redisx.OpDelete {
		o++
	}
	return o
}

// applyRetrying applies a batch in one transaction, with the record of
// what it applied, again and again while the failure is worth retrying
// (PostgreSQL unreachable or restarting, a deadlock), until it commits or
// ctx ends.
func (s *Postgres) applyRetrying(ctx context.Context, items []*pgItem, rec []pgApplied) error {
	bo := backoff.Backoff{Min: s.cfg.RetryBackoff, Max: s.cfg.MaxRetryBackoff}
	for {
		err := s.apply(ctx, items, rec)
		if err == nil {
			if !s.outage.IsZero() {
				s.log.Info("PostgreSQL answers again: applying", logkey.FailingFor, time.Since(s.outage).Round(time.Millisecond).String())
				s.outage = time.Time{}
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (applying %d events: %v)", ctx.Err(), len(items), err)
		}
		if !pgTransient(err) {
			return err
		}
		s.retries.Add(1)
		d := bo.Next()
		if s.outage.IsZero() {
			s.outage = time.Now()
			s.log.Warn("cannot apply a batch; retrying until PostgreSQL answers (its events stay pending meanwhile)",
				logkey.Events, len(items), logkey.Error, err.Error(), logkey.RetryIn, d.String())
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (applying %d events: %v)", ctx.Err(), len(items), err)
		case <-t.C:
		}
	}
}

// retrying runs fn, a handler's own statements (creating or checking a
// table, ending an index), again and again with backoff while it fails for
// a reason worth retrying (pgTransient), until it succeeds, fails for
// another reason, or ctx ends: a handler's error would count as a delivery
// of its event, and an outage longer than the consumer's retries would
// dead-letter (acknowledge) an event that was never applied. The first
// failure of an outage is logged once for all handlers.
func (s *Postgres) retrying(ctx context.Context, fn func() error) error {
	bo := backoff.Backoff{Min: s.cfg.RetryBackoff, Max: s.cfg.MaxRetryBackoff}
	for {
		err := fn()
		if err == nil {
			if s.handlerOutage.CompareAndSwap(true, false) {
				s.log.Info("PostgreSQL answers the handlers again")
			}
			return nil
		}
		if redisx.IsPermanent(err) || !pgTransient(err) || ctx.Err() != nil {
			return err
		}
		s.retries.Add(1)
		d := bo.Next()
		if s.handlerOutage.CompareAndSwap(false, true) {
			s.log.Warn("cannot create or check a table; retrying until PostgreSQL answers (the events stay pending meanwhile)",
				logkey.Error, err.Error(), logkey.RetryIn, d.String())
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// apply runs one batch as one transaction: the table locks, the index
// uuids it introduces, per table the tombstones and deletes of its delete
// events and the upsert of its upserts, then the record of the entries it
// applied (rec, in this sink's slot of escf__applied_slots).
func (s *Postgres) apply(ctx context.Context, items []*pgItem, rec []pgApplied) error {
	if err := s.ensureState(ctx); err != nil {
		return err
	}
	byTable := map[string][]*pgItem{}
	var tables []string
	var newUUIDs []*pgItem
	seen := map[string]bool{}
	s.mu.Lock()
	for _, it := range items {
		if _, ok := byTable[it.table]; !ok {
			tables = append(tables, it.table)
		}
		byTable[it.table] = append(byTable[it.table], it)
		if !s.registered[it.e.IndexUUID] && !seen[it.e.IndexUUID] {
			seen[it.e.IndexUUID] = true
			newUUIDs = append(newUUIDs, it)
		}
	}
	s.mu.Unlock()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	for _, k := range pgLockKeys(s.cfg.Schema, tables) {
		b.Queue(s.sql.lock, k)
	}
	for _, it := range newUUIDs {
		b.Queue(s.sql.register, it.e.IndexUUID, it.e.Index, it.table, it.gen)
	}
	for _, table := range tables {
		s.queueTable(b, table, byTable[table])
	}
	held := s.queueRecord(b, rec)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.committed(*held)
	s.transactions.Add(1)
	s.mu.Lock()
	for _, it := range newUUIDs {
		s.registered[it.e.IndexUUID] = true
	}
	s.mu.Unlock()
	return nil
}

// queueTable queues the statements of one table's events: tombstones,
// then deletes, then upserts (each event already the latest of its
// document in the batch).
func (s *Postgres) queueTable(b *pgx.Batch, table string, items []*pgItem) {
	var d pgDeletes
	var u pgUpserts
	for _, it := range items {
		e := it.e
		if e.Op == redisx.OpDelete {
			d.id = append(d.id, e.ID)
			d.routing = append(d.routing, e.Routing)
			d.seqNo = append(d.seqNo, e.SeqNo)
			d.uuid = append(d.uuid, e.IndexUUID)
			continue
		}
		u.id = append(u.id, e.ID)
		u.routing = append(u.routing, e.Routing)
		u.source = append(u.source, e.Source)
		u.seqNo = append(u.seqNo, e.SeqNo)
		u.term = append(u.term, e.PrimaryTerm)
		u.version = append(u.version, e.Version)
		u.uuid = append(u.uuid, e.IndexUUID)
		u.shard = append(u.shard, int32(e.Shard))
	}
	q := pgQualified(s.cfg.Schema, table)
	if len(d.id) > 0 {
		b.Queue(s.sql.tombstones, table, d.id, d.routing, d.seqNo, d.uuid)
		b.Queue(fmt.Sprintf(s.sql.deleteRows, q), d.id, d.routing, d.seqNo, d.uuid)
	}
	if len(u.id) > 0 {
		b.Queue(fmt.Sprintf(s.sql.upsert, q), table, u.id, u.routing, u.source, u.seqNo, u.term, u.version, u.uuid, u.shard)
	}
}

// pgDeletes and pgUpserts are a table's events of a batch as columns
// (each an array parameter of one statement).
type pgDeletes struct {
	id, routing, uuid []string
	seqNo             []int64
}

type pgUpserts struct {
	id, routing, uuid    []string
	source               []json.RawMessage
	seqNo, term, version []int64
	shard                []int32
}

// pgTransient reports whether a failure is worth retrying as it is, for
// as long as it lasts: the connection (refused, reset, closed, timed out,
// TLS), PostgreSQL shutting down, starting up or out of connections, a
// deadlock or a serialization failure, and the failures an operator fixes
// without losing data — a password that changed, a privilege missing.
// Retrying holds the events pending (logged once per outage) rather than
// dead-letter them.
func pgTransient(err error) bool {
	if pgRefused(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // not PostgreSQL's answer: the connection failed
	}
	switch pe.Code[:2] {
	case "08", "28", "40", "53", "57", "58":
		return true
	}
	switch pe.Code {
	case "42501", "55P03", "55006":
		return true
	}
	return false
}

// pgRefused reports whether PostgreSQL refused the data (a data exception,
// a program limit such as a value too large): not worth retrying as it is.
func pgRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code[:2] == "22" || pe.Code[:2] == "54")
}

// pgUndefinedTable reports a table dropped under the sink (by hand, or by
// another consumer's index_deleted): the sink forgets the tables it
// checked, so that the next attempt creates it again.
func pgUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// Close stops taking events (handlers then return ErrClosed), applies the
// batch being formed and waits for the transaction in flight; then closes
// the pool if the sink opened it (from URL). When ctx ends first it
// cancels the transaction (its events stay pending) and returns ctx's
// error. Close is idempotent.
func (s *Postgres) Close(ctx context.Context) error {
	err := s.gate.close(ctx)
	if cerr := s.gc.close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if s.owned {
		s.closeOnce.Do(s.pool.Close)
	}
	if err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	return nil
}
