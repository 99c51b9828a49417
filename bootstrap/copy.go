package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Errors of the package besides ErrNoTargets.
var (
	// ErrClosed: an index of the feed is closed (and SkipClosed is off).
	ErrClosed = errors.New("an index of the feed is closed")
	// ErrHistoryReplaced: a shard's history_uuid is not the one the feed
	// read it under; the relay stops on it too, and only a resync
	// recovers.
	ErrHistoryReplaced = errors.New("a shard's history was replaced")
	// ErrGaveUp: a shard could not be read from a settled, complete view
	// in Config.MaxAttempts attempts.
	ErrGaveUp = errors.New("gave up reading a shard")

	// errRecreated: the index's uuid changed under the copy (deleted and
	// created again): it is copied again, as the new index.
	errRecreated = errors.New("the index was deleted and created again during the copy")
	// errVanished: the index was deleted during the copy.
	errVanished = errors.New("the index was deleted during the copy")
)

// HandlerError is the handler's failure on one event; it aborts the copy.
type HandlerError struct {
	Event redisx.Event
	Err   error
}

func (e *HandlerError) Error() string {
	ev := e.Event
	switch ev.Op {
	case redisx.OpUpsert, redisx.OpDelete:
		return fmt.Sprintf("the handler failed on the %s of %s/%s (index uuid %s, shard %d, seq_no %d): %v",
			ev.Op, ev.Index, ev.ID, ev.IndexUUID, ev.Shard, ev.SeqNo, e.Err)
	}
	return fmt.Sprintf("the handler failed on the %s of %s (index uuid %s): %v", ev.Op, ev.Index, ev.IndexUUID, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }

// Copy hands every current document of the feed's indices to
// cfg.Handler (see the package doc), and returns what it handed. On error
// the Result says what was handed before it; the events handed are valid
// either way (a later copy or the stream's events order after them).
func Copy(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	c := &copier{cfg: cfg, log: cfg.Logger.With(logkey.Feed, cfg.Feed),
		res: Result{Documents: map[string]int64{}, Deferred: map[string]int64{}, Removed: map[string]int64{}, Kept: map[string]int64{}, Skipped: map[string]string{}}}
	start := time.Now()
	err := c.run(ctx)
	c.res.Duration = time.Since(start)
	return c.res, err
}

// copier is one Copy.
type copier struct {
	cfg  Config
	log  *slog.Logger
	feed *feedState
	prog *progress
	res  Result
	// targetOf is the expression of each index to copy.
	targetOf map[string]string
}

// indexCopy is one index being copied.
type indexCopy struct {
	name, uuid, target string
	shards             int
}

func (c *copier) run(ctx context.Context) error {
	info, err := c.cfg.ES.Info(ctx)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := info.CheckSupported(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if c.feed, err = readFeed(ctx, c.cfg.Redis, c.cfg.Feed); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	targets := c.cfg.Targets
	if len(targets) == 0 {
		if targets = c.feed.targets(); len(targets) == 0 {
			return fmt.Errorf("bootstrap: %w (%s is empty in every partition): start the relay first, or name the indices to copy",
				ErrNoTargets, c.feed.keys.Indices())
		}
	}
	names, err := c.plan(ctx, targets)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	var total int64
	for _, name := range names {
		// The total is for the progress report only: an index that
		// cannot be counted now is judged when it is copied.
		if err := c.cfg.ES.Refresh(ctx, name); err == nil {
			if n, err := c.cfg.ES.CountIndex(ctx, name); err == nil {
				total += n
			}
		}
	}
	c.log.Info("bootstrap copy started", logkey.Targets, strings.Join(targets, " "), logkey.Indices, len(names), logkey.Total, total)
	c.prog = newProgress(c.log, total, c.cfg.Progress, c.cfg.ProgressInterval)
	for _, name := range names {
		if err := c.copyIndex(ctx, name, c.targetOf[name]); err != nil {
			return fmt.Errorf("bootstrap copy of %s: %w", name, err)
		}
	}
	c.prog.finish()
	return nil
}

// plan resolves the expressions into the concrete indices to copy, sorted,
// each with the first expression naming it (in c.targetOf). The indices
// the feed recorded under these expressions are added (the relay may have
// matched hidden ones). A closed index the feed follows fails the plan
// unless SkipClosed.
func (c *copier) plan(ctx context.Context, targets []string) ([]string, error) {
	c.targetOf = map[string]string{}
	var closed []string
	for _, expr := range targets {
		var res es.Resolution
		err := c.retry(ctx, "resolve "+expr, func() (err error) {
			res, err = c.cfg.ES.Resolve(ctx, expr, c.cfg.Hidden)
			if es.IsNotFound(err) {
				return nonRetryable{err}
			}
			return err
		})
		if es.IsNotFound(err) {
			c.log.Info("bootstrap: the expression names nothing now; nothing of it to copy", logkey.Target, expr)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, ix := range res.Indices {
			if _, ok := c.targetOf[ix.Name]; ok {
				continue
			}
			c.targetOf[ix.Name] = expr
			if ix.Closed {
				closed = append(closed, ix.Name)
			}
		}
	}
	for name, expr := range c.feed.recorded(targets) {
		if _, ok := c.targetOf[name]; !ok {
			c.targetOf[name] = expr
		}
	}
	names := make([]string, 0, len(c.targetOf))
	for n := range c.targetOf {
		names = append(names, n)
	}
	sort.Strings(names)
	var keep []string
	isClosed := map[string]bool{}
	for _, n := range closed {
		isClosed[n] = true
	}
	var refuse []string
	for _, n := range names {
		if !isClosed[n] {
			keep = append(keep, n)
			continue
		}
		followed, err := c.closedFollowed(ctx, n)
		if err != nil {
			return nil, err
		}
		switch {
		case !followed:
			c.skip(n, "closed, and never followed by the relay")
		case c.cfg.SkipClosed:
			c.skip(n, "closed (SkipClosed): its documents are not copied")
		default:
			refuse = append(refuse, n)
		}
	}
	if len(refuse) > 0 {
		return nil, fmt.Errorf("%w: %s: a closed index cannot be read, and a group joining without its documents would never get them: open it (POST /%s/_open) and copy again, or skip closed indices",
			ErrClosed, strings.Join(refuse, ", "), refuse[0])
	}
	return keep, nil
}

// closedFollowed reports whether a closed index is one the relay followed
// (its uuid has a generation). Settings answer for closed indices too.
func (c *copier) closedFollowed(ctx context.Context, name string) (bool, error) {
	s, err := c.settings(ctx, name)
	if es.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	g, err := checkpoint.ReadGeneration(ctx, c.cfg.Redis, c.feed.keys, s.UUID)
	return g > 0, err
}

func (c *copier) skip(name, reason string) {
	c.res.Skipped[name] = reason
	delete(c.res.Documents, name)
	delete(c.res.Deferred, name)
	c.log.Info("bootstrap: not copying index", logkey.Index, name, logkey.Reason, reason)
}

// recreateAttempts bounds how often an index re-created under the copy is
// copied again as the new index.
const recreateAttempts = 3

// copyIndex copies one index: snapshot_start, each shard, the
// reconciliation, snapshot_end. An index deleted during the copy is
// skipped (its deletes are the relay's, after the recorded position); one
// deleted and created again is copied again as the new index (the events
// handed of the old one stay valid: a new uuid is another document, and a
// higher generation).
func (c *copier) copyIndex(ctx context.Context, name, expr string) error {
	for attempt := 1; ; attempt++ {
		err := c.copyIndexOnce(ctx, name, expr)
		switch {
		case errors.Is(err, errVanished):
			c.skip(name, "deleted during the copy")
			return nil
		case errors.Is(err, errRecreated) && attempt < recreateAttempts:
			c.log.Warn("bootstrap: the index was created again during its copy; copying the new index", logkey.Index, name, logkey.Error, err)
			continue
		}
		return err
	}
}

func (c *copier) copyIndexOnce(ctx context.Context, name, expr string) error {
	settings, err := c.settings(ctx, name)
	if es.IsNotFound(err) {
		c.skip(name, "deleted before it was copied")
		return nil
	}
	if err != nil {
		return err
	}
	if settings.SequenceNumbersDisabled {
		c.skip(name, "sequence numbers disabled (index.disable_sequence_numbers): the relay refuses it")
		return nil
	}
	gen, err := checkpoint.ReadGeneration(ctx, c.cfg.Redis, c.feed.keys, settings.UUID)
	if err != nil {
		return err
	}
	if gen == 0 {
		c.skip(name, fmt.Sprintf("not followed by the relay yet (index uuid %s has no generation in %s): all of its events follow the recorded position",
			settings.UUID, c.feed.keys.Generations()))
		return nil
	}
	ix := &indexCopy{name: name, uuid: settings.UUID, target: expr, shards: settings.Shards}
	if t, ok := c.feed.target(ix.uuid); ok {
		ix.target = t // what the relay's events of the index carry
	}
	log := c.log.With(logkey.Index, name, logkey.IndexUUID, ix.uuid)
	delete(c.res.Skipped, name)
	if err := c.handOne(ctx, redisx.Event{Op: redisx.OpSnapshotStart, Index: name, IndexUUID: ix.uuid, Target: ix.target}); err != nil {
		return err
	}
	var present *idSet
	if c.cfg.Reconciler != nil {
		present = &idSet{}
	}
	var count, deferred int64
	for shard := 0; shard < ix.shards; shard++ {
		sc, err := c.copyShard(ctx, ix, shard, log)
		if err != nil {
			return err
		}
		count += sc.n
		deferred += sc.deferred
		present.addAll(sc.present)
	}
	c.res.Documents[name], c.res.Deferred[name] = count, deferred
	if c.cfg.Reconciler != nil {
		present.seal()
		removed, kept, err := c.reconcile(ctx, ix, present, log)
		if err != nil {
			return fmt.Errorf("reconcile the sink with %s: %w", name, err)
		}
		c.res.Removed[name], c.res.Kept[name] = removed, kept
		if removed > 0 || kept > 0 {
			log.Info("bootstrap: reconciled the sink with the index", logkey.Removed, removed, logkey.Kept, kept)
		}
	}
	end := redisx.Event{Op: redisx.OpSnapshotEnd, Index: name, IndexUUID: ix.uuid, Target: ix.target, Counts: map[string]int64{name: count}}
	if err := c.handOne(ctx, end); err != nil {
		return err
	}
	log.Info("bootstrap: index copied", logkey.Documents, count, logkey.LeftToTheStream, deferred, logkey.Shards, ix.shards)
	return nil
}

// settings reads an index's settings, retried as a shard read is; a
// missing index is not retried.
func (c *copier) settings(ctx context.Context, name string) (es.IndexSettings, error) {
	var s es.IndexSettings
	err := c.retry(ctx, "read the settings of "+name, func() (err error) {
		s, err = c.cfg.ES.Settings(ctx, name)
		if es.IsNotFound(err) {
			return nonRetryable{err}
		}
		return err
	})
	return s, err
}

// nonRetryable marks an error retry returns at once (unwrapped).
type nonRetryable struct{ err error }

func (n nonRetryable) Error() string { return n.err.Error() }

// retry runs fn until it succeeds, returns an error retryable refuses (or
// wrapped in nonRetryable), or MaxAttempts attempts failed, with the
// shards' backoff between attempts.
func (c *copier) retry(ctx context.Context, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		var nr nonRetryable
		switch {
		case err == nil:
			return nil
		case errors.As(err, &nr):
			return nr.err
		case ctx.Err() != nil:
			return ctx.Err()
		case !retryable(err):
			return err
		case attempt >= c.cfg.MaxAttempts:
			return fmt.Errorf("%w: %s: %d attempts failed; the last: %w", ErrGaveUp, what, attempt, err)
		}
		d := c.backoff(attempt)
		c.log.Warn("bootstrap: "+what+" failed; retrying", logkey.Attempt, attempt, logkey.Error, err.Error(), logkey.RetryIn, d.String())
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// handOne hands one event.
func (c *copier) handOne(ctx context.Context, e redisx.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.cfg.Handler(ctx, e); err != nil {
		return &HandlerError{Event: e, Err: err}
	}
	return nil
}

// hand hands events from up to Workers goroutines and returns when every
// call returned: the first handler error, after cancelling the calls not
// yet made.
func (c *copier) hand(ctx context.Context, evs []redisx.Event) error {
	workers := min(c.cfg.Workers, len(evs))
	if workers <= 1 {
		for _, e := range evs {
			if err := c.handOne(ctx, e); err != nil {
				return err
			}
		}
		return nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		once  sync.Once
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(evs) || hctx.Err() != nil {
					return
				}
				if err := c.cfg.Handler(hctx, evs[i]); err != nil {
					once.Do(func() {
						first = &HandlerError{Event: evs[i], Err: err}
						cancel()
					})
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return first
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
