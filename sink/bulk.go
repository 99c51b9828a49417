package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Defaults of BulkConfig.
const (
	DefaultBulkIndexTemplate  = "{index}"
	DefaultBulkPositionsIndex = "escf-applied"
	DefaultBulkMaxBatch       = 500
	DefaultBulkMaxWait        = 5 * time.Millisecond
	DefaultBulkMaxBytes       = 5 << 20
)

// The layout of the external versions the bulk sink writes (see BulkVersion).
const (
	// BulkMaxSeqNo is the highest seq no an external version can carry.
	BulkMaxSeqNo = 1<<40 - 1
	// BulkMaxGeneration is the highest index generation an external version
	// can carry.
	BulkMaxGeneration = 1<<22 - 1
	bulkGenShift      = 41
)

// ErrNoGeneration marks an event whose index uuid has no generation in the
// feed's generations hash (retried: the relay writes it before any event of
// the uuid, so it is a lag or the wrong Redis).
var ErrNoGeneration = errors.New("no generation for the index uuid")

var _ Sink = (*Bulk)(nil)

// BulkConfig configures a Bulk sink.
type BulkConfig struct {
	// ES is the target cluster (it may be the source cluster, with an
	// IndexTemplate that names other indices). Required. The sink does not
	// close it.
	ES *es.Client
	// Redis is the feed's Redis; the sink reads Keys.Generations() and the
	// indices' layouts (Keys.Indices() of each partition) from it, and
	// keeps its delete tombstones there (BulkTombstonePrefix). Required.
	// The sink does not close it.
	Redis redis.UniversalClient
	// Keys are the feed's key names (redisx.NewKeys(feed)). Required.
	Keys redisx.Keys
	// Partitions is the feed's partition count (escf:{feed}:meta,
	// field partitions): an index's layout is read from the partition of
	// the event's shard. Default 1.
	Partitions int
	// TombstoneKeep is how long the sink remembers a delete, so that an
	// older upsert of the document applied later (a redelivery, a
	// reclaimed pending entry) cannot bring it back after the target
	// forgot the delete (index.gc_deletes, 60s by default). Default
	// idempotency.DefaultTombstoneKeep (24h).
	TombstoneKeep time.Duration
	// PositionsIndex is the target index where the sink records how far
	// it applied each stream for each group (redisx.Positions): one
	// document "<stream>|<group>" with fields lead and low, written before
	// the entries are handed on, durable when acknowledged. Default
	// "escf-applied" (DefaultBulkPositionsIndex).
	PositionsIndex string
	// IndexTemplate names the target index of an event. Placeholders:
	// {index} (the source index name) and {index_uuid} (lowercased: index
	// names are lowercase; not first: a uuid may start with '-' or '_').
	// Other text must be valid in an index name. Default "{index}".
	IndexTemplate string
	// MaxBatch is the most events one _bulk request carries. Default 500.
	MaxBatch int
	// MaxWait is how long the first event of a batch waits for others to
	// join it. Default 5ms.
	MaxWait time.Duration
	// MaxBytes sends a batch as soon as its body reaches this size (so it
	// exceeds it by at most one event). Default 5 MiB.
	MaxBytes int
	// Logger receives request failures. Default slog.Default().
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c BulkConfig) Validate() error {
	switch {
	case c.ES == nil:
		return errors.New("bulk sink config: ES is nil: pass the target cluster's *es.Client")
	case c.Redis == nil:
		return errors.New("bulk sink config: Redis is nil: pass the feed's Redis client (generations are read from it)")
	case c.Keys.Feed() == "":
		return errors.New("bulk sink config: Keys is empty: pass redisx.NewKeys(feed)")
	case c.MaxBatch < 0:
		return fmt.Errorf("bulk sink config: MaxBatch = %d: want >= 0 (0 means %d)", c.MaxBatch, DefaultBulkMaxBatch)
	case c.MaxWait < 0:
		return fmt.Errorf("bulk sink config: MaxWait = %s: want >= 0 (0 means %s)", c.MaxWait, DefaultBulkMaxWait)
	case c.MaxBytes < 0:
		return fmt.Errorf("bulk sink config: MaxBytes = %d: want >= 0 (0 means %d)", c.MaxBytes, DefaultBulkMaxBytes)
	case c.Partitions < 0 || c.Partitions > redisx.MaxPartitions:
		return fmt.Errorf("bulk sink config: Partitions = %d: want 1..%d (0 means 1)", c.Partitions, redisx.MaxPartitions)
	case c.TombstoneKeep < 0:
		return fmt.Errorf("bulk sink config: TombstoneKeep = %s: want > 0 (0 means %s)", c.TombstoneKeep, idempotency.DefaultTombstoneKeep)
	}
	if c.IndexTemplate != "" {
		if _, err := parseBulkTemplate(c.IndexTemplate); err != nil {
			return fmt.Errorf("bulk sink config: %w", err)
		}
	}
	return nil
}

