package consumer

import (
	"context"
	"errors"
	"fmt"
	"github.com/es-changefeed/es-changefeed/redisx"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// The applied position of a pool: what it handed on and what its sink
// recorded (PoolConfig.Positions), checked against the stream so that a
// feed's Redis that went back in time is noticed, and a sink's store that
// went back is made whole again.

// appliedState returns the highest id handed on (to check it is still in
// the stream) and the Lead last recorded in Positions (for the feed's
// copy).
func (p *Pool) appliedState() (applied, recorded string) {
	p.appliedMu.Lock()
	defer p.appliedMu.Unlock()
	return p.appliedID, p.recorded
}

// appliedChecked takes what a checked read found: the group's low water,
// and a Rollback that covers the applied entry if the relay repaired its
// loss (said once; the entry no longer needs checking).
func (p *Pool) appliedChecked(covered *redisx.Rollback, applied, low string) {
	p.appliedMu.Lock()
	if low != "" {
		p.low = low
	}
	say := covered != nil && p.coveredSaid != covered.After
	if covered != nil {
		p.coveredSaid = covered.After
		if p.appliedID == applied {
			p.appliedID = ""
		}
	}
	p.appliedMu.Unlock()
	if say {
		p.log.Warn("the feed's Redis lost entries this group's sink may have applied, and the relay repaired the loss: "+
			"it emits the deletes of the documents of the lost entries that are gone since",
			logkey.ID, applied, logkey.After, covered.After, logkey.Commits, covered.Commits)
	}
}

// startApplied reads the sink's recorded position (Positions) before
// anything is read: an entry it applied that the stream lost is a
// *StreamRolledBackError (unless the relay repaired it); a store that
// holds less than the feed's copy of what it recorded lost writes, and
// the entries from its Low on are handed on again first.
func (p *Pool) startApplied(ctx context.Context) error {
	if p.cfg.Positions == nil {
		return nil
	}
	stream, group := p.cfg.Keys.Events(), p.cfg.Group
	var rec redisx.Position
	// The feed's copy of what the store recorded is read before the
	// store: a copy is written only once the store holds it, so a store
	// read after the copy that holds less lost writes. Read the other way
	// round, a consumer of the group starting while another records its
	// first position could see the store empty and then the other's copy.
	var theirs string
	bo := backoff.Backoff{Min: p.cfg.RetryBackoff, Max: p.cfg.MaxRetryBackoff}
	for {
		began := time.Now()
		what := "the feed's copy of the sink's applied position"
		var err error
		theirs, err = p.cfg.Client.HGet(ctx, p.cfg.Keys.Applied(), group).Result()
		if errors.Is(err, redis.Nil) {
			theirs, err = "", nil
		}
		if err == nil {
			what = "the sink's applied position"
			rec, err = p.cfg.Positions.Applied(ctx, stream, group)
		}
		if err == nil {
			err = redisx.ValidPosition(rec)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if redisx.IsPermanent(err) {
			return fmt.Errorf("read %s: %w", what, err)
		}
		d := bo.Next()
		p.redisFailed(began, "cannot read "+what+"; retrying", err, logkey.RetryIn, d.String())
		sleepCtx(ctx, d)
	}
	var infoS *redis.XInfoStreamCmd
	var infoG *redis.XInfoGroupsCmd
	var chk appliedCheck
	_, err := p.cfg.Client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		infoS = pipe.XInfoStream(ctx, stream)
		infoG = pipe.XInfoGroups(ctx, stream)
		if rec.Lead != "" {
			chk.queue(ctx, pipe, p.cfg.Keys, rec.Lead)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("check the sink's applied position against %s: %w", stream, err)
	}
	st := redisx.StreamStateOf(infoS.Val())
	last := ""
	for _, g := range infoG.Val() {
		if g.Name == group {
			last = g.LastDeliveredID
		}
	}
	covered, err := chk.verdict(p.cfg.Keys, group, st, last, rec.Lead)
	var rb *redisx.StreamRolledBackError
	if errors.As(err, &rb) {
		err = p.awaitRepair(ctx, rb)
		if err == nil {
			covered = nil // said by awaitRepair
		}
	}
	if err != nil {
		return err
	}
	p.appliedMu.Lock()
	p.appliedID, p.recorded = rec.Lead, rec.Lead
	p.appliedMu.Unlock()
	p.appliedChecked(covered, rec.Lead, "")
	if theirs != "" && redisx.LessID(rec.Lead, theirs) {
		be := &redisx.BehindError{Store: "the sink's store", Recorded: rec, Since: theirs}
		if err := p.replayAfter(be, last, st); err != nil {
			p.recordLost(err)
			return err
		}
	}
	return nil
}

// awaitRepair waits, once the stream was found to have lost entry
// rb.Applied, until the relay records that it repaired the loss (a
// Rollback record covering it: nil) or RepairGrace passed (rb, recorded as
// the group's history loss). It returns ctx's error if ctx ends first.
func (p *Pool) awaitRepair(ctx context.Context, rb *redisx.StreamRolledBackError) error {
	p.log.Warn("the feed's Redis lost entries this group's sink may have applied: waiting for the relay to say it repaired the loss",
		logkey.ID, rb.Applied, logkey.Timeout, p.cfg.RepairGrace.String())
	deadline := time.Now().Add(p.cfg.RepairGrace)
	for {
		v, err := p.cfg.Client.HGet(ctx, p.cfg.Keys.Meta(), redisx.RollbacksField).Result()
		if err == nil || errors.Is(err, redis.Nil) {
			rs, perr := redisx.ParseRollbacks(v)
			if perr != nil {
				return perr
			}
			for i := len(rs) - 1; i >= 0; i-- {
				if rs[i].Covers(rb.Applied) {
					p.appliedChecked(&rs[i], rb.Applied, "")
					return nil
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			p.gone.Add(1)
			p.recordLost(rb)
			return rb
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// replayAfter arranges for the entries a sink's store lost to be handed on
// again: from the Low it recorded to to. It is a history loss if the
// store records no Low or the stream no longer holds the entries.
func (p *Pool) replayAfter(be *redisx.BehindError, to string, st redisx.StreamState) error {
	from := be.Recorded.Low
	switch {
	case from == "":
		return fmt.Errorf("%w: %v; it records no low-water mark to hand the entries on again from: "+redisx.BootstrapAdvice, redisx.ErrHistoryLost, be)
	case st.Length > 0 && redisx.LessID(from, st.FirstID) && from != st.FirstID:
		return fmt.Errorf("%w: %v; the entries to hand on again start at %s, but the stream's oldest entry is %s (%w): "+redisx.BootstrapAdvice,
			redisx.ErrHistoryLost, be, from, st.FirstID, errReplayTrimmed)
	}
	if to == "" || redisx.LessID(to, from) {
		return nil // nothing read since
	}
	p.appliedMu.Lock()
	p.replayFrom, p.replayTo = from, to
	p.appliedMu.Unlock()
	p.log.Warn("the sink's store lost writes: handing the entries from its low-water mark on again (its fences make repeats harmless)",
		logkey.Error, be.Error(), logkey.From, from, logkey.To, to)
	return nil
}

// replaying returns the entries still to hand on again ("" when none).
func (p *Pool) replaying() (from, to string) {
	p.appliedMu.Lock()
	defer p.appliedMu.Unlock()
	return p.replayFrom, p.replayTo
}

// replay hands on up to n entries from..to again (XRANGE: they need not
// be pending; acknowledging them again does nothing). The slots taken are
// given back by the lanes as for any read.
func (p *Pool) replay(ctx context.Context, from, to string, n int) error {
	stream := p.cfg.Keys.Events()
	var first *redis.XMessageSliceCmd
	var msgs *redis.XMessageSliceCmd
	_, err := p.cfg.Client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		first = pipe.XRangeN(ctx, stream, "-", "+", 1)
		msgs = pipe.XRangeN(ctx, stream, from, to, int64(n))
		return nil
	})
	if err != nil {
		return err
	}
	if f := first.Val(); len(f) > 0 && redisx.LessID(from, f[0].ID) {
		return fmt.Errorf("%w: the sink's store lost writes and the entries to hand on again start at %s, but the stream's oldest entry is %s (%w): "+redisx.BootstrapAdvice,
			redisx.ErrHistoryLost, from, f[0].ID, errReplayTrimmed)
	}
	got := msgs.Val()
	p.appliedMu.Lock()
	if len(got) < n {
		p.replayFrom, p.replayTo = "", ""
	} else {
		p.replayFrom = redisx.NextID(got[len(got)-1].ID)
	}
	p.appliedMu.Unlock()
	p.giveSlots(n - len(got))
	if len(got) > 0 {
		p.dispatchJobs(got, nil, true)
	}
	return nil
}

// advance records that a read's entries are about to be handed on: in
// the sink's store first (Positions.Advance, retried until it succeeds or
// the pool is stopped for good), then in memory. It reports false if they
// must not be handed on (the store could not record them).
func (p *Pool) advance(ctx context.Context, msgs []redis.XMessage) bool {
	if len(msgs) == 0 {
		return true
	}
	top, bottom := msgs[0].ID, msgs[0].ID
	for _, m := range msgs[1:] {
		top = redisx.MaxID(top, m.ID)
		if redisx.LessID(m.ID, bottom) {
			bottom = m.ID
		}
	}
	p.appliedMu.Lock()
	applied, since, low := p.appliedID, p.recorded, p.low
	p.appliedMu.Unlock()
	if !redisx.LessID(applied, top) {
		return true
	}
	if p.cfg.Positions != nil && redisx.LessID(since, top) {
		// A stop in flight still lets the entries read be handled (Run
		// waits for them): the record outlives ctx, bounded.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ShutdownTimeout)
		defer cancel()
		bo := backoff.Backoff{Min: p.cfg.RetryBackoff, Max: p.cfg.MaxRetryBackoff}
		for {
			began := time.Now()
			err := p.cfg.Positions.Advance(actx, p.cfg.Keys.Events(), p.cfg.Group, redisx.Position{Lead: top, Low: low}, since)
			var be *redisx.BehindError
			if errors.As(err, &be) {
				// Recorded anyway; hand on again what the store lost
				// (up to these entries, which are handed on next).
				if rerr := p.replayAfter(be, redisx.PrevID(bottom), redisx.StreamState{}); rerr != nil {
					p.historyLost(rerr)
					return false
				}
				err = nil
			}
			if err == nil {
				p.redisOK(began)
				break
			}
			if redisx.IsPermanent(err) {
				p.stopWith(fmt.Errorf("record the sink's applied position: %w", err), "cannot record the sink's applied position: stopping")
				return false
			}
			if actx.Err() != nil {
				p.log.Warn("cannot record the sink's applied position: the entries read stay pending", logkey.Error, err.Error())
				return false
			}
			d := bo.Next()
			p.redisFailed(began, "cannot record the sink's applied position; retrying before handing entries on", err, logkey.RetryIn, d.String())
			sleepCtx(actx, d)
		}
		since = top
	}
	p.appliedMu.Lock()
	p.appliedID = redisx.MaxID(p.appliedID, top)
	if p.cfg.Positions != nil {
		p.recorded = redisx.MaxID(p.recorded, since)
	}
	p.appliedMu.Unlock()
	return true
}
