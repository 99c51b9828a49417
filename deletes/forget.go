package deletes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// forgetChunk is how many delete events one transaction of ForgetIndex
// carries.
const forgetChunk = 500

// Gone describes an index the feed followed that no longer exists (or was
// re-created under a new uuid).
type Gone struct {
	UUID string
	Info checkpoint.IndexInfo
	// Checkpoints of its shards; deletes are stamped with them.
	Checkpoints map[int]int64
	// PerDocument emits one delete per delivered id before the
	// index_deleted event (which always ends the index: consumers drop
	// what they keep per index, such as its fences, on it).
	PerDocument bool
	// NoIndexEvent drops the index's state without its index_deleted
	// event: with partitions, only the partition owning the index's shard 0
	// emits it.
	NoIndexEvent bool
}

// ForgetIndex emits the end of an index and drops its state: with
// PerDocument one delete per delivered id (in transactions of about 500,
// each with the removal of its ids, so a crash resumes where it stopped), then one
// index_deleted event with its checkpoints, gap counters, sets and record
// dropped in the same transaction. It is safe to run again after a crash.
func ForgetIndex(ctx context.Context, rdb redis.UniversalClient, keys redisx.Keys, store *checkpoint.Store, g Gone, log *slog.Logger) (deleted int, err error) {
	if log == nil {
		log = slog.Default()
	}
	shards := map[int]bool{}
	for n := 0; n < g.Info.Shards; n++ {
		shards[n] = true
	}
	for n := range g.Checkpoints {
		shards[n] = true
	}
	var forget []checkpoint.ShardID
	for n := range shards {
		forget = append(forget, checkpoint.ShardID{IndexUUID: g.UUID, Shard: n})
	}
	final := checkpoint.Batch{ForgetShards: forget, ForgetIndices: []string{g.UUID}}
	if !g.NoIndexEvent {
		final.Events = []redisx.Event{{Op: redisx.OpIndexDeleted, Index: g.Info.Name, IndexUUID: g.UUID, Target: g.Info.Target}}
	}
	if g.PerDocument {
		for n := range shards {
			k, err := forgetShardDocs(ctx, rdb, keys, store, g, n)
			deleted += k
			if err != nil {
				return deleted, err
			}
		}
	}
	if err := store.Commit(ctx, final); err != nil {
		return deleted, err
	}
	log.Info("index is gone: emitted its end and dropped its state", logkey.Index, g.Info.Name, logkey.IndexUUID, g.UUID,
		logkey.Deletes, deleted, logkey.IndexDeletedEvent, !g.NoIndexEvent)
	return deleted, nil
}

// forgetShardDocs emits one delete per id delivered from shard n: first
// those of its delivered ranges, then those of a set of the layout before
// ranges (a feed not yet migrated). An id can be in more than one range
// (a stale entry: the document moved to a later range by an update the
// last scan did not reconcile) or in a range and the old set; it gets one
// delete. That needs the ids already emitted in memory, which only a shard
// with a gap (stale entries come with one) or an old set pays for. After a
// crash the dedupe starts over: a document with a stale entry may then get
// a second delete, stamped with the same seq no as the first.
func forgetShardDocs(ctx context.Context, rdb redis.UniversalClient, keys redisx.Keys, store *checkpoint.Store, g Gone, n int) (int, error) {
	id := checkpoint.ShardID{IndexUUID: g.UUID, Shard: n}
	stamp, ok := g.Checkpoints[n]
	if !ok {
		stamp = -1
	}
	set := keys.Delivered(g.UUID, n)
	legacy, err := rdb.SCard(ctx, set).Result()
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", set, err)
	}
	cur, err := checkpoint.ReadCursor(ctx, rdb, keys, id)
	if err != nil {
		return 0, err
	}
	var emitted map[string]bool
	if legacy > 0 || cur.Gap > 0 {
		emitted = map[string]bool{}
	}
	event := func(docID, routing string) redisx.Event {
		return redisx.Event{Op: redisx.OpDelete, Index: g.Info.Name, IndexUUID: g.UUID, Shard: n, ID: docID,
			Routing: routing, SeqNo: stamp, Target: g.Info.Target}
	}
	deleted := 0
	counts, _, err := checkpoint.RangeCounts(ctx, rdb, keys, id)
	if err != nil {
		return 0, err
	}
	ranges := make([]int64, 0, len(counts))
	for r := range counts {
		ranges = append(ranges, r)
	}
	slices.Sort(ranges)
	for start := 0; start < len(ranges); {
		end, size := start, int64(0)
		for end < len(ranges) && size < forgetChunk {
			size += counts[ranges[end]]
			end++
		}
		docs, err := checkpoint.ReadRanges(ctx, rdb, keys, id, ranges[start:end], nil)
		if err != nil {
			return deleted, err
		}
		b := checkpoint.Batch{Removed: map[checkpoint.ShardID][]checkpoint.Doc{id: docs}}
		for _, d := range docs {
			if emitted != nil {
				if emitted[d.ID] {
					continue
				}
				emitted[d.ID] = true
			}
			b.Events = append(b.Events, event(d.ID, d.Routing))
		}
		if err := store.Commit(ctx, b); err != nil {
			return deleted, err
		}
		deleted += len(b.Events)
		start = end
	}
	for legacy > 0 {
		ids, _, err := rdb.SScan(ctx, set, 0, "", forgetChunk).Result()
		if err != nil {
			return deleted, fmt.Errorf("list delivered ids of %s: %w", set, err)
		}
		if len(ids) == 0 {
			left, err := rdb.SCard(ctx, set).Result()
			if err != nil {
				return deleted, err
			}
			if left == 0 {
				break
			}
			continue // SSCAN may return an empty first page
		}
		if len(ids) > forgetChunk {
			ids = ids[:forgetChunk]
		}
		routing, err := checkpoint.ReadLegacyRouting(ctx, rdb, keys, id, ids)
		if err != nil {
			return deleted, err
		}
		b := checkpoint.Batch{LegacyRemoved: map[checkpoint.ShardID][]string{id: ids}}
		for i, docID := range ids {
			if emitted[docID] {
				continue
			}
			emitted[docID] = true
			b.Events = append(b.Events, event(docID, routing[i]))
		}
		if err := store.Commit(ctx, b); err != nil {
			return deleted, err
		}
		deleted += len(b.Events)
	}
	return deleted, nil
}

// ErrOtherCluster refuses to treat indices as gone when the cluster is not
// the one they were seen on.
var ErrOtherCluster = errors.New("the cluster is not the one the feed followed")
