package deletes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// K is the size of a delivered range in seq nos.
const K = redisx.RangeSize

// scanError builds the errors of one scan: logged, and wrapping ErrAborted
// and whatever format's %w names (es.ErrPrimaryChanged).
type scanError struct {
	ctx context.Context
	sh  Shard
	log *slog.Logger
}

func (e scanError) abort(format string, args ...any) error {
	reason := fmt.Errorf(format, args...)
	if e.ctx.Err() != nil {
		// Stopping (the relay lost its lease or was told to stop): no
		// trouble to warn about.
		e.log.Debug("delete scan stopped", logkey.Reason, reason.Error())
	} else {
		e.log.Warn("delete scan aborted; it runs again next round", logkey.Reason, reason.Error())
	}
	return fmt.Errorf("%w: shard %d of %s: %w", ErrAborted, e.sh.Shard, e.sh.Index, reason)
}

func (s *Scanner) scan(ctx context.Context, sh Shard) (Result, error) {
	// One node coordinates the whole scan (es.Client.Pin): its stats,
	// refreshes, counts, histograms and re-check are one view of the
	// cluster.
	ec := s.cfg.ES.Pin()
	log := s.log.With(logkey.Index, sh.Index, logkey.Shard, sh.Shard)
	fail := scanError{ctx: ctx, sh: sh, log: log}
	id := sh.id()
	k := s.cfg.Keys
	var legacy int64
	s.mu.Lock()
	ranged := s.ranged[id]
	s.mu.Unlock()
	if !ranged {
		var err error
		if legacy, err = s.cfg.Client.SCard(ctx, k.Delivered(sh.UUID, sh.Shard)).Result(); err != nil {
			return Result{}, fail.abort("read the delivered set of the layout before ranges: %v", err)
		}
		if legacy == 0 {
			// Nothing writes the old layout any more: no need to look again.
			s.mu.Lock()
			s.ranged[id] = true
			s.mu.Unlock()
		}
	}
	var mig *migration
	var err error
	if legacy > 0 {
		// A feed written before delivered ranges: this scan moves the
		// shard's set into ranges first, then scans the ranges, and its
		// commit drops the set.
		if mig, err = s.migrate(ctx, ec, sh, legacy, fail); err != nil {
			return Result{}, err
		}
	}
	// Gap proof: no seq no up to the checkpoint went undelivered since the
	// last scan, so no delivered document can have been deleted or moved.
	if sh.Gap <= 0 {
		s.savedGap.Add(1)
		log.Debug("delete scan skipped: gap proof (no undelivered seq no since the last scan)")
		if mig != nil {
			return s.commit(ctx, sh, finding{keepGap: true}, mig, log)
		}
		return Result{}, nil
	}
	clearGap := func() (Result, error) { return s.commit(ctx, sh, finding{}, mig, log) }
	counts, total, err := checkpoint.RangeCounts(ctx, s.cfg.Client, k, id)
	if err != nil {
		return Result{}, fail.abort("%v", err)
	}
	if total == 0 {
		s.savedCount.Add(1)
		return clearGap()
	}
	sc0, err := s.primaryView(ctx, ec, sh, fail)
	if err != nil {
		return Result{}, err
	}
	if !sh.refreshedAt(sc0) {
		// Unless the relay's last refresh came after every op up to the
		// checkpoint was processed on this very copy (the same primary:
		// term, node and history), the count could miss a delete.
		if err := ec.Refresh(ctx, sh.Index); err != nil {
			return Result{}, fail.abort("%v", err)
		}
	}
	// Count proof: every live document with origin < seq no <= checkpoint
	// was delivered at its seq no and has its entry; so if as many exist as
	// there are entries, every entry is a live document (DESIGN §3).
	count, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, sh.Origin, sh.Checkpoint)
	if err != nil {
		return Result{}, fail.abort("%v", err)
	}
	if count == total {
		s.savedCount.Add(1)
		log.Debug("delete scan skipped: count proof", logkey.Delivered, total, logkey.Count, count)
		return clearGap()
	}
	f, err := s.localize(ctx, ec, sh, sc0, counts, total, count, fail)
	if err != nil {
		return Result{}, err
	}
	if n := len(f.goneIDs()); n > 0 && float64(n) > s.cfg.MaxDeleteFraction*float64(total) {
		// A mass delete is confirmed by a second, independent pass before
		// anything is emitted; only entries both found go.
		s.confirmations.Add(1)
		log.Info("delete scan would delete a large share of the shard: confirming with a second scan",
			logkey.Gone, n, logkey.Delivered, total, logkey.MaxFraction, s.cfg.MaxDeleteFraction)
		again, err := s.localize(ctx, ec, sh, sc0, counts, total, count, fail)
		if err != nil {
			return Result{}, err
		}
		f = f.intersect(again)
	}
	s.localized.Add(1)
	return s.commit(ctx, sh, f, mig, log)
}

