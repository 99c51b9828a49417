package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// cursor is what an index loop knows of its index.
type cursor struct {
	target  string // the expression that matched the index
	fromNow bool   // shards without a checkpoint start at the gcp (first adoption only)
	loaded  bool
	state   checkpoint.State // as last loaded, kept up to date by this loop's commits
	seen    bool             // an index of this name was adopted by this process
	told    string           // the uuid last announced in the log
	gone    bool             // the index was deleted and its end emitted
	prog    *progress        // the initial read of a large index

	uuid      string
	cps       map[int]int64  // shard -> checkpoint of uuid; absent: never read
	gaps      map[int]int64  // shard -> gap counter
	origins   map[int]int64  // shard -> where reading began, when not -1
	histories map[int]string // shard -> history_uuid the feed read under

	refreshed int64 // the poll tick (statsBatcher.tick) of this loop's last forced refresh, +1; 0: none
	// beforeRefresh: each shard's primary as the stats read right before
	// this loop's last forced refresh showed it (the delete scan's
	// deletes.Shard.Refreshed).
	beforeRefresh map[int]es.ShardCheckpoints
	noPoints      bool // _seq_no has no points (es.IndexSettings.SeqNoDocValuesOnly)

	// pending holds, per shard, the last page of its window: searched, not
	// yet settled. The next round's stats settle it (settlePending) instead
	// of a stats request of its own; until then the shard is not read
	// again. Their hits count against Relay.hold.
	pending     map[int]*page
	readTo      map[int]bool // shards whose checkpoint this loop read up to (committed a window's last page)
	deferred    bool         // the last round left shards that moved for the next tick
	late        bool         // this round began to settle held pages, not on a tick
	settleTries int          // rounds that found pending pages unsettled in a row

	// mu guards cps, gaps, histories, state and prog while the round's
	// shards are read in parallel (readShards).
	mu sync.Mutex

	// ec is the round's client, pinned to one node (es.Client.Pin): the
	// round's stats, refresh, searches and settle checks all see that
	// node's view of the cluster.
	ec *es.Client
}

// follow runs rounds on one index until ctx ends or the index is gone.
// Errors are retried with backoff; after any error the cursor is reloaded
// from Redis, because a failed commit may have been written. A closed index
// is waited for. An index that cannot be followed returns ErrUnfollowable.
func (r *Relay) follow(ctx context.Context, name, target string, fromNow bool) error {
	log := r.log.With(logkey.Index, name)
	b := r.newBackoff()
	cur := cursor{target: target, fromNow: fromNow}
	defer cur.dropPending(r)
	onTick := false // this round is the one nextTick woke for
	for {
		if r.paused.Load() && len(cur.pending) == 0 {
			// Backpressure: the cluster keeps the changes; the cursor waits.
			if !sleep(ctx, r.cfg.PollInterval) {
				return nil
			}
			onTick = false
			continue
		}
		r.m.rounds.Inc()
		if onTick {
			r.stats.roundOnTick()
		}
		onTick = false
		note := r.roundNote()
		err := r.round(ctx, name, &cur)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, redisx.ErrLeaseLost) || errors.Is(err, ErrUnfollowable) || errors.Is(err, deletes.ErrOtherCluster) ||
			errors.Is(err, checkpoint.ErrRolledBack) || errors.Is(err, ErrHistoryReplaced) {
			// A rollback stops every index loop: the relay starts them again
			// on the state Redis holds now.
			return err
		}
		if cur.gone {
			return nil
		}
		if es.IsClosed(err) {
			r.sayClosed(name, target)
			if !sleep(ctx, r.cfg.PollInterval) {
				return nil
			}
			continue
		}
		if err == nil {
			r.sayOpen(name, note)
		}
		if err != nil && ctx.Err() != nil {
			return nil // stopping: a round cut short is no failure
		}
		if err != nil {
			r.m.countError(err)
			cur.loaded, cur.late = false, false // the retry reads again
			d := b.next()
			b.report(log, "round failed; retrying", err, d)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		if !cur.deferred {
			// Only a round that read what moved shows a failed read is over.
			b.recovered(log)
		}
		if len(cur.pending) > 0 {
			// Settle the pages at once with the next round's stats; if the
			// gcp is not there yet, look again a little later.
			if !sleep(ctx, settleDelay(cur.settleTries)) {
				return nil
			}
			cur.settleTries++
			cur.late = true
			continue
		}
		// Everything read is committed: the next round is the next poll
		// tick's (a refresh per index and tick at most).
		cur.settleTries = 0
		if !r.stats.nextTick(ctx) {
			return nil
		}
		cur.late, onTick = false, true
	}
}

