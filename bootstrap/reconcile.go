package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// reconcile hands a delete for every document the sink holds for the index
// that the copy's views lacked and that is still gone when checked again,
// and returns how many it handed and how many it had to keep.
//
// The stamp (docs/DESIGN.md, Bootstrap): a document held from this index
// at seq no s gets a delete at s, which orders after exactly the version
// held (2s+1 > 2s) and before anything the document can still become (its
// deletion took a seq no above s, a re-creation one above that). One held
// from an older index of the name gets a delete at the lowest global
// checkpoint of the index's shards read before the check: it orders after
// every event of the older index (a higher generation) and before any
// later write of the document (a write after the check takes a seq no
// above its shard's gcp then). With a shard still empty (gcp -1) no such
// stamp exists, and those documents are kept.
func (c *copier) reconcile(ctx context.Context, ix *indexCopy, present *idSet, log *slog.Logger) (removed, kept int64, err error) {
	var cands []sink.HeldDoc
	var held int64
	err = c.retry(ctx, "list what the sink holds of "+ix.name, func() (err error) {
		cands = cands[:0]
		held, err = c.cfg.Reconciler.Held(ctx, ix.name, ix.uuid, c.cfg.PageSize, func(page []sink.HeldDoc) error {
			for _, h := range page {
				if !present.has(h) {
					cands = append(cands, h)
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list what the sink holds: %w", err)
	}
	log.Debug("bootstrap: the sink's documents listed", logkey.Held, held, logkey.NotInTheCopy, len(cands))
	if len(cands) == 0 {
		return 0, 0, nil
	}
	var gone []sink.HeldDoc
	var minGCP int64
	for attempt := 1; ; attempt++ {
		gone, minGCP, err = c.recheck(ctx, ix, cands)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		if !retryable(err) {
			return 0, 0, err
		}
		if attempt >= c.cfg.MaxAttempts {
			return 0, 0, fmt.Errorf("%w: checking %d documents the copy lacked: %d attempts failed; the last: %w", ErrGaveUp, len(cands), attempt, err)
		}
		d := c.backoff(attempt)
		log.Warn("bootstrap: checking the documents the copy lacked again", logkey.Attempt, attempt, logkey.Error, err.Error(), logkey.RetryIn, d.String())
		if !sleep(ctx, d) {
			return 0, 0, ctx.Err()
		}
	}
	evs := make([]redisx.Event, 0, len(gone))
	for _, h := range gone {
		stamp := h.SeqNo
		if h.Older {
			if minGCP < 0 {
				kept++
				continue
			}
			stamp = minGCP
		}
		evs = append(evs, redisx.Event{Op: redisx.OpDelete, Index: ix.name, IndexUUID: ix.uuid, Shard: h.Shard,
			ID: h.ID, Routing: h.Routing, SeqNo: stamp, Target: ix.target})
	}
	if kept > 0 {
		log.Warn("bootstrap: the sink holds documents of an older index of this name that the index lacks, and a shard of the index is still empty, so no delete can be ordered before a later write of them there: they stay in the sink (delete them by hand, or bootstrap again once every shard has a document)",
			logkey.Kept, kept)
	}
	if err := c.hand(ctx, evs); err != nil {
		return 0, kept, err
	}
	return int64(len(evs)), kept, nil
}

// recheck returns the candidates that no shard of the index holds now (an
// ids query on each shard's primary after a refresh, each shard then
// settled, so no failover can bring one back), and the lowest global
// checkpoint of the shards read before it.
func (c *copier) recheck(ctx context.Context, ix *indexCopy, cands []sink.HeldDoc) ([]sink.HeldDoc, int64, error) {
	ec := c.cfg.ES.Pin()
	primaries := make([]es.ShardCheckpoints, ix.shards)
	minGCP := int64(-1)
	for shard := range primaries {
		sc, err := c.primary(ctx, ec, ix, shard)
		if err != nil {
			return nil, 0, err
		}
		primaries[shard] = sc
		if shard == 0 || sc.GlobalCheckpoint < minGCP {
			minGCP = sc.GlobalCheckpoint
		}
	}
	if err := ec.Refresh(ctx, ix.name); err != nil {
		return nil, 0, err
	}
	idSeen := map[string]bool{}
	var ids []string
	for _, h := range cands {
		if !idSeen[h.ID] {
			idSeen[h.ID] = true
			ids = append(ids, h.ID)
		}
	}
	sort.Strings(ids)
	found := map[uint64]bool{}
	for shard, sc := range primaries {
		refs, err := ec.Present(ctx, ix.name, shard, sc.Node, ids)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range refs {
			found[docHash(r.ID, r.Routing)] = true
			found[shardHash(r.ID, shard)] = true
		}
	}
	for shard, sc := range primaries {
		if err := c.settle(ctx, ec, ix, shard, sc); err != nil {
			return nil, 0, err
		}
	}
	var gone []sink.HeldDoc
	for _, h := range cands {
		if !found[heldHash(h)] {
			gone = append(gone, h)
		}
	}
	return gone, minGCP, nil
}
