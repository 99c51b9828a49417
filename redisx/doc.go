// Package redisx is the Redis side of es-changefeed, shared by the relay and
// the consumers. It imports no feature package.
//
//   - Keys names a feed's keys; they all share the hash tag {feed}, so one
//     MULTI/EXEC over them is legal on Redis Cluster. keys.go builds every
//     key name es-changefeed uses (the Redis sink's and the bootstrap hold
//     group's too), and Layout lists their kinds: the README's Keys table is
//     checked against it, and no other product file spells a name.
//     PartitionKeys names those of one partition of a feed split in several
//     ({feed:p});
//     ReadPartitions, CheckPartitions and RecordPartitions read, check and
//     record the partition count in the feed-level meta hash. FindFeed
//     tells whether a feed exists (a relay wrote its meta hash, its lease
//     or an entry of its stream) and ListFeeds which feeds a Redis holds.
//   - Event is one stream entry; its flat fields (Values, ParseEvent) and its
//     JSON line (MarshalJSON) are a public contract.
//   - NewClient builds a client from a redis://, rediss:// or Sentinel URL;
//     NewClientWithConfig adds a password kept out of the URL, a CA, a
//     client certificate and Sentinel (a failover client that follows the
//     master). Check turns a failed PING into one error naming the cause
//     (unreachable, not Redis, TLS untrusted or refused, credentials,
//     database, sentinels). PermissionHook reports commands refused with
//     NOPERM, so a process can stop instead of retrying them.
//   - Lease is the relay's fencing lease (SET NX PX, renewed at TTL/3).
//   - Handler (and Permanent, Chain) is what a sink offers a consumer
//     pool (package consumer): nil to have an event acknowledged, a
//     Permanent error to dead-letter it; Positions is where a sink records
//     how far it applied the stream, in a store of its own.
//   - ReadGroups and HistoryLostError tell what a consumer group can no
//     longer read; Rollback records the losses of the feed's Redis the
//     relay repaired.
//
// Consumers in other languages need only XREADGROUP and XACK on
// escf:{feed}:events, and the field list of Event.
package redisx
