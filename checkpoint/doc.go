// Package checkpoint is the feed's durable state machine in Redis: Store.Load
// reads per-shard checkpoints, gap counters and known indices;
// Store.Commit writes one batch (stream entries, checkpoints, delivered
// ids, gap counts) in one MULTI/EXEC under WATCH of the lease, so a crash at
// any point leaves stream and checkpoints consistent. Each commit also
// counts itself in the meta hash, so a Redis that came back with an older
// state (ErrRolledBack) is noticed before anything is written on it;
// Store.Rebase says what it lost.
package checkpoint
