package deletes

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// addScratch records listed documents (ARGV[2..]: id, seq no, …) in a
// scan's scratch hash (KEYS[1]) with a TTL (ARGV[1], seconds), only while
// the feed's meta hash (KEYS[2]) exists: a Redis that lost the feed's
// state (restarted empty) gets no key from a scan still running, whatever
// the relay has not noticed yet. (TYPE, not EXISTS: the relay's documented
// ACL has it.)
var addScratch = redis.NewScript(`
if redis.call('TYPE', KEYS[2]).ok == 'none' then
  return redis.error_reply('ESCFNOSTATE the feed state is gone: ' .. KEYS[2] .. ' does not exist')
end
for i = 2, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
`)

// migrateChunk is how many ids one transaction of a migration moves.
const migrateChunk = 1000

// migration is what a scan of a shard still on the layout before ranges
// found: the ids of its old set that are gone, and their routing. The
// scan's commit emits their deletes and drops the old set.
type migration struct {
	gone    []string
	routing map[string]string
}

// migrate moves a shard's delivered set of the layout before ranges
// (redisx.Keys.Delivered, and its routing hash) into delivered ranges. It
// lists the shard's live documents with their seq nos into a scratch hash
// (escf_delete_listed_ids_total counts them), records every delivered id
// that is live in the range of its seq no, and re-checks the others like
// any candidate. The ranges are written in chunks: until the scan's commit
// drops the set, an id may be in both layouts, which changes nothing (an
// entry at a document's live seq no is what the relay would have written).
// A crash or an abort leaves the set whole, and the next scan starts over.
func (s *Scanner) migrate(ctx context.Context, ec *es.Client, sh Shard, legacy int64, fail scanError) (*migration, error) {
	fail.log.Info("moving the shard's delivered ids into seq-no ranges (its first scan since the upgrade)", logkey.IDs, legacy)
	sc0, err := s.primaryView(ctx, ec, sh, fail)
	if err != nil {
		return nil, err
	}
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return nil, fail.abort("%v", err)
	}
	gone, err := s.migrationPass(ctx, ec, sh, sc0, fail)
	if err != nil {
		return nil, err
	}
	if len(gone) > 0 && float64(len(gone)) > s.cfg.MaxDeleteFraction*float64(legacy) {
		s.confirmations.Add(1)
		fail.log.Info("delete scan would delete a large share of the shard: confirming with a second scan",
			logkey.Gone, len(gone), logkey.Delivered, legacy, logkey.MaxFraction, s.cfg.MaxDeleteFraction)
		again, err := s.migrationPass(ctx, ec, sh, sc0, fail)
		if err != nil {
			return nil, err
		}
		gone = intersect(gone, again)
	}
	m := &migration{gone: gone, routing: map[string]string{}}
	if len(gone) > 0 {
		vals, err := checkpoint.ReadLegacyRouting(ctx, s.cfg.Client, s.cfg.Keys, sh.id(), gone)
		if err != nil {
			return nil, fail.abort("%v", err)
		}
		for i, r := range vals {
			if r != "" {
				m.routing[gone[i]] = r
			}
		}
	}
	return m, nil
}

