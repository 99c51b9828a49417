package relay

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// watchStream runs while the relay leads: it applies backpressure
// (MaxBacklog) and safe trimming (Trim).
func (r *Relay) watchStream(ctx context.Context) {
	period := r.cfg.PollInterval
	if r.cfg.Trim && r.cfg.TrimInterval < period {
		period = r.cfg.TrimInterval
	}
	t := time.NewTicker(period)
	defer t.Stop()
	// A relay that stops watching (lost the lease, stopping) is paused by
	// nobody: whichever way it returns.
	defer func() {
		r.paused.Store(false)
		r.m.backpressure.Set(0)
	}()
	lastTrim := time.Time{}
	said := ""
	for {
		groups, err := r.groups(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if said != err.Error() {
				said = err.Error()
				r.log.Warn("cannot read the stream's consumer groups", logkey.Error, said)
			}
		} else {
			said = ""
			if r.cfg.MaxBacklog > 0 {
				r.backpressure(ctx, groups)
			}
			if r.cfg.Trim && time.Since(lastTrim) >= r.cfg.TrimInterval {
				lastTrim = time.Now()
				if err := r.trim(ctx, groups); err != nil && ctx.Err() == nil {
					r.log.Warn("trimming failed", logkey.Error, err.Error())
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// groupState is what trimming and backpressure need of a group.
type groupState struct {
	name          string
	lag           int64 // entries not yet delivered to the group
	lastDelivered string
	oldestPending string // "" when nothing is pending
}

// groups reads the consumer groups of the stream (none if it has no
// stream yet), with redisx.ReadGroups: the lag status and the metrics
// report too.
func (r *Relay) groups(ctx context.Context) ([]groupState, error) {
	_, gs, err := redisx.ReadGroups(ctx, r.cfg.Store.Client(), r.cfg.Store.Keys().Events())
	if err != nil {
		return nil, err
	}
	out := make([]groupState, 0, len(gs))
	for _, g := range gs {
		out = append(out, groupState{name: g.Name, lag: max(g.Lag, 0), lastDelivered: g.LastDelivered, oldestPending: g.OldestPending})
	}
	return out, nil
}

// backpressure pauses reading while the slowest group lags by more than
// MaxBacklog entries, and resumes below it. Each change is logged once and
// recorded in the feed's meta hash (for status).
func (r *Relay) backpressure(ctx context.Context, groups []groupState) {
	var slowest groupState
	for _, g := range groups {
		if g.lag > slowest.lag {
			slowest = g
		}
	}
	over := slowest.lag > r.cfg.MaxBacklog
	if over == r.paused.Load() {
		return
	}
	since := ""
	if over {
		since = time.Now().UTC().Format(time.RFC3339)
		r.log.Warn("backpressure on: a consumer group lags; pausing reads (the cluster keeps the changes, the cursor is durable)",
			logkey.Group, slowest.name, logkey.Lag, slowest.lag, logkey.MaxBacklog, r.cfg.MaxBacklog)
	} else {
		r.log.Info("backpressure off: the groups caught up; reading again", logkey.MaxBacklog, r.cfg.MaxBacklog)
	}
	r.paused.Store(over)
	if over {
		r.m.backpressure.Set(1)
	} else {
		r.m.backpressure.Set(0)
	}
	if err := r.commit(ctx, checkpoint.Batch{Meta: map[string]string{checkpoint.MetaBackpressure: since}}); err != nil && ctx.Err() == nil {
		r.log.Warn("cannot record backpressure in the feed's meta", logkey.Error, err.Error())
	}
}

// trim removes stream entries every group has acknowledged: below the
// minimum over groups of (oldest pending id, the last delivered one), and
// not younger than MinRetention. Each group's last delivered entry is kept:
// with it in the stream, a group that lost history is told by ids, not by
// counters Redis may report stale (redisx.ReadGroups). Without groups, only a stream
// longer than MaxStreamLen is cut (with a warning).
func (r *Relay) trim(ctx context.Context, groups []groupState) error {
	rdb := r.cfg.Store.Client()
	stream := r.cfg.Store.Keys().Events()
	var cutoff string
	if r.cfg.MinRetention > 0 {
		cutoff = strconv.FormatInt(time.Now().Add(-r.cfg.MinRetention).UnixMilli(), 10) + "-0"
	}
	if len(groups) == 0 {
		n, err := rdb.XLen(ctx, stream).Result()
		if err != nil || n <= r.cfg.MaxStreamLen {
			return err
		}
		var removed int64
		if cutoff != "" {
			removed, err = rdb.XTrimMinID(ctx, stream, cutoff).Result()
		} else {
			removed, err = rdb.XTrimMaxLen(ctx, stream, r.cfg.MaxStreamLen).Result()
		}
		if err != nil {
			return err
		}
		r.m.trimmed.Add(float64(removed))
		r.log.Warn("the stream has no consumer group: trimmed to --max-stream-len (older entries were never read by a group)",
			logkey.Removed, removed, logkey.MaxStreamLen, r.cfg.MaxStreamLen)
		return nil
	}
	minID := ""
	for _, g := range groups {
		bound := g.lastDelivered
		if g.oldestPending != "" && lessID(g.oldestPending, bound) {
			bound = g.oldestPending
		}
		if minID == "" || lessID(bound, minID) {
			minID = bound
		}
	}
	if cutoff != "" && lessID(cutoff, minID) {
		minID = cutoff
	}
	removed, err := rdb.XTrimMinID(ctx, stream, minID).Result()
	if err != nil {
		return err
	}
	if removed > 0 {
		r.m.trimmed.Add(float64(removed))
		r.log.Debug("trimmed the stream", logkey.Removed, removed, logkey.MinID, minID)
	}
	return nil
}

// nextID is the smallest stream id above id ("0-0" -> "0-1", "5-<max>" ->
// "6-0"); the largest id has none and gives itself.
func nextID(id string) string {
	ms, seq, ok := splitID(id)
	switch {
	case !ok:
		return "0-0"
	case seq < math.MaxUint64:
		seq++
	case ms < math.MaxUint64:
		ms, seq = ms+1, 0
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq, 10)
}

// lessID compares stream ids.
func lessID(a, b string) bool {
	am, as, _ := splitID(a)
	bm, bs, _ := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	var err1, err2 error
	ms, err1 = strconv.ParseUint(a, 10, 64)
	if found {
		seq, err2 = strconv.ParseUint(b, 10, 64)
	}
	return ms, seq, errors.Join(err1, err2) == nil
}
