package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// ErrNoTargets: no Targets were given and the feed records no index.
var ErrNoTargets = errors.New("the feed records no index to copy")

// feedState is what the feed's Redis says of its indices. It is read once,
// after the caller recorded the stream position: an index it does not know
// is adopted by the relay later, so all its events follow that position.
type feedState struct {
	partitions int
	// indices are the recorded indices of every partition, by uuid.
	indices map[string]checkpoint.IndexInfo
	keys    redisx.Keys // feed-level
	feed    string
}

// readFeed loads every partition's state (read only: no lease).
func readFeed(ctx context.Context, rdb redis.UniversalClient, feed string) (*feedState, error) {
	rec, err := redisx.ReadPartitions(ctx, rdb, feed)
	if err != nil {
		return nil, err
	}
	fs := &feedState{partitions: rec.Effective(), indices: map[string]checkpoint.IndexInfo{}, keys: redisx.NewKeys(feed), feed: feed}
	for _, keys := range redisx.AllPartitionKeys(feed, fs.partitions) {
		store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys})
		if err != nil {
			return nil, err
		}
		st, err := store.Load(ctx)
		if err != nil {
			return nil, err
		}
		for uuid, info := range st.Indices {
			fs.indices[uuid] = info
		}
	}
	return fs, nil
}

// targets are the distinct expressions the feed recorded, sorted.
func (fs *feedState) targets() []string {
	seen := map[string]bool{}
	var out []string
	for _, info := range fs.indices {
		if info.Target != "" && !seen[info.Target] {
			seen[info.Target] = true
			out = append(out, info.Target)
		}
	}
	sort.Strings(out)
	return out
}

// recorded returns the recorded names whose target is one of targets, with
// that target.
func (fs *feedState) recorded(targets []string) map[string]string {
	want := map[string]bool{}
	for _, t := range targets {
		want[t] = true
	}
	out := map[string]string{}
	for _, info := range fs.indices {
		if want[info.Target] {
			out[info.Name] = info.Target
		}
	}
	return out
}

// target is the expression the feed recorded for an index uuid, if any: the
// target its events carry.
func (fs *feedState) target(uuid string) (string, bool) {
	info, ok := fs.indices[uuid]
	return info.Target, ok && info.Target != ""
}

// generation reads the generation the relay gave an index uuid (the
// feed-level hash every partition's relay writes to); 0 when it has none:
// the relay has not adopted the index.
func (fs *feedState) generation(ctx context.Context, rdb redis.UniversalClient, uuid string) (int64, error) {
	key := fs.keys.Generations()
	s, err := rdb.HGet(ctx, key, uuid).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the generation of index uuid %s from %s: %w", uuid, key, err)
	}
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil || g < 1 {
		return 0, fmt.Errorf("%s field %s = %q is not a generation (want an integer >= 1)", key, uuid, s)
	}
	return g, nil
}

// shardState is what the feed holds of one shard now: the relay's
// checkpoint (every op at or below it is in the stream; read is false when
// the relay has not read the shard yet) and the history_uuid it read under
// ("" when not recorded).
type shardState struct {
	checkpoint int64
	read       bool
	history    string
}

// shard reads a shard's checkpoint and history from its partition's
// checkpoints hash.
func (fs *feedState) shard(ctx context.Context, rdb redis.UniversalClient, uuid string, shard int) (shardState, error) {
	keys := redisx.PartitionKeys(fs.feed, redisx.Partition(uuid, shard, fs.partitions), fs.partitions)
	vals, err := rdb.HMGet(ctx, keys.Checkpoints(), redisx.CheckpointField(uuid, shard), redisx.HistoryField(uuid, shard)).Result()
	if err != nil {
		return shardState{}, fmt.Errorf("read the checkpoint of shard %d of index uuid %s from %s: %w", shard, uuid, keys.Checkpoints(), err)
	}
	var st shardState
	if s, ok := vals[0].(string); ok {
		if st.checkpoint, err = strconv.ParseInt(s, 10, 64); err != nil {
			return shardState{}, fmt.Errorf("%s field %s = %q is not a checkpoint", keys.Checkpoints(), redisx.CheckpointField(uuid, shard), s)
		}
		st.read = true
	}
	st.history, _ = vals[1].(string)
	return st, nil
}