// primaryView reads the shard's primary and refuses a view older than what
// the feed delivered.
func (s *Scanner) primaryView(ctx context.Context, ec *es.Client, sh Shard, fail scanError) (es.ShardCheckpoints, error) {
	st, err := ec.Stats(ctx, []string{sh.Index})
	if err != nil {
		return es.ShardCheckpoints{}, fail.abort("%v", err)
	}
	sc, ok := st[sh.Index].Shard(sh.Shard)
	if !ok {
		return sc, fail.abort("the shard's primary is not started")
	}
	if sc.GlobalCheckpoint < sh.Checkpoint {
		// The feed read up to its checkpoint from a primary whose gcp was
		// at least that; a view below it is older than what was delivered
		// (a node that was cut off and has not yet learned it was
		// removed answers from its own stale copy), and would take
		// documents deleted since for live ones.
		return sc, fail.abort("the cluster's view of the shard (global checkpoint %d) is older than the feed's checkpoint %d", sc.GlobalCheckpoint, sh.Checkpoint)
	}
	return sc, nil
}

// samePrimary checks, after the scan read the shard, that the primary it
// began with still answers, with a view not older than the feed's.
func (s *Scanner) samePrimary(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, what string, fail scanError) (es.ShardCheckpoints, error) {
	st, err := ec.Stats(ctx, []string{sh.Index})
	if err != nil {
		return es.ShardCheckpoints{}, fail.abort("%v", err)
	}
	sc1, ok := st[sh.Index].Shard(sh.Shard)
	if !ok || !sc1.SamePrimary(sc0) {
		return sc1, fail.abort("%w during the %s (term %d on node %s, then %d on %s)", es.ErrPrimaryChanged, what, sc0.PrimaryTerm, sc0.Node, sc1.PrimaryTerm, sc1.Node)
	}
	if sc1.GlobalCheckpoint < sh.Checkpoint {
		return sc1, fail.abort("the cluster's view of the shard (global checkpoint %d) is older than the feed's checkpoint %d after the %s", sc1.GlobalCheckpoint, sh.Checkpoint, what)
	}
	return sc1, nil
}

// finding is what one pass over a shard's differing ranges found.
type finding struct {
	// gone are the entries of documents that no longer exist: every
	// entry of each such id (one delete event per id).
	gone []checkpoint.Doc
	// stale are entries of documents that live at a later seq no (an
	// update moved them to a later range): removed with no event.
	stale []checkpoint.Doc
	// keepGap: a candidate is live above the checkpoint (re-created, or
	// recorded ahead of the relay): its range must be looked at again.
	keepGap bool
}

