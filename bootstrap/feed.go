package bootstrap

import (
	"context"
	"errors"
	"sort"

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

// shard reads a shard's checkpoint and history from its partition's
// checkpoints hash: every op at or below the checkpoint is in the stream
// (Read is false when the relay has not read the shard yet).
func (fs *feedState) shard(ctx context.Context, rdb redis.UniversalClient, uuid string, shard int) (checkpoint.Cursor, error) {
	keys := redisx.PartitionKeys(fs.feed, redisx.Partition(uuid, shard, fs.partitions), fs.partitions)
	return checkpoint.ReadCursor(ctx, rdb, keys, checkpoint.ShardID{IndexUUID: uuid, Shard: shard})
}