// BulkStats are a Bulk sink's counters since it was created.
type BulkStats struct {
	// Requests is the number of _bulk requests sent.
	Requests int64
	// Applied counts events the target carried out: written, or a delete
	// that found nothing to delete.
	Applied int64
	// Conflicts counts events the target refused with a version conflict:
	// it already had this version or a newer one (a redelivery, or an older
	// event after a newer one). Their handler returns nil.
	Conflicts int64
	// Failed counts events whose handler returned an error (retryable or
	// permanent).
	Failed int64
}

// Bulk mirrors change events into an Elasticsearch or OpenSearch cluster
// with _bulk, each document written with an external version built from its
// index generation and seq no (BulkVersion), so that a redelivered event, or
// an older event applied after a newer one, is refused by the target as a
// version conflict and never overwrites newer data.
//
// Event mapping:
//   - upsert: an index action with the source, the event's routing if any,
//     version_type external, version BulkVersion(generation, seq_no, false);
//   - delete: a delete action with the routing, version_type external,
//     version BulkVersion(generation, seq_no, true);
//   - index_deleted, snapshot_start, snapshot_end: nothing (the handler
//     returns nil). The mirror keeps a deleted index's documents: the feed
//     carries no per-document deletes for them, and a re-created index of
//     the same name overwrites them document by document (its generation is
//     higher). Use {index_uuid} in IndexTemplate to keep generations apart,
//     and drop old target indices yourself.
//
// Group commit: the handler is safe for concurrent use (a Pool calls it from
// several lanes); events that arrive while a batch is forming or a request
// is in flight are sent together in the next _bulk request (up to MaxBatch
// events or MaxBytes, waiting at most MaxWait after the batch's first
// event). One request is in flight at a time. Each handler call blocks until
// its own item's outcome and returns it:
//
//   - nil: written; a 409 version conflict (already applied, or superseded);
//     a delete answered 404 (nothing to delete);
//   - a retryable error: a missing generation, a Redis error, an item
//     answered 429 or 5xx, or a failure of the whole request (connection,
//     timeout, 429, 5xx, 401/403, an odd answer): every event of the batch
//     gets it;
//   - redisx.Permanent: a malformed event (no index, uuid or id, a seq no
//     out of range, a source that is not JSON), an item refused with
//     another 4xx (a mapping error, an invalid index name), or an event
//     with custom routing whose target cannot place documents as its
//     source does (a *BulkLayoutError, below). A request refused as a
//     whole with 400 or 413 is sent again one event per request, so only
//     the events that cause it are refused permanently.
//
// Layout: two source documents are one when they share an _id and a shard,
// and the shard comes from the routing (or the _id) through the index's
// shard count, routing shards, routing partition size and its engine's
// routing function. A mirror whose target differs in any of them can
// merge two source documents (one _id under two routings) into one, or
// split one. So the relay records each index's layout in the feed
// (checkpoint.IndexLayout), and before the first write into a target the
// sink reads the target's layout (GET /_cluster/state/metadata/<target>,
// GET /<target>/_mapping); a target that does not exist it creates with the
// source's shards, routing shards, partition size and mappings. Events
// without custom routing are written whatever the target's layout: an _id
// alone names one document in any index. Events with routing are written
// only into a target that places (id, routing) pairs as the source does
// (samePlacement: one shard each, or the same shard count, routing shards,
// partition size and routing function); into any other, they are refused
// with a *BulkLayoutError naming both layouts and the fix. An index whose
// layout the feed does not have (recorded by an older relay, or forgotten
// after the index was deleted) is treated the same way: its events without
// routing go through (a missing target is then created by _bulk, as
// before), those with routing are refused (ErrNoLayout), unless the index
// and the target have one shard each; the sink warns once per index. A
// target is checked once per process (a target deleted and re-created by
// hand while the sink runs is not checked again; restart the consumer).
//
// Tombstones: a delete leaves a tombstone with its version in the target
// for index.gc_deletes (60s by default) only; an older upsert applied after
// that (a reclaimed pending entry of a consumer down longer than the
// pool's MinIdle, a process stalled for minutes) would bring the document
// back for good. So the sink records every delete in Redis, before writing
// it, as idempotency.Tombstones under BulkTombstonePrefix(feed, partition)
// (per index and a 24th of TombstoneKeep, 24h by default), and skips an
// upsert older than a recorded delete of its document (counted as a
// conflict: the target would have refused it while it had the tombstone).
// Rather than raise index.gc_deletes: the target keeps its tombstones in
// every shard copy's in-memory version map, for every index and whoever
// writes; the sink may not own or be allowed to change a target's
// settings; and the longest delay to cover (a bootstrap copy, a stalled
// consumer) is the feed's business, not the target's. The cost is one
// script per event (26 HGET for an upsert, HSET and PEXPIREAT for a
// delete) and Redis memory for the deletes of the last TombstoneKeep
// (docs/CONSUMING.md has the figures). If the tombstones are lost (Redis
// data loss, a DEL of the keys), protection falls back to the target's
// gc_deletes window; consume --bootstrap repairs a mirror that received a
// late upsert meanwhile.
//
// Who closes what: Close stops the sink; the ES and Redis clients stay open.
type Bulk struct {
	cfg  BulkConfig
	tmpl bulkTemplate
	log  *slog.Logger

	in        chan *bulkPending
	quit      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
	ctx       context.Context // of requests; canceled when Close gives up
	cancel    context.CancelFunc

	stores     []*checkpoint.Store       // per partition: the indices' records
	tombstones []*idempotency.Tombstones // per partition

	mu      sync.Mutex
	gens    map[string]int64       // index uuid -> generation
	sources map[string]*bulkSource // index uuid -> record
	targets map[string]*bulkTarget // target index name -> layout
	warned  map[string]bool

	posMu sync.Mutex
	pos   map[string]bulkPosition // "<stream>|<group>" -> as last read or written

	requests, applied, conflicts, failed atomic.Int64

	// joined, when not nil, is called by the batching goroutine each time
	// an event joins the batch being formed (a test's hook; set before the
	// first handler call).
	joined func()
}

