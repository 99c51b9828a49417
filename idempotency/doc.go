// Package idempotency is a per-document fence in Redis: it lets a consumer
// apply redelivered or reordered change events at most once, and never an
// older version of a document over a newer one.
//
// # Order and identity
//
// Every upsert and delete event has an order: 2*seq_no, plus 1 for a delete
// (see Order). A delete's seq_no is the shard checkpoint at the scan that
// found it, at least the seq_no of the document's last upsert, so a delete
// orders after an upsert with the same seq_no; a re-created document has a
// higher seq_no still. A document is identified by its index uuid, shard
// and id (see Identity). Events that are not about one document
// (index_deleted, snapshot_start, snapshot_end) are not fenced:
// ShouldApply says yes to them every time.
//
// # Layout
//
// A fence keeps, per document, the order of the last event applied, as a
// decimal string in a Redis hash field "<shard>/<id>"; the value only ever
// rises. Each index (uuid) has hashes of its own, so that its fences can be
// dropped as a unit when it ends (see Config.Prefix):
//
//   - "<Prefix>:<index_uuid>": one hash per index (the default);
//   - "<Prefix>:<index_uuid>:<n>", n < Config.Shards: smaller hashes, and,
//     with a Prefix that carries no hash tag, spread over a Redis Cluster;
//   - "<Prefix>:{<tag>}:<index_uuid>" with Config.SlotOf: one hash per index
//     and hash slot, the tag (SlotTag) naming the slot of the document's
//     own key, e.g. its cache key. An ApplyRedis script then touches keys of
//     one slot, whatever the document's key looks like: with or without a
//     hash tag, with braces in its id.
//
// Earlier versions kept every fence of a name in one hash (field
// "<index_uuid>/<shard>/<id>"), which only grew and, in Redis Cluster, put
// every key of a sink in its slot. Config.Legacy names that hash (by
// default Prefix itself, which is where redisx.Keys.Fence put it): a
// document with no fence in the new layout is fenced by its field there,
// so an upgrade lets no old event through; it is never written again, and
// an index's fields leave it when the index ends. Config.Key still selects
// the old layout (deprecated).
//
// # Two ways to use it
//
//   - ApplyRedis runs one Lua script that compares the event with the
//     fence, performs a Redis side effect (Set or Del) and records the
//     order, atomically. Nothing can slip between check and write, even with
//     many consumers: this is the strict way, for sinks that write to Redis.
//   - ShouldApply, then the write, then Record (or the Middleware that does
//     this around any Handler) for sinks outside Redis. Check and record are
//     separate round trips: within one consumer.Pool the events of a document
//     are handled one at a time, so redeliveries and stale reclaims are
//     skipped; but two consumers racing on one document can both pass the
//     check, and the older may write last. Targets that can compare
//     versions themselves (Elasticsearch external versions, SQL "WHERE
//     version < $1") should, and use the fence only to skip work.
//
// Record never lowers the stored order, so concurrent Records of any
// versions leave the newest one.
//
// # Redis Cluster
//
// A Lua script may only touch keys of one hash slot. With SlotOf
// returning the effect's key, the fence is in that key's slot (Slot
// computes it by Redis's hash-tag rule). Without SlotOf the fence's hashes
// are where Prefix puts them: a Prefix with a hash tag puts them in its
// slot, and every key of an ApplyRedis effect must then carry that tag,
// e.g. Prefix redisx.CacheFenceKey("orders") (escf:{cache}:fence:orders)
// with "cache:{cache}:orders:42".
// Otherwise the server refuses the script with a CROSSSLOT error, which
// ApplyRedis returns as is. The legacy hash is read only where it shares
// the document's slot (earlier versions required that of every key).
//
// # The end of an index
//
// When an index ended (its index_deleted event was handled), EndIndex
// drops its hashes, and their memory returns. That is safe because an
// index's uuid never comes back (a re-created index has a new one), and
// the relay writes index_deleted after every event of the index in the
// partition's stream (docs/DESIGN.md, "Deletes"): index_deleted is the
// newest state of every document of the index. What can still reach a
// consumer afterwards are events written before it: events other lanes or
// consumers were applying at that moment, pending events reclaimed after
// --min-idle and retried, and with --partitions the events of the index's
// other shards, whose streams have no order against this one. None of
// them is newer than the end. Left unfenced, such an event would be
// applied (maybe an older version over a newer one) and would write its
// fence again, with nothing left to remove it. So EndIndex leaves in each
// hash it drops a marker (field EndedField) that refuses every event of
// the index, and the marker expires after Config.EndGrace (default one
// hour: four times a reclaim-and-retry cycle at the consumer's defaults,
// --min-idle 60s × --max-deliveries 10 with backoff); the process that ran
// EndIndex also remembers the end for the grace. An event of the index
// that arrives later still (a partition whose consumers were down longer
// than the grace) is applied and fenced as if the index lived, and that
// fence stays: raise EndGrace where that can happen. A marker is a small
// key (about 130 bytes, 180 with its overhead); with SlotOf only the slots
// that held fences of the index get one, at most 16,384 (about 3 MB) per
// index, gone after the grace; in another process, a late event of a
// document alone in its slot is therefore not refused.
//
// The relay emits index_deleted without --deletes, or with
// --index-deleted-event; with --deletes alone an index ends with one
// delete per document, and those documents' fences stay (each a delete's
// order, as for every deleted document).
//
// # Growth
//
// While an index lives, its fences keep one field (about 35 to 60 bytes
// plus the document id) for every document it ever fenced, deleted ones
// included: forgetting a deleted document would let a late, older upsert
// resurrect it. EndIndex returns them; a sink dropped for good can delete
// the keys of its Prefix.
//
// # Tombstones
//
// A sink whose target orders versions itself (Elasticsearch external
// versions) needs no fence for upserts, but the target remembers a delete
// only for a while (index.gc_deletes). Tombstones keep just the deletes,
// for a limited time (TombstonesConfig.Keep, 24h by default), in hashes
// per index and time bucket that expire by themselves: an upsert older
// than a recorded delete is skipped however late it comes within Keep, and
// the memory is that of the deletes of the last Keep (about 80 bytes each
// with 20-character ids).
//
// # Permissions
//
// ApplyRedis, ShouldApply and Record run scripts (EVALSHA, EVAL) that call
// HGET and HSET on the fence (and SET or DEL on effect keys). EndIndex's
// script calls UNLINK, HSET and PEXPIRE; on a legacy or Key hash it runs
// HSCAN and HDEL.
//
// A Fence is safe for concurrent use. Its methods block on Redis round
// trips and honor the context.
package idempotency
