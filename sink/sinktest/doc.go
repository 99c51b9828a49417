// Package sinktest is the contract every sink of package sink keeps, as one
// test suite each sink runs from its own _test.go:
//
//	func TestFile_Contract(t *testing.T) {
//		sinktest.Run(t, func(tb testing.TB) sinktest.Env { … }, sinktest.Features{Appends: true, Positions: true})
//	}
//
// Run calls the Factory once per case for a fresh sink and what the suite
// needs around it: a way to read back what the sink holds (Env.Holds) or
// delivered (Env.Delivered), so that every case decides from the sink's
// state, never from logs; a Gate that makes its target hang; a check that
// the clients passed in are still open. Features says what the sink
// promises; a case for a promise the sink does not make is skipped with
// the name of the feature.
//
// The cases (subtests of Run):
//
//   - Features: the flags match the sink (it implements redisx.Positions
//     and sink.Reconciler exactly when Features says so) and the Env has
//     what they need.
//   - ConcurrentHandlers: many goroutines call the handler at once; an
//     Ordered sink ends with the newest version of every document, an
//     Appends sink delivered every event once, each intact.
//   - PerDocumentOrder: an event whose handler returned nil is applied
//     (visible before Close); an Ordered sink never lets an older event
//     win over a newer one (upserts and deletes, a delete ordering after
//     the upsert with its seq_no); an Appends sink delivers the events of
//     a document handled one after the other in that order.
//   - Redelivery: the same event twice returns nil twice and changes
//     nothing in an Ordered sink; an Appends sink delivers it again.
//   - DeleteUnseen: a delete of an id the sink never saw is a success
//     (docs/CONSUMING.md: deletes can be redundant), and an Ordered sink
//     records its order: an older upsert after it does not bring the
//     document back.
//   - OtherOps: snapshot markers and the index_deleted of an index the
//     sink never saw are a success.
//   - ErrClosed: after Close a handler call returns an error wrapping
//     sink.ErrClosed that is not permanent, what was applied stays, and a
//     second Close returns nil.
//   - CloseWhileHandling: Close while goroutines call the handler: each
//     call returns nil (and its event was applied) or a retryable
//     ErrClosed.
//   - CloseDeadline (CloseAborts): with the target hanging and a handler
//     stuck on it, Close(ctx) returns promptly once ctx ends, with an
//     error wrapping ctx's; the stuck handler, once the target answers
//     again, never returns a permanent error.
//   - ClientsPassedIn: Close leaves the clients passed in open.
//   - Positions: the redisx.Positions contract: a recorded position only
//     goes up, survives a new sink on the same store, goes down only by
//     Reset, and a lead below one recorded earlier is a
//     *redisx.BehindError that still records the new position.
//   - Reconciler: Reconcilable is nil and Held lists exactly the documents
//     whose last applied event is an upsert, with its seq_no.
//
// Adding a sink: its file in package sink, its entry in consume's table
// (consumeSinks in sinks.go), and a Test<Sink>_Contract that calls Run
// (README.md, "Adding a sink").
package sinktest