// round settles the pages the previous round left pending, runs the delete
// scans that are due, then reads every shard whose global checkpoint moved
// past its checkpoint (at most once per poll tick).
func (r *Relay) round(ctx context.Context, name string, cur *cursor) error {
	if !cur.loaded {
		if err := r.load(ctx, cur); err != nil {
			return err
		}
	}
	stats, ec, err := r.stats.stats(ctx, name)
	if ec == nil {
		ec = r.cfg.ES.Pin()
	}
	cur.ec = ec // the node that answered the stats serves the whole round
	if es.IsNotFound(err) {
		return r.indexMissing(ctx, name, cur, err)
	}
	if err != nil {
		return err
	}
	st, ok := stats[name]
	if !ok {
		return fmt.Errorf("stats of %s do not list the index", name)
	}
	if st.UUID != cur.uuid {
		cur.dropPending(r)
		r.m.forgetIndex(name) // a new index of this name starts its series afresh
		// Every older index of this name ends before the new one begins,
		// so consumers keyed by name see its deletes before new upserts.
		if err := r.forgetOthers(ctx, name, st.UUID, cur); err != nil {
			return err
		}
		if err := r.adopt(ctx, name, st, cur); err != nil {
			return err
		}
	}
	type work struct {
		shard   int
		cp, gcp int64
		primary es.ShardCheckpoints // the primary the gcp was read from
	}
	if err := r.settlePending(ctx, name, st, cur); err != nil {
		return err
	}
	// Every shard without a pending page is read up to its checkpoint: its
	// delete scan, if due, runs now, before the shard is read further.
	if r.cfg.Deletes != nil {
		if err := r.scanDeletes(ctx, name, st, cur); err != nil {
			return err
		}
	}
	var todo []work
	for _, sc := range st.Shards {
		if !r.owns(st.UUID, sc.Shard) {
			continue // another partition's
		}
		if h := cur.histories[sc.Shard]; h != "" && sc.HistoryUUID != "" && h != sc.HistoryUUID {
			return fmt.Errorf("%w: shard %d of index %s has a new history (history_uuid %s, now %s): a copy that lacks acknowledged operations became its primary (allocate_stale_primary or allocate_empty_primary with accept_data_loss, or a snapshot restored into the index), so operations the feed delivered may be gone and their seq nos taken again by new ones, which the feed cannot tell apart: run `es-changefeed resync` to rebuild the feed from the documents as they are",
				ErrHistoryReplaced, sc.Shard, name, h, sc.HistoryUUID)
		}
		cp, ok := cur.cps[sc.Shard]
		if !ok {
			cp = -1
		}
		shard := strconv.Itoa(sc.Shard)
		r.m.gcp.WithLabelValues(name, shard).Set(float64(sc.GlobalCheckpoint))
		r.m.checkpoint.WithLabelValues(name, shard).Set(float64(cp))
		if _, held := cur.pending[sc.Shard]; sc.GlobalCheckpoint > cp && !held {
			todo = append(todo, work{sc.Shard, cp, sc.GlobalCheckpoint, sc})
		}
	}
	// At most one forced refresh of the index per poll tick: on a busy
	// index every round would find the gcp moved and force a refresh
	// (measured on a real OpenSearch 2.19 at ~1,500 writes/s: 544 refreshes
	// a minute, 13× the index's own). What moved since is read at the next
	// tick, with the other indices' (one refresh request between them).
	tick := r.stats.tick() + 1
	// Only a round that began on a tick reads (a round settling held pages
	// does not, even when a new tick began meanwhile): the indices' rounds
	// then refresh together, in one request.
	cur.deferred = len(todo) > 0 && (cur.refreshed == tick || cur.late || r.paused.Load())
	if cur.deferred {
		todo = nil
	}
	if len(todo) == 0 && len(cur.pending) == 0 && cur.prog != nil {
		cur.prog.finish(r)
		cur.prog = nil
	}
	if len(todo) > 0 {
		// After the refresh every op <= gcp is searchable on every copy, so
		// preference=_shards:N may be served by a replica.
		if err := r.refreshes.refresh(ctx, cur.ec, name); err != nil {
			return err
		}
		cur.refreshed = tick
		cur.beforeRefresh = map[int]es.ShardCheckpoints{}
		for _, sc := range st.Shards {
			cur.beforeRefresh[sc.Shard] = sc
		}
		reads := make([]shardRead, len(todo))
		for i, w := range todo {
			reads[i] = shardRead(w)
		}
		if err := r.readShards(ctx, name, cur, reads); err != nil {
			return err
		}
	}
	return nil
}

