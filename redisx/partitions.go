package redisx

// The partition count a feed records, and the check every command makes
// against it. Written for the consumer and status side of issue #10; the
// relay side (run, resync) may use it as well: ReadPartitions/CheckPartitions
// only read, RecordPartitions is the relay's HSETNX.

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// MetaPartitions is the field of the feed-level meta hash
// (NewKeys(feed).Meta()) that records the feed's partition count. The
// first relay run with --partitions P > 1 writes it (HSETNX); it never
// changes afterwards.
const MetaPartitions = "partitions"

// MaxPartitions bounds a feed's partition count.
const MaxPartitions = 1024

// DefaultPartitions is the partition count of a feed that records none:
// one stream, the layout of NewKeys.
const DefaultPartitions = 1

// PartitionRecord is what a feed's meta hash says of its partitions.
type PartitionRecord struct {
	// Partitions is the recorded count; 0 when none is recorded.
	Partitions int
	// Unpartitioned is set when the feed exists without a recorded count:
	// its meta hash exists (a relay with one partition followed an index)
	// without the partitions field.
	Unpartitioned bool
}

// Effective is the partition count to use: the recorded one, else 1.
func (r PartitionRecord) Effective() int { return max(r.Partitions, 1) }

// PartitionsError is a partition count asked for that does not match the
// count the feed records. Its message names no command-line flag: the CLI
// says which flag to change.
type PartitionsError struct {
	Feed string
	// Recorded is the feed's count (1 for a feed that exists unpartitioned).
	Recorded int
	// Passed is the count asked for.
	Passed int
}

func (e *PartitionsError) Error() string {
	return fmt.Sprintf("%s, not %d: use %d, or start a new feed; %s", e.Record(), e.Passed, max(e.Recorded, 1), PartitionsFix)
}

// Record says what the feed records, and where.
func (e *PartitionsError) Record() string {
	meta := NewKeys(e.Feed).Meta()
	if e.Recorded <= 1 {
		return fmt.Sprintf("feed %s exists with one partition (%s has no %s field)", e.Feed, meta, MetaPartitions)
	}
	return fmt.Sprintf("feed %s has %d partitions (%s %s)", e.Feed, e.Recorded, meta, MetaPartitions)
}

// PartitionsFix is why a PartitionsError is not repaired in place.
const PartitionsFix = "changing the partition count of a feed is not supported (its shards' positions live in their partition)"

// ErrBadPartitions marks a recorded partition count that is not one.
var ErrBadPartitions = errors.New("bad partition count")

// ParsePartitionRecord reads the record from a feed-level meta hash already
// fetched (HGETALL): for callers that read it anyway (status).
func ParsePartitionRecord(feed string, meta map[string]string) (PartitionRecord, error) {
	v, ok := meta[MetaPartitions]
	if !ok {
		return PartitionRecord{Unpartitioned: len(meta) > 0}, nil
	}
	return parsePartitions(feed, v)
}

func parsePartitions(feed, v string) (PartitionRecord, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxPartitions {
		return PartitionRecord{}, fmt.Errorf("%w: %s field %s = %q: want an integer in 1..%d (was it edited by hand?)",
			ErrBadPartitions, NewKeys(feed).Meta(), MetaPartitions, v, MaxPartitions)
	}
	return PartitionRecord{Partitions: n}, nil
}

// ReadPartitions reads the feed's partition record with HGET and TYPE on
// its feed-level meta hash (one slot; commands every user of the feed may
// run).
func ReadPartitions(ctx context.Context, rdb redis.UniversalClient, feed string) (PartitionRecord, error) {
	key := NewKeys(feed).Meta()
	pipe := rdb.Pipeline()
	get := pipe.HGet(ctx, key, MetaPartitions)
	typ := pipe.Type(ctx, key)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return PartitionRecord{}, fmt.Errorf("read the partition count of feed %s (%s): %w", feed, key, err)
	}
	v, gerr := get.Result()
	switch {
	case errors.Is(gerr, redis.Nil):
		return PartitionRecord{Unpartitioned: typ.Val() == "hash"}, nil
	case gerr != nil:
		return PartitionRecord{}, fmt.Errorf("read the partition count of feed %s (%s): %w", feed, key, gerr)
	}
	return parsePartitions(feed, v)
}

// Check refuses a partition count that does not match the record
// (*PartitionsError): a recorded count other than passed, or passed > 1
// for a feed that exists with one partition. A feed with no record and no
// meta hash accepts any count.
func (r PartitionRecord) Check(feed string, passed int) error {
	passed = max(passed, 1)
	switch {
	case r.Partitions > 0 && r.Partitions != passed:
		return &PartitionsError{Feed: feed, Recorded: r.Partitions, Passed: passed}
	case r.Partitions == 0 && r.Unpartitioned && passed > 1:
		return &PartitionsError{Feed: feed, Recorded: 1, Passed: passed}
	}
	return nil
}

// CheckPartitions reads the feed's record (ReadPartitions) and checks
// passed against it (PartitionRecord.Check).
func CheckPartitions(ctx context.Context, rdb redis.UniversalClient, feed string, passed int) error {
	r, err := ReadPartitions(ctx, rdb, feed)
	if err != nil {
		return err
	}
	return r.Check(feed, passed)
}

// RecordPartitions checks partitions against the feed's record and, for a
// feed with none and partitions > 1, records it (HSETNX on the feed-level
// meta hash; a concurrent writer's count wins and is checked against).
// With partitions <= 1 it only checks: a feed with one partition records
// nothing, as before partitions existed.
func RecordPartitions(ctx context.Context, rdb redis.UniversalClient, feed string, partitions int) error {
	r, err := ReadPartitions(ctx, rdb, feed)
	if err != nil {
		return err
	}
	if err := r.Check(feed, partitions); err != nil || r.Partitions > 0 || partitions <= 1 {
		return err
	}
	key := NewKeys(feed).Meta()
	set, err := rdb.HSetNX(ctx, key, MetaPartitions, strconv.Itoa(partitions)).Result()
	if err != nil {
		return fmt.Errorf("record the partition count of feed %s (%s): %w", feed, key, err)
	}
	if set {
		return nil
	}
	return CheckPartitions(ctx, rdb, feed, partitions)
}

// PartitionLabels are the const labels of partition p's collectors (the
// relays' of a Feed, and consume's).
func PartitionLabels(p int) prometheus.Labels { return prometheus.Labels{"partition": strconv.Itoa(p)} }
