package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// holdGroup is the name of the group that holds a stream at the position a
// bootstrap recorded while it copies: the relay's safe trimming keeps every
// group's unread entries, so nothing after the position is trimmed before
// the real group is moved there.
func holdGroup(group string) string { return redisx.HoldGroup(group) }

// position is where a stream was when a bootstrap began: its last id and
// the number of entries ever added up to it.
type position struct {
	keys  redisx.Keys
	id    string
	added int64
}

// bootstrapGroup joins group to the feed with no gap, or re-initializes it
// (consume --bootstrap):
//
//  1. record each stream's position (last id and entries-added, from one
//     XINFO STREAM) and hold it with a group of its own (holdGroup);
//  2. copy every current document of the feed's indices through the sink
//     (runBootstrapCopy), from one frozen view per shard taken after 1;
//  3. in one MULTI per stream: create the group at the position or move it
//     there (with ENTRIESREAD, so its counters stay exact), acknowledge its
//     pending entries up to the position (the copy covers them), forget its
//     recorded history loss, and drop the holding group.
//
// Every change is in the copy or after the position, or both: the fences
// make the overlap harmless (docs/DESIGN.md, "Bootstrap"). A bootstrap cut
// short leaves the group as it was (and the holding group, which the next
// bootstrap reuses).
func bootstrapGroup(ctx context.Context, cmd *cli.Command, rdb redis.UniversalClient, feed, group string, partitions int,
	s sink.Sink, log *slog.Logger) error {
	// Flags and the source cluster first: a refused copy leaves no
	// holding group behind.
	copyDocs, err := prepareBootstrapCopy(ctx, cmd, feed, rdb, s.Handler(), s)
	if err != nil {
		return err
	}
	var pos []position
	for _, k := range redisx.AllPartitionKeys(feed, partitions) {
		st, err := redisx.ReadStream(ctx, rdb, k.Events())
		if err != nil {
			return err
		}
		p := position{keys: k, id: st.LastID, added: st.EntriesAdded}
		if p.id == "" {
			p.id = "0-0"
		}
		if err := setGroup(ctx, rdb, k.Events(), holdGroup(group), p); err != nil {
			return fmt.Errorf("hold %s at %s for the bootstrap: %w", k.Events(), p.id, err)
		}
		log.Info("bootstrap: recorded the stream's position", logkey.Stream, k.Events(), logkey.ID, p.id, logkey.EntriesAdded, p.added)
		pos = append(pos, p)
	}
	res, err := copyDocs(ctx)
	if err != nil {
		return err
	}
	for _, p := range pos {
		// The sink's recorded position goes to the recorded position
		// first: one left from before (maybe of entries Redis lost) would
		// stop the group again. Interrupted here, the group stays refused
		// and the bootstrap is run again.
		if ps := sinkPositions(s); ps != nil {
			lead := p.id
			if lead == "0-0" {
				lead = ""
			}
			if err := ps.Reset(ctx, p.keys.Events(), group, redisx.Position{Lead: lead, Low: lead}); err != nil {
				return fmt.Errorf("reset the sink's applied position of %s: %w", p.keys.Events(), err)
			}
		}
		if err := moveGroup(ctx, rdb, p, group); err != nil {
			return fmt.Errorf("move group %s of %s to %s after the copy: %w", group, p.keys.Events(), p.id, err)
		}
		log.Info("bootstrap: the group follows the stream from the recorded position", logkey.Stream, p.keys.Events(), logkey.Group, group, logkey.ID, p.id)
	}
	log.Info("bootstrap: done", logkey.Group, group, logkey.Documents, res.Total(), logkey.Took, res.Duration.Round(1e6).String())
	return nil
}

// setGroup creates group at p, or moves it there.
func setGroup(ctx context.Context, rdb redis.UniversalClient, stream, group string, p position) error {
	added := strconv.FormatInt(p.added, 10)
	err := rdb.Do(ctx, "XGROUP", "CREATE", stream, group, p.id, "MKSTREAM", "ENTRIESREAD", added).Err()
	if err != nil && redis.HasErrorPrefix(err, "BUSYGROUP") {
		err = rdb.Do(ctx, "XGROUP", "SETID", stream, group, p.id, "ENTRIESREAD", added).Err()
	}
	return err
}

// moveGroup puts group at p, acknowledges its pending entries up to p,
// forgets its recorded loss and drops the holding group, in one MULTI.
func moveGroup(ctx context.Context, rdb redis.UniversalClient, p position, group string) error {
	stream := p.keys.Events()
	_, _, exists, err := redisx.ReadGroup(ctx, rdb, stream, group)
	if err != nil {
		return err
	}
	var covered []string
	if exists {
		for start := "-"; ; {
			pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: p.id, Count: 1000}).Result()
			if err != nil {
				return err
			}
			for _, e := range pend {
				covered = append(covered, e.ID)
			}
			if len(pend) < 1000 {
				break
			}
			start = "(" + pend[len(pend)-1].ID
		}
	}
	added := strconv.FormatInt(p.added, 10)
	_, err = rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if exists {
			pipe.Do(ctx, "XGROUP", "SETID", stream, group, p.id, "ENTRIESREAD", added)
		} else {
			pipe.Do(ctx, "XGROUP", "CREATE", stream, group, p.id, "MKSTREAM", "ENTRIESREAD", added)
		}
		for i := 0; i < len(covered); i += 1000 {
			pipe.XAck(ctx, stream, group, covered[i:min(i+1000, len(covered))]...)
		}
		pipe.HDel(ctx, p.keys.Lost(), group)
		pipe.HDel(ctx, p.keys.Applied(), group) // the copy of the sink's position, reset above
		pipe.XGroupDestroy(ctx, stream, holdGroup(group))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}
