package sink

import (
	"context"
	"errors"
)

// ErrNotReconcilable marks a sink whose documents cannot be attributed to
// one source index (see Reconciler.Reconcilable).
var ErrNotReconcilable = errors.New("the sink cannot say which source index its documents came from")

// HeldDoc is a document a sink holds, with the order of the event the sink
// last applied to it.
type HeldDoc struct {
	ID string
	// Routing is the document's custom routing ("" for none). With Shard
	// -1 the document is identified by ID and Routing, so it must be the
	// routing the document was written with.
	Routing string
	// Shard is the source shard the sink knows the document by (it is then
	// identified by ID and Shard, as the feed's fences do), or -1 when it
	// does not know it (the bulk sink: a target index has shards of its
	// own).
	Shard int
	// SeqNo is the seq no of the upsert the sink applied last, when that
	// upsert came from the index being reconciled (Older false).
	SeqNo int64
	// Older is set when the sink holds the document from an older index of
	// the same name (a lower generation: the index was deleted and created
	// again since). SeqNo then counts in that older index and is
	// meaningless in the current one.
	Older bool
}

// Reconciler is implemented by sinks that hold documents themselves (the
// bulk mirror), so that a bootstrap copy can remove what the sink still
// holds but the source no longer has: documents deleted while the sink was
// not consuming, whose delete events were trimmed from the stream.
//
// The copy (package bootstrap) reads every document of a source index from
// frozen views, lists the sink's documents of that index with Held, checks
// each one the views lacked against the cluster once more, and hands a
// delete event for it to the sink's handler, stamped so that it removes
// exactly the version the sink holds and never a newer one (see
// docs/DESIGN.md, Bootstrap). The sink applies that delete like any other:
// through its handler and its fences.
//
// Sinks without state of their own (stdout, file, http) do not implement
// it: for them the copy's snapshot_start and snapshot_end events say which
// documents the source had.
type Reconciler interface {
	// Reconcilable returns nil when Held can attribute the sink's documents
	// to one source index, and otherwise an error wrapping
	// ErrNotReconcilable that says why (a bulk sink whose IndexTemplate
	// names neither {index} nor {index_uuid} mixes several source indices
	// in one target). It does no I/O.
	Reconcilable() error
	// Held calls fn with pages of at most pageSize documents the sink holds
	// for the source index named index, whose current uuid is uuid, and
	// returns how many it listed. It lists from a consistent view where the
	// sink has one (the bulk sink: a refresh, then one frozen view per
	// target shard) and leaves out documents this feed did not write
	// (a version that is not one of the feed's orders, or one newer than
	// the index: the sink cannot order a delete against those). A sink
	// holding nothing for the index lists nothing and returns 0, nil.
	// Held only reads; an error from fn stops it and is returned.
	Held(ctx context.Context, index, uuid string, pageSize int, fn func([]HeldDoc) error) (int64, error)
}
