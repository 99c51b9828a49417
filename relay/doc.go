// Package relay is the producer side of es-changefeed: per followed index,
// rounds of shard stats (each primary's global checkpoint), a refresh, and
// per-shard searches of the seq nos between the shard's checkpoint and its
// global checkpoint, sorted by _seq_no; each page's events, delivered ids,
// gap count and checkpoint are committed in one transaction by
// checkpoint.Store, fenced by the lease. With a deletes.Scanner it runs the
// due delete scans between the reads of an index.
//
// Relay.Run blocks until its context ends: it waits as a standby while
// another relay holds the lease, leads while it holds it, and releases it on
// the way out. Subpackage es is the cluster client.
package relay
