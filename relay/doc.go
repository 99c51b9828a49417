// Package relay is the producer side of es-changefeed: per followed index,
// rounds of shard stats (each primary's global checkpoint), a refresh, and
// per-shard searches of the seq nos between the shard's checkpoint and its
// global checkpoint, sorted by _seq_no; each page's events, delivered ids,
// gap count and checkpoint are committed in one transaction by
// checkpoint.Store, fenced by the lease, in order, while the shard's next
// page is already searched (one page ahead). With a deletes.Scanner it runs the
// due delete scans between the reads of an index.
//
// Relay.Run blocks until its context ends: it waits as a standby while
// another relay holds the lease, leads while it holds it, and releases it on
// the way out. A Relay is run once.
//
// Feed is what a program runs: from one FeedConfig (typed sub-configs
// Retention, Deletes, Snapshot, Durability) it builds each partition's
// lease, checkpoint.Store, deletes.Scanner and metrics, checks the feed and
// its targets at start (the target policy, policy.go), and runs one Relay,
// or for a feed of several partitions a partition.Manager with a fresh Relay
// for each acquisition of a partition. Subpackage es is the cluster client,
// partition the manager.
package relay