// scanDeletes runs the due delete scans of the index's shards, each right
// after the shard was read up to its checkpoint.
func (r *Relay) scanDeletes(ctx context.Context, name string, st es.IndexStats, cur *cursor) error {
	for _, sc := range st.Shards {
		cp, ok := cur.cps[sc.Shard]
		if !ok || !r.owns(cur.uuid, sc.Shard) {
			continue // nothing read, nothing delivered (or another partition's)
		}
		if _, held := cur.pending[sc.Shard]; held {
			continue // scanned once its last page is committed
		}
		if !cur.readTo[sc.Shard] && sc.GlobalCheckpoint != cp {
			// A checkpoint loaded, not read up to by this loop: after Redis
			// lost commits, the delivered ids put back (repair) may lie
			// above it, where a scan would clear the gap without their
			// deletes. Scanned once read.
			continue
		}
		origin, ok := cur.origins[sc.Shard]
		if !ok {
			origin = -1
		}
		res, err := r.cfg.Deletes.Scan(ctx, deletes.Shard{Index: name, Target: cur.target, UUID: cur.uuid, Shard: sc.Shard,
			Checkpoint: cp, Gap: cur.gaps[sc.Shard], Origin: origin, NoSeqNoPoints: cur.noPoints, Refreshed: cur.beforeRefresh[sc.Shard]})
		switch {
		case errors.Is(err, deletes.ErrAborted):
			continue // logged by the scanner; retried next round
		case err != nil:
			return err
		}
		cur.gaps[sc.Shard] -= res.GapCleared
	}
	return nil
}

// load reads the feed's state. The index's uuid is adopted again by the
// next round.
func (r *Relay) load(ctx context.Context, cur *cursor) error {
	state, err := r.cfg.Store.Load(ctx)
	if err != nil {
		return err
	}
	cur.dropPending(r)
	cur.loaded, cur.state, cur.uuid, cur.readTo = true, state, "", nil
	return nil
}

// adopt makes st's uuid the index followed: its stored checkpoints become
// the cursor. An index seen for the first time is checked (sequence numbers
// must be enabled) and recorded; with From=now, shards without a checkpoint
// that exist when the relay starts begin at the current global checkpoint,
// while an index created later (a new uuid for the name) starts from its
// beginning.
func (r *Relay) adopt(ctx context.Context, name string, st es.IndexStats, cur *cursor) error {
	settings, err := cur.ec.Settings(ctx, name)
	if err != nil {
		return err
	}
	if settings.SequenceNumbersDisabled {
		return fmt.Errorf("%w: index %s has sequence numbers disabled (index.disable_sequence_numbers: true, the default for index.mode columnar in Elasticsearch 9.5): documents cannot be read by _seq_no", ErrUnfollowable, name)
	}
	if settings.UUID != "" && settings.UUID != st.UUID {
		return fmt.Errorf("index %s changed while being read (uuid %s, then %s)", name, st.UUID, settings.UUID)
	}
	if cur.told != "" && cur.told != st.UUID {
		r.log.Warn("index was re-created: following the new index from its beginning", logkey.Index, name, logkey.OldUUID, cur.told, logkey.IndexUUID, st.UUID)
	}
	cur.cps, cur.gaps, cur.origins, cur.histories, cur.readTo = map[int]int64{}, map[int]int64{}, map[int]int64{}, map[int]string{}, nil
	cur.noPoints, cur.beforeRefresh = settings.SeqNoDocValuesOnly, nil
	for id, h := range cur.state.Histories {
		if id.IndexUUID == st.UUID {
			cur.histories[id.Shard] = h
		}
	}
	for id, cp := range cur.state.Checkpoints {
		if id.IndexUUID == st.UUID {
			cur.cps[id.Shard] = cp
		}
	}
	for id, g := range cur.state.Gaps {
		if id.IndexUUID == st.UUID {
			cur.gaps[id.Shard] = g
		}
	}
	for id, o := range cur.state.Origins {
		if id.IndexUUID == st.UUID {
			cur.origins[id.Shard] = o
		}
	}
	batch := checkpoint.Batch{Checkpoints: map[checkpoint.ShardID]int64{}, Origins: map[checkpoint.ShardID]int64{}, Histories: map[checkpoint.ShardID]string{}}
	if err := r.assignGeneration(ctx, st.UUID, name, &batch); err != nil {
		return err
	}
	if info, known := cur.state.Indices[st.UUID]; !known || info.Layout == nil {
		// A record of a relay before layouts gets its layout now.
		layout, err := r.indexLayout(ctx, cur.ec, name)
		if err != nil {
			return err
		}
		if !known {
			r.mu.Lock()
			info = checkpoint.IndexInfo{Name: name, Target: cur.target, Shards: settings.Shards, FirstSeen: time.Now().UTC(), ClusterUUID: r.clusterUUID}
			r.mu.Unlock()
		}
		if !known || layout != nil {
			info.Layout = layout
			batch.Indices = map[string]checkpoint.IndexInfo{st.UUID: info}
		}
	}
	if cur.fromNow && !cur.seen {
		for _, sc := range st.Shards {
			if _, ok := cur.cps[sc.Shard]; !ok && sc.GlobalCheckpoint >= 0 && r.owns(st.UUID, sc.Shard) {
				id := checkpoint.ShardID{IndexUUID: st.UUID, Shard: sc.Shard}
				batch.Checkpoints[id] = sc.GlobalCheckpoint
				batch.Origins[id] = sc.GlobalCheckpoint
				if sc.HistoryUUID != "" {
					batch.Histories[id] = sc.HistoryUUID
				}
			}
		}
	}
	if err := r.commit(ctx, batch); err != nil {
		return err
	}
	for id, cp := range batch.Checkpoints {
		cur.cps[id.Shard] = cp
		cur.state.Checkpoints[id] = cp
	}
	for id, o := range batch.Origins {
		cur.origins[id.Shard] = o
		cur.state.Origins[id] = o
	}
	for id, h := range batch.Histories {
		cur.histories[id.Shard] = h
		cur.state.Histories[id] = h
	}
	for uuid, info := range batch.Indices {
		cur.state.Indices[uuid] = info
	}
	cur.uuid, cur.seen = st.UUID, true
	if len(cur.cps) == 0 && !cur.fromNow {
		// A first read from the beginning: log its progress if it is large.
		// The count sees what a refresh made visible; without either, there
		// is just no progress log.
		if err := cur.ec.Refresh(ctx, name); err == nil {
			if total, err := cur.ec.CountIndex(ctx, name); err == nil && total >= progressMin {
				cur.prog = newProgress("reading the existing documents of "+name, total, nil)
			}
		}
	}
	if cur.told != st.UUID {
		cur.told = st.UUID
		r.log.Info("following index", logkey.Index, name, logkey.IndexUUID, st.UUID, logkey.Shards, settings.Shards, logkey.Checkpoints, len(cur.cps))
	}
	return nil
}