func (f finding) goneIDs() []string {
	var ids []string
	for _, d := range f.gone {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// intersect keeps the entries both passes found, in the same role.
func (f finding) intersect(g finding) finding {
	both := func(a, b []checkpoint.Doc) []checkpoint.Doc {
		in := map[checkpoint.Doc]bool{}
		for _, d := range b {
			in[d] = true
		}
		var out []checkpoint.Doc
		for _, d := range a {
			if in[d] {
				out = append(out, d)
			}
		}
		return out
	}
	return finding{gone: both(f.gone, g.gone), stale: both(f.stale, g.stale), keepGap: f.keepGap || g.keepGap}
}

// localize finds the shard's entries that are not live documents any more,
// reading only the ranges whose sizes differ from the cluster's counts:
//
//  1. a histogram on _seq_no at interval K over (origin, checkpoint],
//     compared range by range with the counts hash (every live document
//     there has its entry, so a range with as many documents as entries is
//     whole);
//  2. a histogram at interval 1 over the differing ranges: their live seq
//     nos; an entry at a seq no that is not live is a candidate (the live
//     document at seq no s can only be the one recorded at s);
//  3. the re-check of the candidates by id, after a refresh, and the wait
//     until the global checkpoint covers what it saw.
func (s *Scanner) localize(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, counts map[int64]int64, total, count int64, fail scanError) (finding, error) {
	differ, sum, err := s.differingRanges(ctx, ec, sh, sc0, counts, total-count, fail)
	if err != nil {
		return finding{}, err
	}
	// Every live document there has its entry, so a range of the cluster
	// is one of the feed's: the feed's ranges are every range compared.
	compared := len(counts)
	s.rangesCompared.Add(int64(compared))
	s.rangesDiffered.Add(int64(len(differ)))
	sc1, err := s.samePrimary(ctx, ec, sh, sc0, "histogram", fail)
	if err != nil {
		return finding{}, err
	}
	if sc1.MaxSeqNo == sc0.MaxSeqNo && sum != count {
		// With no write in between, the ranges' counts and _count saw one view.
		return finding{}, fail.abort("the ranges' counts sum to %d documents in (%d, %d] but _count said %d, with no write in between", sum, sh.Origin, sh.Checkpoint, count)
	}
	if len(differ) == 0 {
		return finding{}, nil
	}
	slices.Sort(differ)
	live, err := s.liveSeqNos(ctx, ec, sh, sc0, differ, fail)
	if err != nil {
		return finding{}, err
	}
	entries, err := checkpoint.ReadRanges(ctx, s.cfg.Client, s.cfg.Keys, sh.id(), differ, counts)
	if err != nil {
		return finding{}, fail.abort("%v", err)
	}
	var cands []checkpoint.Doc
	var ids []string
	for _, e := range entries {
		if e.SeqNo > sh.Checkpoint || !live[e.SeqNo] {
			cands = append(cands, e)
			ids = append(ids, e.ID)
		}
	}
	s.log.Debug("compared delivered ranges", logkey.Index, sh.Index, logkey.Shard, sh.Shard, logkey.Ranges, compared, logkey.Differing, len(differ),
		logkey.SeqNosRead, len(live), logkey.Candidates, len(cands))
	if len(cands) == 0 {
		return finding{}, nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return finding{}, fail.abort("%v", err)
	}
	present, err := ec.Present(ctx, sh.Index, sh.Shard, sc0.Node, ids)
	if err != nil {
		return finding{}, fail.abort("%v", err)
	}
	var f finding
	for _, e := range cands {
		ref, ok := present[e.ID]
		switch {
		case !ok:
			f.gone = append(f.gone, e)
		case ref.SeqNo > sh.Checkpoint:
			f.keepGap = true // re-created, or recorded ahead: not read yet
		case ref.SeqNo > e.SeqNo:
			f.stale = append(f.stale, e)
		default:
			return finding{}, fail.abort("the re-check found %q at seq no %d, where the histogram saw no document (the feed recorded it at %d)", e.ID, ref.SeqNo, e.SeqNo)
		}
	}
	if len(f.gone) > 0 {
		// A document deleted after the histograms was live then, so its
		// other entries were no candidates, in ranges read or not: a stale
		// entry found gone here would leave its current entry behind, and
		// a later scan would delete the document a second time. So its
		// entries in the ranges read go too, and the ranges that differ
		// now, and did not before, are read for the others.
		// (Any other document gone since was deleted above the checkpoint:
		// the relay counts its delete as a gap, and a later scan finds it.)
		gone := f.goneIDs()
		found := make(map[checkpoint.Doc]bool, len(f.gone))
		for _, e := range f.gone {
			found[e] = true
		}
		for _, e := range entries {
			// Live at its seq no when the seq nos were read, so not a
			// candidate: gone since.
			if _, ok := slices.BinarySearch(gone, e.ID); ok && !found[e] {
				f.gone = append(f.gone, e)
			}
		}
		more, err := s.sweep(ctx, ec, sh, sc0, counts, differ, gone, fail)
		if err != nil {
			return finding{}, err
		}
		f.gone = append(f.gone, more...)
		// Everything the re-check saw must be at or below the global
		// checkpoint: only then can no failover undo the deletes it saw.
		if err := s.waitDurable(ctx, ec, sh, sc0); err != nil {
			return finding{}, fail.abort("%w", err)
		}
	}
	return f, nil
}

// differingRanges are the ranges (sorted) whose live documents in
// (origin, checkpoint] differ from the feed's counts, found by the descent
// (descent.go), and the cluster's count of the whole shard it saw first.
// A range where the cluster counts more than the feed breaks the
// invariant (every live document there has its entry: a view older than
// what was delivered, or a bug): the scan aborts. missing is the feed's
// total less the cluster's count of the shard (-1: unknown).
func (s *Scanner) differingRanges(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, counts map[int64]int64, missing int64, fail scanError) ([]int64, int64, error) {
	fbf, err := s.filterByFilter(ctx, ec)
	if err != nil {
		return nil, 0, fail.abort("%v", err)
	}
	differ, sum, _, err := newDescent(ec, sh, sc0.Node, counts, fbf, missing).run(ctx)
	if err != nil {
		return nil, 0, fail.abort("%v", err)
	}
	return differ, sum, nil
}

// filterByFilter is es.Info.CountsFilterByFilter of the cluster, read
// once.
func (s *Scanner) filterByFilter(ctx context.Context, ec *es.Client) (bool, error) {
	s.mu.Lock()
	known, fbf := s.engineKnown, s.filterByFilterEngine
	s.mu.Unlock()
	if known {
		return fbf, nil
	}
	info, err := ec.Info(ctx)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	s.engineKnown, s.filterByFilterEngine = true, info.CountsFilterByFilter()
	s.mu.Unlock()
	return info.CountsFilterByFilter(), nil
}

// sweep returns the entries of gone ids in the ranges that differ now but
// did not in the first histogram (differ, sorted).
func (s *Scanner) sweep(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, counts map[int64]int64, differ []int64, gone []string, fail scanError) ([]checkpoint.Doc, error) {
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return nil, fail.abort("%v", err)
	}
	now, _, err := s.differingRanges(ctx, ec, sh, sc0, counts, -1, fail)
	if err != nil {
		return nil, err
	}
	var more []int64
	for _, r := range now {
		if _, seen := slices.BinarySearch(differ, r); !seen {
			more = append(more, r)
		}
	}
	if len(more) == 0 {
		return nil, nil
	}
	entries, err := checkpoint.ReadRanges(ctx, s.cfg.Client, s.cfg.Keys, sh.id(), more, counts)
	if err != nil {
		return nil, fail.abort("%v", err)
	}
	var out []checkpoint.Doc
	for _, e := range entries {
		if _, ok := slices.BinarySearch(gone, e.ID); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// liveSeqNos reads which seq nos of some ranges (sorted), up to the
// checkpoint, hold a live document: histograms at interval 1, joined into
// requests of at most es.MaxHistogramBuckets seq nos.
func (s *Scanner) liveSeqNos(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, ranges []int64, fail scanError) (map[int64]bool, error) {
	var spans []es.SeqSpan
	for _, r := range ranges {
		after, upTo := max(r*K-1, sh.Origin), min(r*K+K-1, sh.Checkpoint)
		if upTo <= after {
			continue // a range wholly above the checkpoint: nothing live to read
		}
		if n := len(spans); n > 0 && spans[n-1].UpTo == after {
			spans[n-1].UpTo = upTo
			continue
		}
		spans = append(spans, es.SeqSpan{After: after, UpTo: upTo})
	}
	live := map[int64]bool{}
	for _, batch := range spanBatches(spans, 1) {
		h, err := ec.SeqNoHistogram(ctx, sh.Index, sh.Shard, sc0.Node, batch, 1)
		if err != nil {
			return nil, fail.abort("%v", err)
		}
		for seq, n := range h {
			if n != 1 {
				return nil, fail.abort("seq no %d holds %d live documents", seq, n)
			}
			live[seq] = true
		}
	}
	s.seqNosRead.Add(int64(len(live)))
	if _, err := s.samePrimary(ctx, ec, sh, sc0, "read of live seq nos", fail); err != nil {
		return nil, err
	}
	return live, nil
}

// commit emits one delete per gone id (stamped with the checkpoint),
// removes the gone and stale entries, and resets the gap counter (unless a
// candidate live above the checkpoint keeps it), atomically. With a
// migration, the old set's gone ids are deleted too, and the set dropped.
func (s *Scanner) commit(ctx context.Context, sh Shard, f finding, mig *migration, log *slog.Logger) (Result, error) {
	id := sh.id()
	b := checkpoint.Batch{}
	res := Result{}
	if !f.keepGap && sh.Gap > 0 {
		b.Gaps = map[checkpoint.ShardID]int64{id: -sh.Gap}
		res.GapCleared = sh.Gap
	}
	if rm := append(slices.Clip(f.gone), f.stale...); len(rm) > 0 {
		b.Removed = map[checkpoint.ShardID][]checkpoint.Doc{id: rm}
	}
	routing := map[string]string{}
	ids := f.goneIDs()
	if mig != nil {
		k := s.cfg.Keys
		b.DropKeys = []string{k.Scan(sh.UUID, sh.Shard), k.Delivered(sh.UUID, sh.Shard), k.Routing(sh.UUID, sh.Shard)}
		routing = mig.routing
		ids = append(ids, mig.gone...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	for _, d := range f.gone {
		if d.Routing != "" {
			routing[d.ID] = d.Routing
		}
	}
	for _, docID := range ids {
		b.Events = append(b.Events, redisx.Event{Op: redisx.OpDelete, Index: sh.Index, IndexUUID: sh.UUID, Shard: sh.Shard,
			ID: docID, Routing: routing[docID], SeqNo: sh.Checkpoint, Target: sh.Target})
	}
	res.Deleted = len(b.Events)
	if err := s.cfg.Store.Commit(ctx, b); err != nil {
		return Result{}, err
	}
	s.deleted.Add(int64(res.Deleted))
	s.staleRemoved.Add(int64(len(f.stale)))
	if mig != nil {
		s.migrated.Add(1)
		log.Info("moved the shard's delivered ids into seq-no ranges", logkey.Deletes, res.Deleted, logkey.Checkpoint, sh.Checkpoint)
	} else if res.Deleted > 0 || len(f.stale) > 0 {
		log.Info("emitted deletes", logkey.Deletes, res.Deleted, logkey.StaleEntries, len(f.stale), logkey.Checkpoint, sh.Checkpoint)
	}
	return res, nil
}

// waitDurable waits until the primary's global checkpoint reaches the max
// seq no it had right after the re-check, under the same primary: the
// relay's settle rule (es.Settle), so a primary on another node, with a new
// term or a new history is es.ErrPrimaryChanged.
func (s *Scanner) waitDurable(ctx context.Context, ec *es.Client, sh Shard, primary es.ShardCheckpoints) error {
	return es.Settle(ctx, sh.Index, sh.Shard, primary, s.cfg.DurableWait, func() (es.ShardCheckpoints, error) {
		st, err := ec.Stats(ctx, []string{sh.Index})
		if err != nil {
			return es.ShardCheckpoints{}, err
		}
		sc, ok := st[sh.Index].Shard(sh.Shard)
		if !ok {
			return sc, errors.New("the shard's primary is not started")
		}
		return sc, nil
	})
}
