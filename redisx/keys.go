package redisx

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Keys names a feed's Redis keys. Every key carries the same hash tag
// ({feed}), so one MULTI/EXEC over them is legal in Redis Cluster:
//
//	escf:{feed}:events                      stream of events
//	escf:{feed}:checkpoints                 hash  <uuid>/<shard> -> checkpoint
//	escf:{feed}:indices                     hash  <uuid> -> index JSON
//	escf:{feed}:delivered:<uuid>:<shard>    set   ids delivered as upserts
//	escf:{feed}:routing:<uuid>:<shard>      hash  id -> custom routing (routed ids only)
//	escf:{feed}:scan:<uuid>:<shard>         set   live ids of a delete scan in progress
//	escf:{feed}:meta                        hash  feed facts: created, targets (never deleted by the relay)
//	escf:{feed}:tokens                      hash  <uuid>/<shard> -> "<token> <count>" of the shard's last commit;
//	                                              "-" -> the same of the last commit that touched no shard
//	escf:{feed}:generations                 hash  <uuid> -> generation of its index name (1, 2, ... per re-creation)
//	escf:{feed}:fence:<name>:<uuid>         hash  <shard>/<id> -> order of the last event applied (idempotency);
//	                                              "ended" -> when the index ended (then the key expires)
//	escf:{feed}:fence:<name>:<uuid>:<n>     hash  the same, split in shards (idempotency.Config.Shards)
//	escf:{feed}:fence:<name>                hash  <uuid>/<shard>/<id> -> order: fences of earlier versions, read, never written
//	escf:{feed}:lease                       string owner token (PX TTL)
//	escf:{feed}:lost                        hash  group -> why it lost history (set by consumers, cleared by --bootstrap)
//	escf:{feed}:applied                     hash  group -> the applied position (Position.Lead) its sink last recorded in its own store
//	escf:{feed}:dead                        stream of dead-lettered events
type Keys struct {
	feed string
	tag  string
}

// DefaultFeed is the feed a command uses when none is named.
const DefaultFeed = "default"

// ValidateFeed checks a feed name: 1-100 characters, none of them braces,
// whitespace or ':' (they would break the hash tag or the key layout).
func ValidateFeed(feed string) error {
	if feed == "" {
		return errors.New(`feed name is empty: name the feed, such as "orders"`)
	}
	if len(feed) > 100 {
		return fmt.Errorf("feed name %q is %d characters long: use at most 100", feed, len(feed))
	}
	if i := strings.IndexAny(feed, "{}: \t\r\n"); i >= 0 {
		return fmt.Errorf("feed name %q contains %q: use letters, digits, '-', '_' or '.'", feed, feed[i])
	}
	return nil
}

// NewKeys returns the key names of a feed. The feed must pass ValidateFeed.
// They are also the keys of a feed with one partition, and the feed-level
// keys of a partitioned one (its meta hash records the partition count).
func NewKeys(feed string) Keys {
	return Keys{feed: feed, tag: "{" + feed + "}"}
}

// PartitionKeys returns the key names of partition p (0-based) of a feed
// split in partitions > 1: the same layout under the hash tag {feed:p}, so
// each partition's transactions stay in one slot of a Redis Cluster and
// partitions spread over its nodes. With partitions <= 1 it is NewKeys.
func PartitionKeys(feed string, p, partitions int) Keys {
	if partitions <= 1 {
		return NewKeys(feed)
	}
	return Keys{feed: feed, tag: "{" + feed + ":" + strconv.Itoa(p) + "}"}
}

// AllPartitionKeys returns the keys of every partition, in order.
func AllPartitionKeys(feed string, partitions int) []Keys {
	out := make([]Keys, max(partitions, 1))
	for p := range out {
		out[p] = PartitionKeys(feed, p, partitions)
	}
	return out
}

// Partition maps a shard to its partition: FNV-1a of "<uuid>/<shard>"
// modulo partitions. It is part of the feed's contract (a partition's
// stream carries the events of exactly its shards) and never changes.
func Partition(indexUUID string, shard, partitions int) int {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(CheckpointField(indexUUID, shard)))
	return int(h.Sum32() % uint32(partitions))
}

// Feed is the feed name.
func (k Keys) Feed() string { return k.feed }

// Events is the stream of change events.
func (k Keys) Events() string { return "escf:" + k.tag + ":events" }

// Checkpoints is the hash of per-shard checkpoints.
func (k Keys) Checkpoints() string { return "escf:" + k.tag + ":checkpoints" }

// Indices is the hash of the indices the feed has seen, by uuid.
func (k Keys) Indices() string { return "escf:" + k.tag + ":indices" }

// Delivered is the set of ids delivered as upserts from one shard, as
// feeds before the range layout kept them (DeliveredRange): a delete scan
// moves it into ranges, and nothing else writes it any more.
func (k Keys) Delivered(indexUUID string, shard int) string {
	return "escf:" + k.tag + ":delivered:" + indexUUID + ":" + strconv.Itoa(shard)
}

// Routing is the hash of custom routing values of the ids in Delivered
// (only ids that have one), so delete events can carry it.
func (k Keys) Routing(indexUUID string, shard int) string {
	return "escf:" + k.tag + ":routing:" + indexUUID + ":" + strconv.Itoa(shard)
}