// indexLayout reads an index's layout for its record. A cluster that
// refuses the reads (401, 403: the relay's user lacks cluster monitor or
// view_index_metadata) gives nil and a warning: the index is followed
// without a layout, and the bulk sink refuses its events with custom
// routing until a relay with the privileges adopts it again. Any other
// failure is returned (the round is retried).
func (r *Relay) indexLayout(ctx context.Context, ec *es.Client, name string) (*checkpoint.IndexLayout, error) {
	l, err := ec.IndexLayout(ctx, name)
	if errors.Is(err, es.ErrUnauthorized) {
		r.log.Warn("cannot record the index's layout (shards, routing, mappings): a bulk mirror of the feed will refuse its events with custom routing; "+
			"grant the relay's user the cluster privilege monitor and view_index_metadata on the index (docs/SECURITY.md)", logkey.Index, name, logkey.Error, err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
		RoutingPath: l.RoutingPath, Engine: l.Engine, EngineVersion: l.EngineVersion, VersionCreated: l.VersionCreated, Mappings: l.Mappings}, nil
}

// shardRead is one shard's window of a round: (cp, gcp], read from primary.
type shardRead struct {
	shard   int
	cp, gcp int64
	primary es.ShardCheckpoints
}

// readShards reads the round's shards at once, each in a slot of the
// relay-wide ReadConcurrency (shared by every index), and returns when all
// are done, with their errors joined. Each shard's pages stay in order and
// each page is one commit, so nothing of the per-shard argument changes
// (docs/DESIGN.md §2): shards never had an order between them, and a
// document lives in one shard. The delete scans run after every read.
func (r *Relay) readShards(ctx context.Context, name string, cur *cursor, reads []shardRead) error {
	errs := make([]error, len(reads))
	var wg sync.WaitGroup
	for i, w := range reads {
		select {
		case r.reads <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-r.reads; wg.Done() }()
			errs[i] = r.readShard(ctx, name, cur, w.shard, w.cp, w.gcp, w.primary)
		}()
	}
	wg.Wait()
	return joinDistinct(errs)
}

