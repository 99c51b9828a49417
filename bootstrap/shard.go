package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// shardCopy is what one shard's copy handed.
type shardCopy struct {
	n        int64    // upserts handed
	deferred int64    // documents of the view left to the stream (above the relay's checkpoint)
	present  []uint64 // identities (docHash, shardHash) of every document of the view, when reconciling
}

// copyShard hands the documents of one shard from one settled, complete
// view: those whose seq no is at or below the relay's checkpoint of the
// shard (read before the view opened). A document above it has a version
// the relay has not written yet: the stream carries it after the recorded
// position, so it is left to the stream ("deferred"), and the copy only
// ever hands versions the relay delivered. A failed attempt (a partial or
// timed-out page, a listing short of its view's total, an expired view, a
// primary that moved, a cluster error) starts again from a new view after
// a backoff, up to MaxAttempts; what it handed stays valid (each event is
// a settled version of its document), and only the last view counts. A
// handler error, a replaced history, or the index deleted or re-created
// ends it at once.
func (c *copier) copyShard(ctx context.Context, ix *indexCopy, shard int, log *slog.Logger) (shardCopy, error) {
	for attempt := 1; ; attempt++ {
		sc, err := c.copyShardOnce(ctx, ix, shard)
		if err == nil {
			return sc, nil
		}
		if ctx.Err() != nil {
			return sc, ctx.Err()
		}
		if !retryable(err) {
			return sc, err
		}
		if attempt >= c.cfg.MaxAttempts {
			return sc, fmt.Errorf("%w: shard %d of %s: %d attempts, each from a new view, failed; the last: %w",
				ErrGaveUp, shard, ix.name, attempt, err)
		}
		d := c.backoff(attempt)
		log.Warn("bootstrap: reading the shard again from a new view", logkey.Shard, shard, logkey.Attempt, attempt, logkey.Error, err.Error(), logkey.RetryIn, d.String())
		if !sleep(ctx, d) {
			return sc, ctx.Err()
		}
	}
}

func (c *copier) copyShardOnce(ctx context.Context, ix *indexCopy, shard int) (shardCopy, error) {
	var out shardCopy
	// One coordinating node for the attempt: its stats, refresh, view and
	// settle checks agree with each other (es.Client.Pin).
	ec := c.cfg.ES.Pin()
	primary, err := c.primary(ctx, ec, ix, shard)
	if err != nil {
		return out, err
	}
	fst, err := c.feed.shard(ctx, c.cfg.Redis, ix.uuid, shard)
	if err != nil {
		return out, err
	}
	if !fst.Read && c.cfg.Reconciler == nil {
		// The relay has not read the shard: every document of it is in
		// the stream after the recorded position.
		return out, nil
	}
	if fst.History != "" && primary.HistoryUUID != "" && fst.History != primary.HistoryUUID {
		return out, fmt.Errorf("%w: shard %d of %s has history_uuid %s, but the feed read it under %s: a copy lacking acknowledged operations was made its primary (or a snapshot restored), so its seq nos no longer order its documents against the stream; the relay stops on it too: run `es-changefeed resync`, then bootstrap again",
			ErrHistoryReplaced, shard, ix.name, primary.HistoryUUID, fst.History)
	}
	// After the refresh every op at or below the gcp read above, and so
	// at or below the relay's checkpoint read before it, is in the view
	// opened next.
	if err := ec.Refresh(ctx, ix.name); err != nil {
		return out, err
	}
	settled := false
	var listed int64
	_, err = ec.SnapshotShard(ctx, ix.name, shard, primary.Node, c.cfg.PageSize, c.cfg.Listing, func(hits []es.Hit) error {
		if !settled {
			// Nothing of the view is handed before it is settled.
			if err := c.settle(ctx, ec, ix, shard, primary); err != nil {
				return err
			}
			settled = true
		}
		evs := make([]redisx.Event, 0, len(hits))
		for _, h := range hits {
			if c.cfg.Reconciler != nil {
				out.present = append(out.present, docHash(h.ID, h.Routing), shardHash(h.ID, shard))
			}
			if !fst.Read || h.SeqNo > fst.Checkpoint {
				out.deferred++
				continue
			}
			evs = append(evs, redisx.Event{Op: redisx.OpUpsert, Index: ix.name, IndexUUID: ix.uuid, Shard: shard,
				ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm, Version: h.Version,
				Source: h.Source, Target: ix.target})
		}
		err := c.hand(ctx, evs)
		out.n += int64(len(evs))
		listed += int64(len(hits))
		c.prog.add(int64(len(hits)))
		return err
	})
	if err == nil && !settled {
		// An empty view may hide documents too (a delete above the gcp).
		err = c.settle(ctx, ec, ix, shard, primary)
	}
	if err != nil {
		c.prog.add(-listed)
		return shardCopy{}, err
	}
	return out, nil
}

