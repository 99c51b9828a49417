// Package bootstrap is the copy engine of `consume --bootstrap`: it hands a
// consumer every current document of a feed's indices, as the upserts the
// relay would have written for them, so that a consumer group placed at a
// stream position recorded before the copy joins the feed with no gap,
// however much of the stream was trimmed.
//
// # What Copy does
//
// The caller records the stream position first, then calls Copy, then
// moves its group to the recorded position. Copy:
//
//  1. finds the feed's indices: the expressions Config.Targets names, or
//     else those the feed recorded (the target of every index in its
//     indices hash, each partition's), resolved now; plus the recorded
//     indices themselves (a pattern the relay ran with --hidden). An index
//     whose uuid has no generation in the feed is skipped: the relay has
//     not adopted it yet, so all of its events come after the recorded
//     position.
//  2. per index, hands snapshot_start (with the index and its uuid), then
//     for every primary shard every document of ONE frozen view (a point
//     in time or a scroll pinned to the shard, after a refresh) as an
//     upsert with its seq_no, primary_term and version, then — when
//     Config.Reconciler is set — a delete for each document the sink holds
//     that the source no longer has, then snapshot_end with the count.
//  3. returns the counts.
//
// A view is handed only once it is settled: the shard's global checkpoint
// has reached the highest seq no the primary had assigned when the view
// was open, on the same primary, so no failover can take back what the
// copy handed. A page with a failed shard or a timeout, a listing shorter
// than its view's total, an expired view or a moved primary makes the
// shard start again from a new view (Config.MaxAttempts), never a short
// copy; a handler error aborts the copy with that error.
//
// docs/DESIGN.md (Bootstrap) has the argument why nothing is lost and
// nothing older lands over newer.
//
// # Concurrency and blocking
//
// Copy blocks until the copy is done, fails or ctx ends. It calls the
// handler from up to Config.Workers goroutines at once, for different
// documents; all of a shard's upserts return before the shard counts as
// copied, all of an index's events before its snapshot_end, and a
// snapshot_start returns before any upsert of its index is handed. The
// handler must be safe for concurrent use (every sink's is). Copy closes
// nothing it was given.
package bootstrap