// joinDistinct joins errs (nil ones skipped) saying each message once:
// shards of a round failing alike (a lease lost, Redis gone) give one
// line, not one per shard.
func joinDistinct(errs []error) error {
	seen := map[string]bool{}
	var out []error
	for _, err := range errs {
		if err == nil || seen[err.Error()] {
			continue
		}
		seen[err.Error()] = true
		out = append(out, err)
	}
	return errors.Join(out...)
}

// page is one search page of a shard's window: the hits of (after, next],
// read while primary was the shard's primary.
type page struct {
	shard       int
	after, next int64
	hits        []es.Hit
	primary     es.ShardCheckpoints
	target      int64     // the max seq no the gcp must reach (-1: not read yet)
	since       time.Time // when it was searched
}

// readShard pages through (cp, gcp] of one shard, committing each page with
// its events, delivered ids, gap count and new checkpoint in one
// transaction. After the last page the checkpoint is the gcp even if no hit
// has that seq no: deletes, superseded versions and no-ops consume seq nos
// too. primary is the primary the gcp was read from; each page is
// committed only once it is settled (see settle). The last page of the
// window, if a hold is free, is left pending for the next round's stats to
// settle (settlePending): in the steady state a page costs no stats
// request of its own.
//
// The search of the next page runs while a page is committed, one page
// ahead and never more: its search_after is the page's last seq no, known
// as soon as the page's hits are in. A page that is not its window's last
// is settled as soon as its own search answered (readAhead), so its stats
// are read after its search, as the settle rule wants, while its
// predecessor may still be committing. Pages still commit one at a time, in
// order, one transaction each: neither the order nor the settle rule
// changes (docs/DESIGN.md §2). On any error (search, settle, commit, lease
// lost, ctx ended) the page read ahead is dropped uncommitted: its search
// and settle check are cancelled and waited for before readShard returns.
// A shard read therefore holds at most two pages' responses and hits (two
// es.Page buffers, alternating, so a page being committed is never
// overwritten) and one page's events: about 2 × BatchSize hits, their
// sources included. It runs in one ReadConcurrency slot.
func (r *Relay) readShard(ctx context.Context, name string, cur *cursor, shard int, cp, gcp int64, primary es.ShardCheckpoints) error {
	ctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup // the goroutines of readAhead
	defer func() {
		// Drop the page read ahead, if any: never committed, its
		// goroutine finished before the shard read ends.
		cancel()
		running.Wait()
	}()
	// The store keeps none of the events, hits or responses after Commit
	// (the delivered ids it remembers are strings of their own): the
	// buffers are reused, page after page.
	var bufs [2]es.Page
	var events []redisx.Event
	ask := func(after int64, buf *es.Page) *readAhead {
		return r.readAhead(ctx, &running, cur.ec, es.ShardPage{Index: name, Shard: shard, After: after, UpTo: gcp, Size: r.cfg.BatchSize}, primary, buf)
	}
	after := cp
	next := ask(after, &bufs[0])
	for i := 0; ; i ^= 1 {
		ra := next
		next = nil
		if err := ra.searchErr(); err != nil {
			return err
		}
		hits := bufs[i].Hits
		pg := &page{shard: shard, after: after, next: pageEnd(hits, r.cfg.BatchSize, gcp), hits: hits, primary: primary, target: -1, since: ra.at}
		if pg.next == gcp && r.hold(pg.size()) {
			// bufs[i] is this page's from now on: no later page reuses it.
			cur.mu.Lock()
			if cur.pending == nil {
				cur.pending = map[int]*page{}
			}
			cur.pending[shard] = pg
			cur.mu.Unlock()
			return nil
		} // else the holds are full: settle it now
		if pg.next < gcp {
			// The next page is searched (and settled) while this one
			// commits, into the other buffer.
			next = ask(pg.next, &bufs[i^1])
		}
		if err := ra.settleErr(); err != nil {
			return err
		}
		if ra.last {
			// Not settled ahead: the last page is held when it can be.
			if err := r.settle(ctx, cur.ec, name, shard, primary); err != nil {
				return err
			}
		}
		if err := r.commitPage(ctx, name, cur, pg, &events); err != nil {
			return err
		}
		if pg.next == gcp {
			return nil
		}
		after = pg.next
	}
}

// pageEnd is the checkpoint a page of hits (asked for size hits of a
// window up to gcp) leaves its shard at: its last hit's seq no when the
// page is full and ends below gcp (more may follow), else gcp (the window's
// last page).
func pageEnd(hits []es.Hit, size int, gcp int64) int64 {
	if len(hits) == size && hits[len(hits)-1].SeqNo < gcp {
		return hits[len(hits)-1].SeqNo
	}
	return gcp
}