// bulkPending is one event waiting for its item's outcome.
type bulkPending struct {
	lines []byte // action line and, for upserts, source line
	del   bool
	done  chan error
}

// NewBulk returns a running sink. Close it to stop its batching goroutine.
func NewBulk(cfg BulkConfig) (*Bulk, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.IndexTemplate == "" {
		cfg.IndexTemplate = DefaultBulkIndexTemplate
	}
	if cfg.PositionsIndex == "" {
		cfg.PositionsIndex = DefaultBulkPositionsIndex
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultBulkMaxBatch
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultBulkMaxWait
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultBulkMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tmpl, err := parseBulkTemplate(cfg.IndexTemplate)
	if err != nil {
		return nil, fmt.Errorf("bulk sink config: %w", err)
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.TombstoneKeep == 0 {
		cfg.TombstoneKeep = idempotency.DefaultTombstoneKeep
	}
	var stores []*checkpoint.Store
	var tombs []*idempotency.Tombstones
	for p, keys := range redisx.AllPartitionKeys(cfg.Keys.Feed(), cfg.Partitions) {
		st, err := checkpoint.New(checkpoint.Config{Client: cfg.Redis, Keys: keys})
		if err != nil {
			return nil, fmt.Errorf("bulk sink config: %w", err)
		}
		tb, err := idempotency.NewTombstones(idempotency.TombstonesConfig{Client: cfg.Redis,
			Prefix: BulkTombstonePrefix(cfg.Keys.Feed(), p, cfg.Partitions), Keep: cfg.TombstoneKeep})
		if err != nil {
			return nil, fmt.Errorf("bulk sink config: %w", err)
		}
		stores, tombs = append(stores, st), append(tombs, tb)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bulk{
		cfg: cfg, tmpl: tmpl, log: cfg.Logger.With(logkey.Sink, "bulk", logkey.Target, cfg.ES.URLs()),
		in: make(chan *bulkPending), quit: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel, gens: map[string]int64{}, pos: map[string]bulkPosition{},
		stores: stores, tombstones: tombs,
		sources: map[string]*bulkSource{}, targets: map[string]*bulkTarget{}, warned: map[string]bool{},
	}
	go b.run()
	return b, nil
}

// BulkTombstonePrefix is where the bulk sinks of a feed keep their delete
// tombstones (idempotency.TombstonesConfig.Prefix) for partition p of
// partitions: redisx.Keys.BulkTombstones of the partition, hashes
// "<prefix>:<index_uuid>:<bucket>". Every
// bulk sink of the feed shares them: a delete is a fact about the source,
// whatever the target.
func BulkTombstonePrefix(feed string, p, partitions int) string {
	return redisx.PartitionKeys(feed, p, partitions).BulkTombstones()
}

// Handler returns the sink's handler (see Bulk for its outcomes). It may be
// called concurrently.
func (b *Bulk) Handler() redisx.Handler { return b.handle }

// Stats returns the counters.
func (b *Bulk) Stats() BulkStats {
	return BulkStats{Requests: b.requests.Load(), Applied: b.applied.Load(), Conflicts: b.conflicts.Load(), Failed: b.failed.Load()}
}

// Close stops taking events (handlers then return ErrClosed), sends the
// batch being formed and waits for the request in flight. When ctx ends
// first, it cancels that request (its events get retryable errors) and
// returns ctx's error. Close is idempotent.
func (b *Bulk) Close(ctx context.Context) error {
	b.closeOnce.Do(func() { close(b.quit) })
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		b.cancel()
		<-b.done
		return ctx.Err()
	}
}

// BulkVersion is the external version of a document event:
//
//	generation<<41 | seq_no<<1 | deleted
//
// Within one index (one generation) a document's operations have rising seq
// nos, so newer events get higher versions and the target's version_type
// external check (current >= given: conflict) refuses redelivered and
// reordered older ones. A delete's seq no is the shard checkpoint at the
// scan that found it, at least the seq no of the document's last upsert; the
// low bit orders the delete after an upsert with the same seq no. A
// re-created index starts again at seq no 0 with the next generation, so its
// documents order after everything of the old index, old deletes included.
//
// The layout keeps the version positive (ES's versions are signed 64-bit):
// bits 1-40 hold the seq no (up to BulkMaxSeqNo, about 1.1e12 operations on
// one shard), bits 41-62 the generation (up to BulkMaxGeneration). Values out
// of range cannot be ordered and are an error.
func BulkVersion(generation, seqNo int64, deleted bool) (int64, error) {
	if seqNo < 0 || seqNo > BulkMaxSeqNo {
		return 0, fmt.Errorf("seq_no %d is outside 0..%d: the external version (generation<<41 | seq_no<<1 | delete) keeps 40 bits for it, "+
			"more would spill into the generation bits and misorder documents", seqNo, int64(BulkMaxSeqNo))
	}
	if generation < 1 || generation > BulkMaxGeneration {
		return 0, fmt.Errorf("generation %d is outside 1..%d: the external version keeps 22 bits for it", generation, int64(BulkMaxGeneration))
	}
	v := generation<<bulkGenShift | seqNo<<1
	if deleted {
		v |= 1
	}
	return v, nil
}

func (b *Bulk) handle(ctx context.Context, e redisx.Event) error {
	switch e.Op {
	case redisx.OpUpsert, redisx.OpDelete:
	case redisx.OpIndexDeleted, redisx.OpSnapshotStart, redisx.OpSnapshotEnd:
		return nil
	default:
		b.failed.Add(1)
		return redisx.Permanent(fmt.Errorf("bulk sink: event %s: unknown op %q", e.StreamID, e.Op))
	}
	err := b.apply(ctx, e)
	if err != nil {
		b.failed.Add(1)
	}
	return err
}

func (b *Bulk) apply(ctx context.Context, e redisx.Event) error {
	wrap := func(err error) error {
		return fmt.Errorf("mirror %s of %s/%s (event %s): %w", e.Op, e.Index, e.ID, e.StreamID, err)
	}
	p, err := b.prepare(ctx, e)
	if err != nil {
		return wrap(err)
	}
	tombs := b.tombstones[redisx.Partition(e.IndexUUID, e.Shard, len(b.tombstones))]
	switch e.Op {
	case redisx.OpDelete:
		// Before the write: once the target has the delete, so do the
		// tombstones.
		if err := tombs.Record(ctx, e); err != nil {
			return wrap(err)
		}
	case redisx.OpUpsert:
		deleted, err := tombs.Deleted(ctx, e)
		if err != nil {
			return wrap(err)
		}
		if deleted {
			b.conflicts.Add(1)
			return nil
		}
	}
	select {
	case b.in <- p:
	case <-b.quit:
		return wrap(ErrClosed)
	case <-ctx.Done():
		return wrap(ctx.Err())
	}
	select {
	case err := <-p.done:
		if err != nil {
			return wrap(err)
		}
		return nil
	case <-ctx.Done():
		return wrap(fmt.Errorf("waiting for the bulk answer: %w", ctx.Err()))
	}
}

// bulkMeta is an action line's metadata.
type bulkMeta struct {
	Index       string `json:"_index"`
	ID          string `json:"_id"`
	Routing     string `json:"routing,omitempty"`
	Version     int64  `json:"version"`
	VersionType string `json:"version_type"`
}

// prepare checks the event, finds its generation and encodes its lines.
func (b *Bulk) prepare(ctx context.Context, e redisx.Event) (*bulkPending, error) {
	if e.Index == "" || e.IndexUUID == "" || e.ID == "" {
		return nil, redisx.Permanent(fmt.Errorf("event without index, index_uuid or id (index %q, index_uuid %q, id %q)", e.Index, e.IndexUUID, e.ID))
	}
	if e.SeqNo < 0 || e.SeqNo > BulkMaxSeqNo {
		_, err := BulkVersion(1, e.SeqNo, false)
		return nil, redisx.Permanent(err)
	}
	var src bytes.Buffer
	if e.Op == redisx.OpUpsert {
		// NDJSON: the source must be on one line; a stored _source may
		// be pretty-printed.
		if err := json.Compact(&src, e.Source); err != nil {
			return nil, redisx.Permanent(fmt.Errorf("source is not JSON: %v", err))
		}
	}
	gen, err := b.generation(ctx, e.IndexUUID)
	if err != nil {
		return nil, err
	}
	version, err := BulkVersion(gen, e.SeqNo, e.Op == redisx.OpDelete)
	if err != nil {
		return nil, redisx.Permanent(err)
	}
	target := b.tmpl.expand(e)
	if err := b.checkLayout(ctx, e, target); err != nil {
		return nil, err
	}
	meta := bulkMeta{Index: target, ID: e.ID, Routing: e.Routing, Version: version, VersionType: "external"}
	action := "index"
	if e.Op == redisx.OpDelete {
		action = "delete"
	}
	line, err := json.Marshal(map[string]bulkMeta{action: meta})
	if err != nil {
		return nil, redisx.Permanent(err)
	}
	lines := make([]byte, 0, len(line)+src.Len()+2)
	lines = append(append(lines, line...), '\n')
	if e.Op == redisx.OpUpsert {
		lines = append(append(lines, src.Bytes()...), '\n')
	}
	return &bulkPending{lines: lines, del: e.Op == redisx.OpDelete, done: make(chan error, 1)}, nil
}

// generation returns the generation of an index uuid, from the cache or
// Keys.Generations(). A uuid's generation never changes.
func (b *Bulk) generation(ctx context.Context, uuid string) (int64, error) {
	b.mu.Lock()
	g, ok := b.gens[uuid]
	b.mu.Unlock()
	if ok {
		return g, nil
	}
	key := b.cfg.Keys.Generations()
	g, err := checkpoint.ReadGeneration(ctx, b.cfg.Redis, b.cfg.Keys, uuid)
	switch {
	case errors.Is(err, checkpoint.ErrBadGeneration):
		return 0, fmt.Errorf("%w: %w", ErrNoGeneration, err)
	case err != nil:
		return 0, err
	case g == 0:
		return 0, fmt.Errorf("%w: %s has no field %s (the relay writes it before the index's first event; is this the feed's Redis?)", ErrNoGeneration, key, uuid)
	}
	if g > BulkMaxGeneration {
		return 0, redisx.Permanent(fmt.Errorf("%s field %s = %d: above %d, the highest generation an external version can carry", key, uuid, g, int64(BulkMaxGeneration)))
	}
	b.mu.Lock()
	b.gens[uuid] = g
	b.mu.Unlock()
	return g, nil
}

// run forms batches and sends them, one request at a time, until Close.
func (b *Bulk) run() {
	defer close(b.done)
	defer b.cancel()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var first *bulkPending
		select {
		case first = <-b.in:
		case <-b.quit:
			return
		}
		b.noteJoined()
		batch := []*bulkPending{first}
		size := len(first.lines)
		timer.Reset(b.cfg.MaxWait)
	collect:
		for len(batch) < b.cfg.MaxBatch && size < b.cfg.MaxBytes {
			select {
			case p := <-b.in:
				batch = append(batch, p)
				size += len(p.lines)
				b.noteJoined()
			case <-timer.C:
				break collect
			case <-b.quit:
				break collect
			}
		}
		timer.Stop()
		b.flush(batch)
	}
}

func (b *Bulk) noteJoined() {
	if b.joined != nil {
		b.joined()
	}
}

// flush sends one batch and hands each event its outcome.
func (b *Bulk) flush(batch []*bulkPending) {
	body := make([]byte, 0, len(batch)*256)
	for _, p := range batch {
		body = append(body, p.lines...)
	}
	b.requests.Add(1)
	res, err := b.cfg.ES.Bulk(b.ctx, body)
	if err != nil {
		var ee *es.Error
		refused := !errors.As(err, &ee) || ee.Status == http.StatusBadRequest || ee.Status == http.StatusRequestEntityTooLarge
		switch {
		case refused && len(batch) > 1:
			b.log.Warn("bulk request refused as a whole: sending its events one by one to find the ones at fault", logkey.Events, len(batch), logkey.Error, err)
			for _, p := range batch {
				b.flush([]*bulkPending{p})
			}
		case refused:
			batch[0].done <- redisx.Permanent(err)
		default:
			b.log.Warn("bulk request failed: its events will be retried", logkey.Events, len(batch), logkey.Error, err)
			for _, p := range batch {
				p.done <- err
			}
		}
		return
	}
	for i, it := range res.Items {
		batch[i].done <- b.outcome(batch[i], it)
	}
}

// outcome maps one item to the handler's result.
func (b *Bulk) outcome(p *bulkPending, it es.BulkItem) error {
	switch {
	case it.Status/100 == 2 && it.ErrorType == "":
		b.applied.Add(1)
		return nil
	case it.Status == http.StatusConflict && it.ErrorType == "version_conflict_engine_exception":
		b.conflicts.Add(1)
		return nil
	case p.del && it.Status == http.StatusNotFound && (it.Result == "not_found" || it.ErrorType == "index_not_found_exception"):
		// Nothing to delete (with auto-creation disabled, not even the
		// index): the document is gone either way.
		b.applied.Add(1)
		return nil
	}
	err := it.Err()
	if err == nil { // a 404 not_found answering an index action, or a 1xx/3xx
		err = &es.Error{Op: fmt.Sprintf("bulk %s %s/%s", it.Action, it.Index, it.ID), Status: it.Status, Reason: "unexpected result " + strconv.Quote(it.Result)}
	}
	if it.Status == http.StatusTooManyRequests || it.Status >= 500 || it.Status < 400 || it.Status == http.StatusConflict {
		return err
	}
	return redisx.Permanent(err)
}

// bulkTemplate is a parsed IndexTemplate: literal text and placeholders.
type bulkTemplate []bulkTemplatePart

type bulkTemplatePart struct {
	literal     string
	placeholder string // "index" or "index_uuid" when literal is ""
}

// parseTemplate splits a name template into literal text and the
// placeholders {index} and {index_uuid}, naming every unknown placeholder
// and unbalanced brace in its error; field is the option's name there.
func parseTemplate(field, s string) ([]bulkTemplatePart, error) {
	var t []bulkTemplatePart
	var unknown []string
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if cl := strings.IndexByte(rest, '}'); cl >= 0 && (open < 0 || cl < open) {
			return nil, fmt.Errorf("%s %q: '}' without '{'", field, s)
		}
		if open < 0 {
			t = append(t, bulkTemplatePart{literal: rest})
			break
		}
		if open > 0 {
			t = append(t, bulkTemplatePart{literal: rest[:open]})
		}
		cl := strings.IndexByte(rest[open:], '}')
		if cl < 0 {
			return nil, fmt.Errorf("%s %q: '{' without '}'", field, s)
		}
		switch name := rest[open+1 : open+cl]; name {
		case "index", "index_uuid":
			t = append(t, bulkTemplatePart{placeholder: name})
		default:
			unknown = append(unknown, "{"+name+"}")
		}
		rest = rest[open+cl+1:]
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%s %q: unknown placeholder %s: use {index} or {index_uuid}", field, s, strings.Join(unknown, ", "))
	}
	return t, nil
}

