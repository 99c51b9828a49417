package redisx

import (
	"context"
	"errors"
)

// Handler applies one event. It is the contract between a Pool and the code
// that consumes the feed:
//
//   - nil: the event is done; the pool acknowledges it (XACK).
//   - an error: the event stays pending and is delivered again (by this
//     consumer after a backoff, or by another after MinIdle), until it
//     succeeds or was delivered MaxDeliveries times; then it goes to the
//     dead-letter stream, acknowledged.
//   - an error wrapped with Permanent: retrying cannot help (a 4xx from a
//     webhook, a malformed event); the event goes to the dead-letter stream
//     at once.
//
// Events of one document (index_uuid, shard, id) reach one consumer's
// handler one at a time, in stream order. Across consumers, or after a
// redelivery, a handler may see an event again or an older event after a
// newer one: sinks apply through fences (package idempotency, or ES
// external versions) so that never puts an older version over a newer one.
// The context is canceled when the pool's shutdown timeout expires; a
// Pool's carries the event's Delivery (DeliveryOf).
type Handler func(ctx context.Context, e Event) error

// Delivery says where the event a Handler is given was read from: the
// stream key and the consumer group. A Pool puts it in the context of
// every handler call (WithDelivery), so that a sink serving several
// partitions' pools can record per stream and group what it applied
// (the PostgreSQL sink does, in the transaction of the rows). Events
// handed to a handler outside a pool (a bootstrap's copy) carry none.
type Delivery struct {
	Stream, Group string
}

type deliveryKey struct{}

// WithDelivery returns ctx carrying d.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// DeliveryOf returns the Delivery ctx carries, if any.
func DeliveryOf(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok && d.Stream != "" && d.Group != ""
}

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// Chain applies middlewares to h, the first one outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the pool dead-letters the event
// at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