// readAhead is one page's search and, unless the page is its window's
// last, its settle check, run in a goroutine of their own (Relay.readAhead).
type readAhead struct {
	searched, settled    chan struct{}
	errSearch, errSettle error
	at                   time.Time // when the search answered
	last                 bool      // the window's last page: not settled here
}

// readAhead starts the search of page p into pg and, once it answered and
// unless the page is the window's last, the page's settle check (the
// primary's gcp covers what the search could see, on primary). The caller
// must not touch pg before searchErr returns; running counts the goroutine.
func (r *Relay) readAhead(ctx context.Context, running *sync.WaitGroup, ec *es.Client, p es.ShardPage, primary es.ShardCheckpoints, pg *es.Page) *readAhead {
	ra := &readAhead{searched: make(chan struct{}), settled: make(chan struct{})}
	running.Add(1)
	go func() {
		defer running.Done()
		defer close(ra.settled)
		ra.errSearch = ec.ReadPage(ctx, p, pg)
		ra.at = time.Now()
		ra.last = ra.errSearch == nil && pageEnd(pg.Hits, p.Size, p.UpTo) == p.UpTo
		close(ra.searched)
		if ra.errSearch == nil && !ra.last {
			ra.errSettle = r.settle(ctx, ec, p.Index, p.Shard, primary)
		}
	}()
	return ra
}

// searchErr returns once the search answered, with its error.
func (ra *readAhead) searchErr() error {
	<-ra.searched
	return ra.errSearch
}

// settleErr returns once the settle check is done (at once for the last
// page, which is not settled here), with its error.
func (ra *readAhead) settleErr() error {
	<-ra.settled
	return ra.errSettle
}

// commitPage commits a settled page: its events, delivered ids, gap count
// and the shard's new checkpoint in one transaction. The events are built
// in *scratch (reused by the next page of a shard read; nil: a new slice):
// the store keeps none of them after Commit.
func (r *Relay) commitPage(ctx context.Context, name string, cur *cursor, pg *page, scratch *[]redisx.Event) error {
	shard, hits := pg.shard, pg.hits
	id := checkpoint.ShardID{IndexUUID: cur.uuid, Shard: shard}
	var events []redisx.Event
	if scratch != nil {
		*scratch = slices.Grow((*scratch)[:0], len(hits))
		events = (*scratch)[:len(hits)]
		defer clear(events) // keep no page alive
	} else {
		events = make([]redisx.Event, len(hits))
	}
	batch := checkpoint.Batch{
		Events:      events,
		Checkpoints: map[checkpoint.ShardID]int64{id: pg.next},
	}
	cur.mu.Lock()
	if pg.primary.HistoryUUID != "" && cur.histories[shard] != pg.primary.HistoryUUID {
		// The history this shard is read under, checked every round.
		batch.Histories = map[checkpoint.ShardID]string{id: pg.primary.HistoryUUID}
	}
	cur.mu.Unlock()
	docs := make([]checkpoint.Doc, len(hits))
	for i, h := range hits {
		batch.Events[i] = upsertEvent(name, cur.uuid, shard, cur.target, h)
		docs[i] = checkpoint.Doc{ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo}
	}
	if len(docs) > 0 {
		batch.Delivered = map[checkpoint.ShardID][]checkpoint.Doc{id: docs}
	}
	// Seq nos of the window that brought no hit: deletes, superseded
	// versions, no-ops. Only they can hide a delete (DESIGN §3).
	gap := pg.next - pg.after - int64(len(hits))
	if gap > 0 {
		batch.Gaps = map[checkpoint.ShardID]int64{id: gap}
	}
	if err := r.commit(ctx, batch); err != nil {
		return err
	}
	r.m.checkpoint.WithLabelValues(name, strconv.Itoa(shard)).Set(float64(pg.next))
	cur.mu.Lock()
	cur.prog.add(r, len(hits))
	cur.cps[shard] = pg.next
	cur.state.Checkpoints[id] = pg.next
	if cur.readTo == nil {
		cur.readTo = map[int]bool{}
	}
	cur.readTo[shard] = true
	if h := batch.Histories[id]; h != "" {
		cur.histories[shard] = h
		cur.state.Histories[id] = h
	}
	if gap > 0 {
		cur.gaps[shard] += gap
	}
	cur.mu.Unlock()
	if len(hits) > 0 {
		r.log.Debug("committed", logkey.Index, name, logkey.Shard, shard, logkey.Events, len(hits), logkey.Checkpoint, pg.next)
	}
	return nil
}

