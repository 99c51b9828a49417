// Package checkpoint is the feed's durable state machine in Redis: Store.Load
// reads per-shard checkpoints, gap counters and known indices;
// Store.Commit writes one batch (stream entries, checkpoints, delivered
// ids, gap counts) in one MULTI/EXEC under WATCH of the lease, so a crash at
// any point leaves stream and checkpoints consistent. Each commit also
// counts itself in the meta hash, so a Redis that came back with an older
// state (ErrRolledBack) is noticed before anything is written on it;
// Store.Rebase says what it lost.
//
// The package is the one reader of the feed's state hashes: Store.Load and
// Store.Meta for the holder of a Store, and ReadMeta, ReadCursor,
// ReadGeneration, ReadDeliveredSize, ReadLegacyRouting, RangeCounts and
// ReadRanges for the packages that only read them (status, bootstrap,
// deletes, sink), so their fields are known here and in Commit only.
package checkpoint