// migrationPass lists the shard's live documents into the scratch hash,
// records each id of the old set that is live in the range of its seq no,
// and returns the others the re-check confirms gone (after the wait until
// the global checkpoint covers what it saw). An id the re-check finds live
// is recorded where it found it.
func (s *Scanner) migrationPass(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, fail scanError) ([]string, error) {
	k := s.cfg.Keys
	rdb := s.cfg.Client
	scratch := k.Scan(sh.UUID, sh.Shard)
	set := k.Delivered(sh.UUID, sh.Shard)
	if err := rdb.Del(ctx, scratch).Err(); err != nil {
		return nil, fail.abort("clear scratch hash: %v", err)
	}
	s.listings.Add(1)
	start := time.Now()
	countBefore, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, -1, -1)
	if err != nil {
		return nil, fail.abort("%v", err)
	}
	listed, err := ec.ListShard(ctx, sh.Index, sh.Shard, sc0.Node, s.cfg.PageSize, s.cfg.Listing, func(refs []es.DocRef) error {
		args := make([]any, 1, 1+2*len(refs))
		args[0] = int64(scratchTTL / time.Second)
		for _, r := range refs {
			args = append(args, r.ID, r.SeqNo)
		}
		return addScratch.Run(ctx, rdb, []string{scratch, k.Meta()}, args...).Err()
	})
	if err != nil {
		return nil, fail.abort("%v", err)
	}
	s.listedIDs.Add(listed)
	countAfter, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, -1, -1)
	if err != nil {
		return nil, fail.abort("%v", err)
	}
	sc1, err := s.samePrimary(ctx, ec, sh, sc0, "listing", fail)
	if err != nil {
		return nil, err
	}
	// With no write during the listing, the counts taken around it and the
	// listing must agree exactly.
	if sc1.MaxSeqNo == sc0.MaxSeqNo && (countBefore != listed || countAfter != listed) {
		return nil, fail.abort("listed %d ids but _count said %d before and %d after, with no write in between", listed, countBefore, countAfter)
	}
	if n, err := rdb.HLen(ctx, scratch).Result(); err != nil || n != listed {
		return nil, fail.abort("scratch hash holds %d ids, the listing %d (%v)", n, listed, err)
	}
	// Walk the old set: nothing else writes it any more.
	var cands []string
	var cursor uint64
	for {
		ids, next, err := rdb.SScan(ctx, set, cursor, "", migrateChunk).Result()
		if err != nil {
			return nil, fail.abort("SSCAN %s: %v", set, err)
		}
		if len(ids) > 0 {
			var place []checkpoint.Doc
			seqs, err := rdb.HMGet(ctx, scratch, ids...).Result()
			if err != nil {
				return nil, fail.abort("read listed seq nos: %v", err)
			}
			routing, err := checkpoint.ReadLegacyRouting(ctx, rdb, k, sh.id(), ids)
			if err != nil {
				return nil, fail.abort("%v", err)
			}
			for i, docID := range ids {
				v, ok := seqs[i].(string)
				if !ok {
					cands = append(cands, docID)
					continue
				}
				seq, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fail.abort("scratch hash holds %q for %q", v, docID)
				}
				place = append(place, checkpoint.Doc{ID: docID, Routing: routing[i], SeqNo: seq})
			}
			if err := s.record(ctx, sh, place); err != nil {
				return nil, err
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	fail.log.Debug("listed live ids", logkey.Listed, listed, logkey.Candidates, len(cands), logkey.Took, time.Since(start).String())
	if len(cands) == 0 {
		return nil, nil
	}
	cands = uniq(cands) // SSCAN may return an id twice
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return nil, fail.abort("%v", err)
	}
	present, err := ec.Present(ctx, sh.Index, sh.Shard, sc0.Node, cands)
	if err != nil {
		return nil, fail.abort("%v", err)
	}
	var gone []string
	var found []checkpoint.Doc
	for _, docID := range cands {
		if ref, ok := present[docID]; ok {
			found = append(found, checkpoint.Doc{ID: docID, Routing: ref.Routing, SeqNo: ref.SeqNo})
		} else {
			gone = append(gone, docID)
		}
	}
	if err := s.record(ctx, sh, found); err != nil {
		return nil, err
	}
	if len(gone) == 0 {
		return nil, nil
	}
	if err := s.waitDurable(ctx, ec, sh, sc0); err != nil {
		return nil, fail.abort("%w", err)
	}
	return gone, nil
}

// record writes entries into the shard's delivered ranges, in chunks.
func (s *Scanner) record(ctx context.Context, sh Shard, docs []checkpoint.Doc) error {
	for start := 0; start < len(docs); start += migrateChunk {
		chunk := docs[start:min(start+migrateChunk, len(docs))]
		if err := s.cfg.Store.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh.id(): chunk}}); err != nil {
			return err
		}
	}
	return nil
}

func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0]
	for _, x := range ids {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