// settlePending settles the pending pages with this round's stats, read
// after their searches (es.Settle's argument, one stats request for every
// shard and index of the poll): the first stats after the search give the
// max seq no the gcp must reach; a page commits once a round's stats show
// the gcp there on the same primary. A page whose primary changed is
// dropped, uncommitted, and its shard read again.
func (r *Relay) settlePending(ctx context.Context, name string, st es.IndexStats, cur *cursor) error {
	for _, shard := range sortedShards(cur.pending) {
		pg := cur.pending[shard]
		sc, ok := st.Shard(shard)
		switch {
		case !ok:
			// No started primary in the stats: a failover under way.
		case !sc.SamePrimary(pg.primary):
			r.log.Debug("the primary changed before the page settled: reading it again", logkey.Index, name, logkey.Shard, shard,
				logkey.Term, pg.primary.PrimaryTerm, logkey.Now, sc.PrimaryTerm)
			cur.release(r, shard)
			continue
		case pg.target < 0:
			pg.target = sc.MaxSeqNo
		}
		if ok && sc.GlobalCheckpoint >= pg.target && pg.target >= 0 {
			if err := r.commitPage(ctx, name, cur, pg, nil); err != nil {
				return err
			}
			cur.release(r, shard)
			continue
		}
		if time.Since(pg.since) > settleTimeout {
			return fmt.Errorf("shard %d of %s: the global checkpoint stayed at %d below the max seq no %d for %s: a replica is not keeping up",
				shard, name, sc.GlobalCheckpoint, pg.target, settleTimeout)
		}
	}
	return nil
}

// size is what a page weighs against the holds: its hits, at least 1.
func (pg *page) size() int { return max(len(pg.hits), 1) }

// hold takes n hits of the relay's holds (ReadConcurrency × BatchSize hits
// between every pending page: as many as the reads in flight hold), or
// reports false if they do not fit.
func (r *Relay) hold(n int) bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.held+n > r.cfg.ReadConcurrency*r.cfg.BatchSize {
		return false
	}
	r.held += n
	return true
}

func (r *Relay) unhold(n int) {
	r.heldMu.Lock()
	r.held -= n
	r.heldMu.Unlock()
}

// release forgets the pending page of shard and frees its hold.
func (cur *cursor) release(r *Relay, shard int) {
	cur.mu.Lock()
	defer cur.mu.Unlock()
	if pg, ok := cur.pending[shard]; ok {
		delete(cur.pending, shard)
		r.unhold(pg.size())
	}
}

// dropPending forgets every pending page, uncommitted: their shards are
// read again from their checkpoints.
func (cur *cursor) dropPending(r *Relay) {
	for _, shard := range sortedShards(cur.pending) {
		cur.release(r, shard)
	}
}

