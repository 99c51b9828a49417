// Package deletes infers deleted documents. A search never shows a deleted
// document, so the relay keeps per shard the ids it delivered and, between
// the reads of an index, Scanner.Scan checks the shards that may have lost
// one: the gap proof (no seq no went undelivered since the last scan) and
// the count proof (as many documents up to the checkpoint as were
// delivered) skip shards that cannot have; otherwise the shard's live ids
// are listed from one frozen view into a scratch Redis set, SDIFF gives the
// candidates, an ids query re-checks them after a refresh, the global
// checkpoint must cover what the re-check saw, and one transaction emits a
// delete per gone id with its SREM. Any partial view aborts the scan:
// nothing is emitted from it.
//
// ForgetIndex ends an index that no longer exists: deletes for its
// delivered ids (or one index_deleted event), and its state dropped.
package deletes