// primary reads the shard's primary. A 404 is looked at again a moment
// later with another node before the index counts as deleted.
func (c *copier) primary(ctx context.Context, ec *es.Client, ix *indexCopy, shard int) (es.ShardCheckpoints, error) {
	stats, err := ec.Stats(ctx, []string{ix.name})
	if es.IsNotFound(err) {
		if !sleep(ctx, time.Second) {
			return es.ShardCheckpoints{}, ctx.Err()
		}
		if _, err2 := c.cfg.ES.Pin().Stats(ctx, []string{ix.name}); es.IsNotFound(err2) {
			return es.ShardCheckpoints{}, fmt.Errorf("%w: %v", errVanished, err)
		}
	}
	if err != nil {
		return es.ShardCheckpoints{}, err
	}
	st, ok := stats[ix.name]
	switch {
	case !ok:
		return es.ShardCheckpoints{}, &es.Error{Op: "read shard stats of " + ix.name, Status: http.StatusOK, Reason: "the stats do not list the index", Err: es.ErrMalformed}
	case st.UUID != ix.uuid:
		return es.ShardCheckpoints{}, fmt.Errorf("%w (uuid %s, now %s)", errRecreated, ix.uuid, st.UUID)
	}
	sc, ok := st.Shard(shard)
	if !ok {
		return sc, fmt.Errorf("shard %d of %s: the primary is not started", shard, ix.name)
	}
	return sc, nil
}

// settle returns once what a view of the shard opened after reading
// primary may show can no longer be taken back: the relay's rule
// (es.Settle, docs/DESIGN.md §2). A new primary is es.ErrPrimaryChanged (the
// view is read again); a gcp that does not get there within SettleTimeout
// is an error too.
func (c *copier) settle(ctx context.Context, ec *es.Client, ix *indexCopy, shard int, primary es.ShardCheckpoints) error {
	return es.Settle(ctx, ix.name, shard, primary, c.cfg.SettleTimeout, func() (es.ShardCheckpoints, error) {
		return c.primary(ctx, ec, ix, shard)
	})
}

// retryable tells the failures a new view may cure from those it cannot: a
// handler error, a replaced history, the index gone or re-created (handled
// by the index loop), refused credentials and other 4xx refusals.
func retryable(err error) bool {
	var he *HandlerError
	var ee *es.Error
	switch {
	case errors.As(err, &he), errors.Is(err, ErrHistoryReplaced), errors.Is(err, errVanished), errors.Is(err, errRecreated):
		return false
	case errors.As(err, &ee):
		// 404 without index_not_found: the point in time or scroll
		// expired or was lost with its node (search_context_missing);
		// 408 and 409 are worth another try; other 4xx are refusals.
		return ee.Status == 0 || ee.Status == http.StatusOK || ee.Status == http.StatusNotFound || ee.Status == http.StatusRequestTimeout ||
			ee.Status == http.StatusConflict || ee.Status == http.StatusTooManyRequests || ee.Status >= 500
	}
	return true // a moved primary, a settle timeout, a primary not started
}

// backoff is the pause before attempt+1 (backoff.Delay from MinBackoff,
// capped at MaxBackoff).
func (c *copier) backoff(attempt int) time.Duration {
	return backoff.Delay(c.cfg.MinBackoff, c.cfg.MaxBackoff, attempt)
}