// DeliveredRange is the hash of the ids delivered from one shard at seq
// nos r·RangeSize … r·RangeSize+RangeSize−1: field id, value the seq no's
// offset in the range, then a space and the id's custom routing if it has
// one ("17" or "17 user-4"). With at most RangeSize fields and short
// values Redis keeps it listpack-encoded (about 30 B per id).
func (k Keys) DeliveredRange(indexUUID string, shard int, r int64) string {
	return k.DeliveredRangePrefix(indexUUID, shard) + strconv.FormatInt(r, 10)
}

// DeliveredRangePrefix is DeliveredRange without its range number.
func (k Keys) DeliveredRangePrefix(indexUUID string, shard int) string {
	return "escf:" + k.tag + ":dlv:" + indexUUID + ":" + strconv.Itoa(shard) + ":"
}

// DeliveredCounts is the hash of one shard's delivered-range sizes: field
// r is the number of fields of DeliveredRange r, field "total" their sum.
func (k Keys) DeliveredCounts(indexUUID string, shard int) string {
	return "escf:" + k.tag + ":dlvcount:" + indexUUID + ":" + strconv.Itoa(shard)
}

// RangeSize is how many seq nos one DeliveredRange covers.
const RangeSize = 64

// Scan is the scratch set of live ids a delete scan of one shard lists.
func (k Keys) Scan(indexUUID string, shard int) string {
	return "escf:" + k.tag + ":scan:" + indexUUID + ":" + strconv.Itoa(shard)
}

// Meta is the hash of facts about the feed itself. It is written with the
// first index the feed follows and only resync rewrites it, so a stream
// without it means the feed's state was lost.
func (k Keys) Meta() string { return "escf:" + k.tag + ":meta" }

// Tokens is the hash of commit tokens: each commit (checkpoint.Store.Commit)
// writes a random token and its value of the meta commit counter, "<token>
// <count>", into field "<uuid>/<shard>" of every shard it touches (field
// TokenNoShard when it touches none), in its transaction. A commit whose
// reply was lost is then known to have landed, or not, by reading the
// field (checkpoint.ErrInDoubt).
func (k Keys) Tokens() string { return "escf:" + k.tag + ":tokens" }

// TokenNoShard is the Tokens field of commits that touch no shard.
const TokenNoShard = "-"

// Generations is the hash giving each index uuid the generation of its
// name: the first index of a name is 1, a re-created one 2, and so on. The
// relay writes it before any event of that uuid; the bulk sink builds
// external versions from it, so a re-created index's documents (seq nos
// restarting at 0) order after the old index's deletes. Field "<uuid>" ->
// generation; field "name:<index name>" -> the name's last generation.
func (k Keys) Generations() string { return "escf:" + k.tag + ":generations" }

// Lost is the hash of the consumer groups that lost history: group -> the
// error that said so. A pool refuses to run a group listed here; consume
// --bootstrap removes the group's field once it re-initialized it.
func (k Keys) Lost() string { return "escf:" + k.tag + ":lost" }

// Applied is the hash of the applied positions consumer groups' sinks
// recorded in stores of their own (Positions): group -> Lead, written
// after the sink's own write. A sink's store that holds less lost writes
// (Pool hands the entries on again).
func (k Keys) Applied() string { return "escf:" + k.tag + ":applied" }

// Fence is the prefix of a named fence's hashes (idempotency.Config.Prefix):
// "<Fence(name)>:<uuid>" holds, per document of an index, the order of the
// last event applied. Earlier versions kept every fence of the name in
// the one hash Fence(name), which is still read as a fallback. resync
// keeps every key under Fence("").
func (k Keys) Fence(name string) string { return "escf:" + k.tag + ":fence:" + name }

// Pattern matches every key of the feed, and no other feed's (for SCAN):
// glob characters of the feed name are escaped.
func (k Keys) Pattern() string {
	var b strings.Builder
	b.WriteString("escf:")
	for i := 0; i < len(k.tag); i++ {
		if strings.IndexByte(`*?[]\`, k.tag[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(k.tag[i])
	}
	b.WriteString(":*")
	return b.String()
}

// Lease is the relay lease.
func (k Keys) Lease() string { return "escf:" + k.tag + ":lease" }

// Dead is the dead-letter stream.
func (k Keys) Dead() string { return "escf:" + k.tag + ":dead" }

// CheckpointField is the checkpoints-hash field of one shard.
func CheckpointField(indexUUID string, shard int) string {
	return indexUUID + "/" + strconv.Itoa(shard)
}

// GapField is the checkpoints-hash field counting a shard's seq nos that
// were neither delivered nor proven harmless since its last delete scan
// (deletes, superseded updates, no-ops).
func GapField(indexUUID string, shard int) string {
	return CheckpointField(indexUUID, shard) + "/gap"
}

// HistoryField is the checkpoints-hash field holding the shard's
// history_uuid when the feed last read it.
func HistoryField(indexUUID string, shard int) string {
	return CheckpointField(indexUUID, shard) + "/history"
}

// OriginField is the checkpoints-hash field holding where the feed began
// reading a shard, when not from its beginning (--from now).
func OriginField(indexUUID string, shard int) string {
	return CheckpointField(indexUUID, shard) + "/origin"
}
