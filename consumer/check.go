package consumer

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// appliedGone decides from one state of the stream and the group whether
// entry id (one the group's sink may have applied) is gone because Redis
// went back in time. present says whether XRANGE id id found it. It is
// gone if the group is behind it (the group read it, so its read was lost
// with it) or the stream still holds older entries (trimming removes only
// a prefix) — unless XDEL may have removed it.
func appliedGone(st redisx.StreamState, lastDelivered, id string, present bool) bool {
	if id == "" || present {
		return false
	}
	if redisx.LessID(lastDelivered, id) {
		return true
	}
	return st.Length > 0 && !redisx.LessID(id, st.FirstID) && redisx.LessID(st.MaxDeletedID, id)
}

// appliedCheck is the state appliedGone and the rollback records need,
// read in one MULTI with a read or on its own.
type appliedCheck struct {
	entry     *redis.XMessageSliceCmd
	rollbacks *redis.StringCmd
}

// queue adds the commands of the check of id to a pipeline.
func (c *appliedCheck) queue(ctx context.Context, pipe redis.Pipeliner, keys redisx.Keys, id string) {
	c.entry = pipe.XRangeN(ctx, keys.Events(), id, id, 1)
	c.rollbacks = pipe.HGet(ctx, keys.Meta(), redisx.RollbacksField)
}

// verdict judges the check of id: nil, or a *redisx.StreamRolledBackError; and
// the Rollback that covers id when the relay repaired its loss.
func (c *appliedCheck) verdict(keys redisx.Keys, group string, st redisx.StreamState, lastDelivered, id string) (*redisx.Rollback, error) {
	if c.entry == nil || id == "" {
		return nil, nil
	}
	if !appliedGone(st, lastDelivered, id, len(c.entry.Val()) > 0) {
		return nil, nil
	}
	rs, err := redisx.ParseRollbacks(c.rollbacks.Val())
	if err != nil {
		return nil, err
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Covers(id) {
			return &rs[i], nil
		}
	}
	return nil, &redisx.StreamRolledBackError{Feed: keys.Feed(), Stream: keys.Events(), Group: group, Applied: id, LastDelivered: lastDelivered, State: st}
}

// lowWater is the id below which every entry a group read is acknowledged:
// its oldest pending entry, or past its last delivered one when nothing is
// pending ("" when the group read nothing).
func lowWater(lastDelivered string, pending *redis.XPending) string {
	if pending != nil && pending.Count > 0 && pending.Lower != "" {
		return pending.Lower
	}
	if lastDelivered == "" || lastDelivered == "0-0" {
		return ""
	}
	return redisx.NextID(lastDelivered)
}

// maxIDScript raises hash field ARGV[1] of KEYS[1] to stream id ARGV[2]
// (never lowers it).
var maxIDScript = redis.NewScript(redisx.LuaLessID + `
if less(redis.call('HGET', KEYS[1], ARGV[1]) or '', ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1`)

// errReplayTrimmed: entries a sink's store lost are no longer in the stream.
var errReplayTrimmed = errors.New("the entries to hand on again are trimmed")
