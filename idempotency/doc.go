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
// higher seq_no still. A document is identified by
// "<index_uuid>/<shard>/<id>" (see Identity). Events that are not about one
// document (index_deleted, snapshot_start, snapshot_end) are not fenced:
// ShouldApply says yes to them every time.
//
// # The fence
//
// A Fence is one Redis hash (redisx.Keys.Fence(name) for a feed's fences):
// field = identity, value = the order of the last event applied, as a
// decimal string. The value only ever rises. Two ways to use it:
//
//   - ApplyRedis runs one Lua script that compares the event with the
//     fence, performs a Redis side effect (Set or Del) and records the
//     order, atomically. Nothing can slip between check and write, even with
//     many consumers: this is the strict way, for sinks that write to Redis.
//   - ShouldApply, then the write, then Record (or the Middleware that does
//     this around any Handler) for sinks outside Redis. Check and record are
//     separate round trips: within one redisx.Pool the events of a document
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
// A Lua script may only touch keys of one hash slot. The fence hash and
// every key of an ApplyRedis effect must therefore share a hash tag, for
// instance "escf:{cache}:fence:orders" with "cache:{cache}:orders:42".
// Otherwise the server refuses the script with a CROSSSLOT error, which
// ApplyRedis returns as is.
//
// # Growth
//
// The hash keeps one field (about 40 bytes plus the document id) for every
// document it ever fenced, deleted ones included: forgetting a deleted
// document would let a late, older upsert resurrect it. Use one fence per
// sink and drop it with the sink.
//
// A Fence is safe for concurrent use. Its methods block on Redis round
// trips and honor the context.
package idempotency
