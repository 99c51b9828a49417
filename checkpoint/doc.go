// Package checkpoint is the feed's durable state machine in Redis: Store.Load
// reads per-shard checkpoints, gap counters and known indices;
// Store.Commit writes one batch (stream entries, checkpoints, delivered
// ids, gap counts) in one MULTI/EXEC under WATCH of the lease, so a crash at
// any point leaves stream and checkpoints consistent.
package checkpoint
