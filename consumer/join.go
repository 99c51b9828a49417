package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// position is where a stream was when a Join began: its last id and the
// number of entries ever added up to it.
type position struct {
	keys  redisx.Keys
	id    string
	added int64
}

// Join joins the Feed's group to the feed with no gap however much was
// trimmed, or re-initializes a group that lost history (consume
// --bootstrap):
//
//  1. record each partition stream's position (last id and entries-added,
//     from one XINFO STREAM) and hold it with a group of its own
//     (redisx.HoldGroup: the relay's safe trimming keeps every
//     group's unread entries, so nothing after the position is trimmed
//     before the real group is moved there);
//  2. copy: hand every current document of the feed's indices to the sink
//     (package bootstrap), from views taken after 1;
//  3. reset the sink's recorded position (Pool.Positions) to the recorded
//     one, so that a position left from entries Redis lost cannot stop the
//     re-initialized group again;
//  4. in one MULTI per stream: create the group at the position or move it
//     there (with ENTRIESREAD, so its counters stay exact), acknowledge its
//     pending entries up to the position (the copy covers them), forget its
//     recorded history loss and the feed's copy of the sink's position, and
//     drop the holding group.
//
// Every change is in the copy or after the position, or both: the fences
// make the overlap harmless (docs/DESIGN.md, "Bootstrap"). A Join cut
// short leaves the group as it was (and the holding group, which the next
// Join reuses); one cut between 3 and 4 leaves the group refused, and is
// run again.
func (f *Feed) Join(ctx context.Context, copyDocs func(context.Context) error) error {
	group, log := f.cfg.Pool.Group, f.cfg.Pool.Logger
	var pos []position
	for _, k := range redisx.AllPartitionKeys(f.cfg.Feed, f.cfg.Partitions) {
		st, err := redisx.ReadStream(ctx, f.cfg.Client, k.Events())
		if err != nil {
			return err
		}
		p := position{keys: k, id: st.LastID, added: st.EntriesAdded}
		if p.id == "" {
			p.id = "0-0"
		}
		if err := setGroup(ctx, f.cfg.Client, k.Events(), redisx.HoldGroup(group), p); err != nil {
			return fmt.Errorf("hold %s at %s for the bootstrap: %w", k.Events(), p.id, err)
		}
		log.Info("bootstrap: recorded the stream's position", logkey.Stream, k.Events(), logkey.ID, p.id, logkey.EntriesAdded, p.added)
		pos = append(pos, p)
	}
	if err := copyDocs(ctx); err != nil {
		return err
	}
	for _, p := range pos {
		if ps := f.cfg.Pool.Positions; ps != nil {
			lead := p.id
			if lead == "0-0" {
				lead = ""
			}
			if err := ps.Reset(ctx, p.keys.Events(), group, redisx.Position{Lead: lead, Low: lead}); err != nil {
				return fmt.Errorf("reset the sink's applied position of %s: %w", p.keys.Events(), err)
			}
		}
		if err := moveGroup(ctx, f.cfg.Client, p, group); err != nil {
			return fmt.Errorf("move group %s of %s to %s after the copy: %w", group, p.keys.Events(), p.id, err)
		}
		log.Info("bootstrap: the group follows the stream from the recorded position", logkey.Stream, p.keys.Events(), logkey.Group, group, logkey.ID, p.id)
	}
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
// forgets its recorded loss and the feed's copy of its sink's position,
// and drops the holding group, in one MULTI.
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
		pipe.HDel(ctx, p.keys.Applied(), group)
		pipe.XGroupDestroy(ctx, stream, redisx.HoldGroup(group))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}
