package redisx

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Keys names a feed's Redis keys. Every key carries the same hash tag
// ({feed}, or {feed:p} for partition p), so one MULTI/EXEC over them is
// legal in Redis Cluster. This file is the one place key names are spelled:
// Layout lists every kind of key es-changefeed uses, and the README's Keys
// table is checked against it.
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

// Relays is the sorted set in which the relays of a partitioned feed
// register (relay/partition): member a relay's token, score when it
// expires (Unix ms) unless it heartbeats. It is feed-level: every
// partition's Keys name the same one.
func (k Keys) Relays() string { return "escf:{" + k.feed + "}:relays" }

// BulkTombstones is the prefix of the bulk sinks' delete tombstones
// (idempotency.TombstonesConfig.Prefix), hashes "<prefix>:<uuid>:<bucket>":
// a named fence (Fence) of every bulk sink of the feed.
func (k Keys) BulkTombstones() string { return k.Fence("bulk:deletes") }

// HoldGroup is the consumer group of the feed's stream that holds it at
// the position consume --bootstrap recorded for group, while it copies
// (trimming keeps what a group has not read), dropped when it is done.
func HoldGroup(group string) string { return "escf-bootstrap:" + group }

// The Redis sink's keys live in the cache's Redis, not the feed's, under
// the tag {cache}: one sink, whatever feed it follows.

// CacheFenceKey is the Redis sink's fence hash of earlier versions, and
// the prefix of its fence hashes "<prefix>:<uuid>" (sink.RedisConfig
// FenceKey, FencePrefix): the fence of the sink named name.
func CacheFenceKey(name string) string { return "escf:{cache}:fence:" + name }

// CacheClusterFencePrefix is the prefix of the Redis sink's fence hashes
// in a Redis Cluster, "<prefix>:{<slot tag>}:<uuid>": without braces, each
// hash takes the slot of its documents' keys.
func CacheClusterFencePrefix(name string) string { return "escf:fence:" + name }

// CachePositionsKey is the hash in which the Redis sink named name records
// how far it applied each stream for each group (field "<stream>|<group>").
func CachePositionsKey(name string) string { return "escf:{cache}:applied:" + name }

// PartitionStreams names the streams of every partition of a feed in one
// string, for logs and messages: escf:{<feed>:0..<P-1>}:events.
func PartitionStreams(feed string, partitions int) string {
	return "escf:{" + feed + ":0.." + strconv.Itoa(partitions-1) + "}:events"
}

// metaScanPattern matches the meta hash of every feed and partition (SCAN
// MATCH): ListFeeds finds feeds by it.
const metaScanPattern = "escf:{*}:meta"

// feedOfMeta is the feed whose meta hash key is k: escf:{<feed>}:meta, or
// escf:{<feed>:<p>}:meta of one of its partitions.
func feedOfMeta(k string) (string, bool) {
	tag, ok := strings.CutPrefix(k, "escf:{")
	if !ok {
		return "", false
	}
	if tag, ok = strings.CutSuffix(tag, "}:meta"); !ok {
		return "", false
	}
	if f, p, ok := strings.Cut(tag, ":"); ok {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || strconv.Itoa(n) != p {
			return "", false
		}
		tag = f
	}
	if ValidateFeed(tag) != nil {
		return "", false
	}
	return tag, true
}

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

// KeySpec is one kind of key es-changefeed uses, as the README's Keys table
// lists it.
type KeySpec struct {
	// Pattern is the key's name: {feed} stands for the feed's hash tag
	// ({<feed>}, or {<feed>:<p>} for partition p of a partitioned feed),
	// <…> for a part that varies.
	Pattern string
	// Type is the Redis type (stream, hash, set, zset, string), or
	// "consumer group".
	Type string
	// Content is what it holds, in short (the README says more).
	Content string
}

// layout is Layout's table. Each constructor of this file builds one of
// its patterns and each pattern has a constructor (TestLayout_Constructors).
var layout = []KeySpec{
	{"escf:{feed}:events", "stream", "the change events"},
	{"escf:{feed}:checkpoints", "hash", "<uuid>/<shard> -> checkpoint; …/at, …/gap, …/origin, …/history (CheckpointField, GapField, OriginField, HistoryField)"},
	{"escf:{feed}:indices", "hash", "<uuid> -> index JSON (checkpoint.IndexInfo)"},
	{"escf:{feed}:dlv:<index_uuid>:<shard>:<r>", "hash", "ids delivered in range r of RangeSize seq nos: id -> offset [routing]"},
	{"escf:{feed}:dlvcount:<index_uuid>:<shard>", "hash", "r -> size of range r, total -> their sum"},
	{"escf:{feed}:delivered:<index_uuid>:<shard>", "set", "ids delivered, layout before ranges (read, moved by a delete scan)"},
	{"escf:{feed}:routing:<index_uuid>:<shard>", "hash", "id -> custom routing, layout before ranges"},
	{"escf:{feed}:scan:<index_uuid>:<shard>", "hash", "scratch of a delete scan moving the layout before ranges: id -> seq no"},
	{"escf:{feed}:tokens", "hash", "<uuid>/<shard> or - -> <token> <count> of the last commit"},
	{"escf:{feed}:meta", "hash", "feed facts: created, commits, rollbacks, partitions, lease owner, backpressure"},
	{"escf:{feed}:applied", "hash", "group -> the applied position its sink last recorded in its own store"},
	{"escf:{feed}:lease", "string", "the owning relay's token, PX TTL"},
	{"escf:{feed}:generations", "hash", "<uuid> -> generation of its index name; name:<index> -> the name's last"},
	{"escf:{feed}:dead", "stream", "dead-lettered events"},
	{"escf:{feed}:lost", "hash", "group -> why it lost history"},
	{"escf:{feed}:relays", "zset", "live relays of a partitioned feed (feed-level): token -> expiry (Unix ms)"},
	{"escf-bootstrap:<group>", "consumer group", "holds the stream at a --bootstrap's position while it copies"},
	{"escf:{feed}:fence:<name>:<index_uuid>", "hash", "a named fence (idempotency), :<n> appended when split in shards: <shard>/<id> -> order of the last event applied; ended -> when the index ended"},
	{"escf:{feed}:fence:<name>", "hash", "fences of earlier versions: <uuid>/<shard>/<id> -> order (read, never written)"},
	{"escf:{feed}:fence:bulk:deletes:<index_uuid>:<bucket>", "hash", "the bulk sinks' delete tombstones: <shard>/<id> -> order"},
	{"escf:{cache}:fence:<name>:<index_uuid>", "hash", "the Redis sink's fences, in the cache's Redis"},
	{"escf:fence:<name>:{<tag>}:<index_uuid>", "hash", "the same in a Redis Cluster, one hash per slot of the documents' keys"},
	{"escf:{cache}:fence:<name>", "hash", "the Redis sink's fences of earlier versions (read, never written)"},
	{"escf:{cache}:applied:<name>", "hash", "<stream>|<group> -> how far the Redis sink applied it"},
}

// Layout returns every kind of key es-changefeed writes or reads: the
// README's Keys table lists exactly these patterns, with these types.
func Layout() []KeySpec { return slices.Clone(layout) }
