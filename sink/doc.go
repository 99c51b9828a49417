// Package sink holds the consumer-side sinks that apply change events:
// Stdout (JSON lines), File (JSON lines, fsynced, rotated), HTTP (JSON
// batches to a webhook) and Redis (cache invalidation or refresh through an
// idempotency fence); the _bulk mirror into another cluster and Postgres
// (one PostgreSQL table per index, fenced, one transaction per batch) live
// here too.
//
// Every sink is built from its Config (zero fields take the documented
// defaults; Validate names the first bad field) and offers:
//
//   - Handler() redisx.Handler, to give to a consumer.Pool. The handler may be
//     called from many goroutines at once. nil means the event is applied
//     (durable, where the sink has a notion of durability); an error leaves
//     it pending for a retry; a redisx.Permanent error dead-letters it.
//   - Close(ctx), which stops accepting events (later calls return
//     ErrClosed, a retryable error), finishes or flushes what is in flight,
//     and releases what the sink opened. When ctx ends first it aborts what
//     can be aborted and returns ctx's error. A second Close returns nil.
//     Close what you opened: a sink never closes an io.Writer, *http.Client
//     or Redis client you passed in.
//
// Package sinktest is this contract as a test suite, which every sink runs
// (Test<Sink>_Contract).
//
// Delivery is at least once: an event whose handler returned an error, or
// whose context ended while a batch held it, may have been written and is
// written again when it is redelivered. Stdout, File and HTTP therefore
// carry enough to deduplicate (each line is the event with its index_uuid,
// shard, id and seq_no; HTTP batches carry an Idempotency-Key). The Redis
// sink deduplicates itself: it writes through an idempotency.Fence, so a
// redelivered or older event never overwrites a newer one.
//
// File and HTTP use group commit: handlers from many lanes hand their event
// to one writer goroutine, which writes everything pending as one batch (one
// fsync, one POST) and then releases all of their handlers at once.
package sink
