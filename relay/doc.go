// Package relay is the producer side of es-changefeed: it resolves the targets
// a user names and, per index, runs rounds of stats, refresh and per-shard
// searches bounded by each shard's global checkpoint, turning hits into events
// that checkpoint.Commit writes.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package relay
