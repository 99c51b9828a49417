package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// The readers of the feed's state hashes for packages that do not hold a
// Store (status, bootstrap, deletes, sink, the CLI): with Store.Load and
// Commit, they are the only code that knows the fields of the checkpoints,
// generations, meta and delivered hashes. They only read, and need no
// lease.

// ErrBadGeneration marks a generations-hash field that holds no generation
// (an integer >= 1): the hash was edited by hand, or is not the feed's.
var ErrBadGeneration = errors.New("not a generation")

// ReadMeta reads the feed's meta hash (empty when the feed has none).
func ReadMeta(ctx context.Context, rdb redis.Cmdable, k redisx.Keys) (map[string]string, error) {
	m, err := rdb.HGetAll(ctx, k.Meta()).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.Meta(), err)
	}
	return m, nil
}

// ReadGeneration reads the generation of an index uuid from
// k.Generations(): 0 when it has none (the relay has not adopted the
// index). A field that is not a generation is an error wrapping
// ErrBadGeneration.
func ReadGeneration(ctx context.Context, rdb redis.Cmdable, k redisx.Keys, uuid string) (int64, error) {
	key := k.Generations()
	s, err := rdb.HGet(ctx, key, uuid).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the generation of index uuid %s from %s: %w", uuid, key, err)
	}
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil || g < 1 {
		return 0, fmt.Errorf("%s field %s = %q is %w (want an integer >= 1)", key, uuid, s, ErrBadGeneration)
	}
	return g, nil
}

// Cursor is what the checkpoints hash holds of one shard.
type Cursor struct {
	// Checkpoint is the shard's checkpoint: every op at or below it is in
	// the stream. Read is false (and Checkpoint -1) when the feed has not
	// read the shard yet.
	Checkpoint int64
	Read       bool
	// History is the history_uuid the feed last read the shard under (""
	// when not recorded).
	History string
	// Gap counts the seq nos read past without a hit since the shard's
	// last delete scan.
	Gap int64
}

// ReadCursor reads one shard's fields of the checkpoints hash k (the keys
// of the shard's partition) in one HMGET.
func ReadCursor(ctx context.Context, rdb redis.Cmdable, k redisx.Keys, id ShardID) (Cursor, error) {
	fields := []string{id.String(), redisx.HistoryField(id.IndexUUID, id.Shard), redisx.GapField(id.IndexUUID, id.Shard)}
	vals, err := rdb.HMGet(ctx, k.Checkpoints(), fields...).Result()
	if err != nil {
		return Cursor{}, fmt.Errorf("read the checkpoint of shard %s from %s: %w", id, k.Checkpoints(), err)
	}
	c := Cursor{Checkpoint: -1}
	if s, ok := vals[0].(string); ok {
		if c.Checkpoint, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Cursor{}, fmt.Errorf("%s field %s = %q is not a checkpoint", k.Checkpoints(), fields[0], s)
		}
		c.Read = true
	}
	c.History, _ = vals[1].(string)
	if s, ok := vals[2].(string); ok {
		if c.Gap, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Cursor{}, fmt.Errorf("%s field %s = %q is not a count", k.Checkpoints(), fields[2], s)
		}
	}
	return c, nil
}

// DeliveredSize is how much a shard's delivered state holds, from counters
// only (no range is read).
type DeliveredSize struct {
	// IDs is the counts hash's total: ids delivered and live when last
	// seen (an id updated into a later range since the last scan counts
	// twice until the scan).
	IDs int64
	// Ranges is the number of range hashes holding them.
	Ranges int64
	// Legacy is the ids in the delivered set of the layout before ranges,
	// which the shard's next delete scan moves into ranges.
	Legacy int64
}

// ReadDeliveredSize reads a shard's DeliveredSize: HGET and HLEN of its
// counts hash, SCARD of its set of the layout before ranges, in one
// pipeline.
func ReadDeliveredSize(ctx context.Context, rdb redis.Cmdable, k redisx.Keys, id ShardID) (DeliveredSize, error) {
	var total *redis.StringCmd
	var fields, old *redis.IntCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		total = p.HGet(ctx, k.DeliveredCounts(id.IndexUUID, id.Shard), "total")
		fields = p.HLen(ctx, k.DeliveredCounts(id.IndexUUID, id.Shard))
		old = p.SCard(ctx, k.Delivered(id.IndexUUID, id.Shard))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return DeliveredSize{}, fmt.Errorf("read the delivered ids of shard %s: %w", id, err)
	}
	var s DeliveredSize
	s.IDs, _ = total.Int64()
	s.Ranges = max(0, fields.Val()-1) // all fields but total
	s.Legacy = old.Val()
	return s, nil
}

// ReadLegacyRouting reads the custom routing of ids from a shard's routing
// hash of the layout before ranges (redisx.Keys.Routing): one value per id,
// in order, "" for an id without one.
func ReadLegacyRouting(ctx context.Context, rdb redis.Cmdable, k redisx.Keys, id ShardID, ids []string) ([]string, error) {
	out := make([]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	key := k.Routing(id.IndexUUID, id.Shard)
	vals, err := rdb.HMGet(ctx, key, ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("read the routing of %d ids from %s: %w", len(ids), key, err)
	}
	for i, v := range vals {
		out[i], _ = v.(string)
	}
	return out, nil
}
