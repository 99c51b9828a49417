package deletes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
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
// PerDocument one delete per delivered id (in transactions of 500, each
// with its SREM, so a crash resumes where it stopped), then one
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
	log.Info("index is gone: emitted its end and dropped its state", "index", g.Info.Name, "index_uuid", g.UUID,
		"deletes", deleted, "index_deleted_event", !g.NoIndexEvent)
	return deleted, nil
}

func forgetShardDocs(ctx context.Context, rdb redis.UniversalClient, keys redisx.Keys, store *checkpoint.Store, g Gone, n int) (int, error) {
	set := keys.Delivered(g.UUID, n)
	id := checkpoint.ShardID{IndexUUID: g.UUID, Shard: n}
	stamp, ok := g.Checkpoints[n]
	if !ok {
		stamp = -1
	}
	deleted := 0
	for {
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
				return deleted, nil
			}
			continue // SSCAN may return an empty first page
		}
		if len(ids) > forgetChunk {
			ids = ids[:forgetChunk]
		}
		routing, err := rdb.HMGet(ctx, keys.Routing(g.UUID, n), ids...).Result()
		if err != nil {
			return deleted, err
		}
		b := checkpoint.Batch{Removed: map[checkpoint.ShardID][]string{id: ids}, Events: make([]redisx.Event, len(ids))}
		for i, docID := range ids {
			r, _ := routing[i].(string)
			b.Events[i] = redisx.Event{Op: redisx.OpDelete, Index: g.Info.Name, IndexUUID: g.UUID, Shard: n, ID: docID,
				Routing: r, SeqNo: stamp, Target: g.Info.Target}
		}
		if err := store.Commit(ctx, b); err != nil {
			return deleted, err
		}
		deleted += len(ids)
	}
}

// ErrOtherCluster refuses to treat indices as gone when the cluster is not
// the one they were seen on.
var ErrOtherCluster = errors.New("the cluster is not the one the feed followed")