// parseBulkTemplate parses an index template, naming every unknown
// placeholder in its error.
func parseBulkTemplate(s string) (bulkTemplate, error) {
	parts, err := parseTemplate("IndexTemplate", s)
	if err != nil {
		return nil, err
	}
	t := bulkTemplate(parts)
	for _, p := range t {
		if i := strings.IndexAny(p.literal, "ABCDEFGHIJKLMNOPQRSTUVWXYZ \\/*?\"<>|,#:"); i >= 0 {
			return nil, fmt.Errorf("IndexTemplate %q: %q cannot be part of an index name (lowercase letters, digits, '-', '_', '.', '+')", s, p.literal[i])
		}
		if !utf8.ValidString(p.literal) || strings.ToLower(p.literal) != p.literal {
			return nil, fmt.Errorf("IndexTemplate %q: %q cannot be part of an index name (index names are lowercase UTF-8)", s, p.literal)
		}
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("IndexTemplate is empty")
	}
	if len(t) == 1 && (t[0].literal == "." || t[0].literal == "..") {
		return nil, fmt.Errorf("IndexTemplate %q is not a valid index name", s)
	}
	if t[0].placeholder == "index_uuid" {
		return nil, fmt.Errorf("IndexTemplate %q: starts with {index_uuid}, which may begin with '-' or '_' (not allowed at the start of an index name): put it after the name, as in \"{index}-{index_uuid}\"", s)
	}
	if first := t[0].literal; first != "" && strings.ContainsAny(first[:1], "-_+") {
		return nil, fmt.Errorf("IndexTemplate %q: an index name cannot start with %q", s, first[:1])
	}
	return t, nil
}

func (t bulkTemplate) expand(e redisx.Event) string {
	if len(t) == 1 && t[0].placeholder == "index" {
		return e.Index
	}
	var b strings.Builder
	for _, p := range t {
		switch p.placeholder {
		case "index":
			b.WriteString(e.Index)
		case "index_uuid":
			// Index names are lowercase; uuids are base64 (mixed case).
			b.WriteString(strings.ToLower(e.IndexUUID))
		default:
			b.WriteString(p.literal)
		}
	}
	return b.String()
}