func sortedShards(m map[int]*page) []int {
	out := make([]int, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// settleDelay is the pause before the round that settles pending pages
// again: none the first time, then 5 ms doubling up to 100 ms (jittered,
// backoff.Delay).
func settleDelay(tries int) time.Duration {
	if tries == 0 {
		return 0
	}
	return backoff.Delay(5*time.Millisecond, 100*time.Millisecond, tries)
}

// settleTimeout bounds how long a page waits for the global checkpoint to
// pass the ops its search may have seen above the window.
const settleTimeout = 30 * time.Second

// errPrimaryChanged: the shard's primary term rose while a page was read. The
// page is dropped uncommitted and read again by the next round.
var errPrimaryChanged = es.ErrPrimaryChanged

// settle returns once the page just searched may be committed (es.Settle:
// the primary's gcp covers every op the search could see, on the same
// primary); a failover in between is errPrimaryChanged and the page is
// read again.
func (r *Relay) settle(ctx context.Context, ec *es.Client, name string, shard int, primary es.ShardCheckpoints) error {
	return es.Settle(ctx, name, shard, primary, settleTimeout, func() (es.ShardCheckpoints, error) {
		st, err := ec.Stats(ctx, []string{name})
		if err != nil {
			return es.ShardCheckpoints{}, err
		}
		sc, ok := st[name].Shard(shard)
		if !ok {
			return sc, fmt.Errorf("shard %d of %s: the primary is not started", shard, name)
		}
		return sc, nil
	})
}

// indexMissing handles a 404 for an index: if the feed followed an index of
// that name, it is gone (confirmed by a second look a moment later) and its
// end is emitted; otherwise it is an error.
func (r *Relay) indexMissing(ctx context.Context, name string, cur *cursor, notFound error) error {
	if len(r.knownUUIDs(name, cur, "")) == 0 {
		return fmt.Errorf("%w (the feed has never seen an index of that name)", notFound)
	}
	if !sleep(ctx, time.Second) {
		return ctx.Err()
	}
	if _, err := cur.ec.Stats(ctx, []string{name}); !es.IsNotFound(err) {
		return fmt.Errorf("index %s missing, then not: %v", name, err)
	}
	if err := r.forgetOthers(ctx, name, "", cur); err != nil {
		return err
	}
	cur.dropPending(r)
	cur.uuid, cur.cps, cur.gaps, cur.origins, cur.histories = "", nil, nil, nil, nil
	cur.gone = true
	return nil
}

// knownUUIDs lists the recorded uuids of indices named name, except keep.
func (r *Relay) knownUUIDs(name string, cur *cursor, keep string) []string {
	var out []string
	for uuid, info := range cur.state.Indices {
		if info.Name == name && uuid != keep {
			out = append(out, uuid)
		}
	}
	sort.Strings(out)
	return out
}

// forgetOthers ends every recorded index named name other than keep: its
// delivered documents get deletes (or one index_deleted event) and its state
// goes. It refuses when the cluster is not the one the index was seen on.
func (r *Relay) forgetOthers(ctx context.Context, name, keep string, cur *cursor) error {
	uuids := r.knownUUIDs(name, cur, keep)
	if len(uuids) == 0 {
		return nil
	}
	info, err := r.cfg.ES.Info(ctx)
	if err != nil {
		return err
	}
	for _, uuid := range uuids {
		rec := cur.state.Indices[uuid]
		if rec.ClusterUUID != "" && info.ClusterUUID != "" && rec.ClusterUUID != info.ClusterUUID {
			return fmt.Errorf("%w: index %s (uuid %s) was followed on cluster %s, but the relay now reaches cluster %s: refusing to emit deletes for it; point the relay at the original cluster or start a new feed",
				deletes.ErrOtherCluster, name, uuid, rec.ClusterUUID, info.ClusterUUID)
		}
		cps := map[int]int64{}
		for id, cp := range cur.state.Checkpoints {
			if id.IndexUUID == uuid {
				cps[id.Shard] = cp
			}
		}
		g := deletes.Gone{UUID: uuid, Info: rec, Checkpoints: cps, PerDocument: r.cfg.Deletes != nil && !r.cfg.IndexDeletedEvent,
			// With partitions, the index_deleted event is the partition's
			// that owns shard 0 (each partition drops its own state).
			NoIndexEvent: !r.owns(uuid, 0)}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		_, err := deletes.ForgetIndex(cctx, r.cfg.Store.Client(), r.cfg.Store.Keys(), r.cfg.Store, g, r.log)
		cancel()
		if err != nil {
			return err
		}
		delete(cur.state.Indices, uuid)
		for id := range cur.state.Checkpoints {
			if id.IndexUUID == uuid {
				delete(cur.state.Checkpoints, id)
			}
		}
	}
	return nil
}

// upsertEvent maps a hit to its event: the document as the op with that seq
// no wrote it.
func upsertEvent(index, uuid string, shard int, target string, h es.Hit) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: index, IndexUUID: uuid, Shard: shard,
		ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm, Version: h.Version,
		Source: h.Source, Target: target}
}

// assignGeneration gives a uuid seen for the first time the next generation
// of its index name, in the batch that records it (before any of its
// events): a re-created index's documents then order after the old one's.
//
// With partitions the generation is assigned at once in the feed-level hash
// (one uuid, one generation in every partition) by an idempotent script.
func (r *Relay) assignGeneration(ctx context.Context, uuid, name string, b *checkpoint.Batch) error {
	if r.cfg.Partitions > 1 {
		key := redisx.NewKeys(r.cfg.Store.Keys().Feed()).Generations()
		if err := assignScript.Run(ctx, r.cfg.Store.Client(), []string{key}, uuid, name).Err(); err != nil {
			return fmt.Errorf("assign the generation of index uuid %s in %s: %w", uuid, key, err)
		}
		return nil
	}
	gen, assigned, err := r.cfg.Store.NextGeneration(ctx, uuid, name)
	if err != nil || assigned {
		return err
	}
	b.Generations = map[string]int64{uuid: gen, "name:" + name: gen}
	return nil
}

// assignScript gives an index uuid the next generation of its name in a
// feed-level generations hash, unless it has one: KEYS[1] the hash, ARGV[1]
// the uuid, ARGV[2] the index name. It returns the uuid's generation.
var assignScript = redis.NewScript(`
local g = redis.call('HGET', KEYS[1], ARGV[1])
if g then return tonumber(g) end
g = redis.call('HINCRBY', KEYS[1], 'name:' .. ARGV[2], 1)
redis.call('HSET', KEYS[1], ARGV[1], g)
return g`)
