// Package deletes infers deleted documents: it proves when a shard cannot have
// deletes, lists the live ids of the shards that may, diffs them against the
// delivered ids, verifies the candidates and emits delete events.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package deletes
