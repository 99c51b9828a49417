package sinktest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// The source index of the suite's document events (all on shard 0). A
// Factory prepares what its sink needs for events of this index: the bulk
// sink, the index's generation and layout in the feed's Redis.
const (
	Index     = "sinktest"
	IndexUUID = "SinkTest-uuid-1"
)

// DocID is a document as the feed names it: (index_uuid, shard, id), with
// the index's name (what key and index templates use).
type DocID struct {
	Index     string
	IndexUUID string
	Shard     int
	ID        string
}

// Factory builds a fresh sink, and what the suite needs around it, for one
// case. It fails tb when it cannot, and closes in tb.Cleanup what it
// opened besides the sink (servers, clients); the suite closes the sink.
type Factory func(tb testing.TB) Env

// Env is a sink under test and the means to observe it.
type Env struct {
	// Sink is the sink under test. The suite closes it (more than once in
	// some cases).
	Sink sink.Sink
	// Holds reads, from the sink's store and not through the sink, the
	// source of the document the sink holds now; found is false when it
	// holds none (never written, or deleted). Needed by Ordered.
	Holds func(ctx context.Context, d DocID) (source json.RawMessage, found bool, err error)
	// Delivered reads every event the sink's target received so far, in
	// the order it received them (ParseLines for JSON lines). Needed by
	// Appends.
	Delivered func(ctx context.Context) ([]redisx.Event, error)
	// Gate, while hung, holds every call the sink makes to its target: a
	// webhook that does not answer, a cluster or Redis that does not
	// reply, a writer that blocks. Needed by CloseAborts.
	Gate *Gate
	// ClientsOpen returns nil when every client passed to the sink (a
	// Redis client, an *http.Client, an io.Writer) is still open and
	// usable. Needed by ClientsPassedIn.
	ClientsOpen func(ctx context.Context) error
	// Reopen builds another sink on the same store, as a consumer started
	// again would. Needed by Positions.
	Reopen func(tb testing.TB) sink.Sink
}

// Features are what a sink promises beyond what every sink does. Exactly
// one of Ordered and Appends is set.
type Features struct {
	// Ordered: the sink holds, per document, only the newest event it was
	// given (by the order 2·seq_no, +1 for a delete), whatever the order
	// the events come in (the bulk and redis sinks: external versions,
	// idempotency fences). Needs Env.Holds.
	Ordered bool
	// Appends: the sink hands every event on as it is, redeliveries
	// included, and lets the receiver apply the idempotency rule (stdout,
	// file, http). Needs Env.Delivered.
	Appends bool
	// Positions: the sink implements redisx.Positions. Needs Env.Reopen.
	Positions bool
	// Reconciler: the sink implements sink.Reconciler.
	Reconciler bool
	// ClientsPassedIn: the sink is given clients it must not close. Needs
	// Env.ClientsOpen.
	ClientsPassedIn bool
	// CloseAborts: Close(ctx) gives up on a target that hangs once ctx
	// ends. Needs Env.Gate.
	CloseAborts bool
}
