// Package partition runs a partitioned feed (--partitions P > 1) from
// several relay processes.
//
// A feed split in P partitions has one stream, checkpoint hash, delivered
// sets and lease per partition, under the hash tag {feed:p}
// (redisx.PartitionKeys); a shard belongs to partition
// redisx.Partition(uuid, shard, P). Every relay process runs a Manager: it
// heartbeats in the feed-level ZSET redisx.Keys.Relays, counts the live
// relays N, and holds at most ceil(P/N) partition leases, taking free ones
// and giving back extras when relays join. A dead relay's leases expire
// after the lease TTL; the others see it within TTL/3 and take its
// partitions over within 2×TTL.
//
// The feed's partition count is recorded in its feed-level meta hash by
// redisx.RecordPartitions (escf:{feed}:meta field partitions) and a
// different count is refused: a shard's position lives in its partition.
package partition
