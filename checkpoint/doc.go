// Package checkpoint is the feed's durable state machine in Redis: it loads
// per-shard checkpoints and commits one batch (stream entries, checkpoints,
// delivered ids) in one MULTI/EXEC fenced by the lease.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package checkpoint
