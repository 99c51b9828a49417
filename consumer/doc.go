// Package consumer is the consumer side of a feed, the counterpart of
// relay.Feed: worker pools in a Redis consumer group that hand the feed's
// events to a handler (a sink) and acknowledge them.
//
//   - Pool reads one stream in one group: events of one document (index
//     uuid, shard, id) go to the same lane, in order; a handler's nil is an
//     XACK, an error a retry with backoff (each one a counted delivery) up
//     to MaxDeliveries, then the dead-letter stream, acknowledged in the
//     same MULTI; pending events of dead consumers are reclaimed
//     (XAUTOCLAIM) after MinIdle, those a live consumer holds are kept its
//     own. It never reads past entries the group had not handled that are
//     gone (history lost), and it checks that the stream still holds what
//     it handed on, against the position its sink records in a store of its
//     own (redisx.Positions): a feed's Redis that went back in time is a
//     *redisx.StreamRolledBackError unless the relay repaired it; a sink
//     store that went back gets the entries again.
//   - Feed runs one Pool per partition of a feed in one group
//     (Config → New → Run), and stops when the feed records another
//     partition count.
//   - Feed.Join is the group join of a bootstrap: hold the streams'
//     positions, run the copy, move the group there, in one MULTI per
//     stream.
//
// Blocking and ownership: Run blocks until its context ends and the pools
// drained (each returns once every event read was handled or left
// pending); nothing here closes the Redis client it was given.
package consumer
