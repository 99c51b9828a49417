package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// ErrUnfollowable marks an index a change feed cannot follow (sequence
// numbers disabled). It is refused with an error, not retried.
var ErrUnfollowable = errors.New("index cannot be followed")

// ErrHistoryReplaced stops the relay: a shard's history_uuid changed, so
// its seq nos no longer mean what the feed's checkpoint says (a stale or
// empty copy was forced to be primary). Only a resync recovers.
var ErrHistoryReplaced = errors.New("a shard's history was replaced")

// follower is the loop of one concrete index.
type follower struct {
	target string
	cancel context.CancelFunc
	done   chan struct{}
	// refused is set (before done closes) when the index cannot be followed.
	refused bool
}

// targetState remembers what was last said about an expression or an index,
// so each condition is logged once per change, and the last resolution.
type targetState struct {
	said  map[string]string
	start *startCheck // set for the start-up check (policy.go)

	// sig is the signature of the joined resolution (es.ResolveAll) the
	// last per-expression answer (want, closed) went with.
	sig    string
	want   map[string]string
	closed map[string]bool
}

func (t *targetState) once(key, state string, log func()) {
	if t.said[key] == state {
		return
	}
	t.said[key] = state
	log()
}

// followTargets resolves the targets every round and keeps one loop per
// concrete index behind them: indices that appear (a new index matching a
// pattern, a rollover's new write index, a new backing index) start from
// their beginning; closed ones are skipped until reopened; loops of indices
// that no longer match stop; an index that was deleted ends with its deletes.
func (r *Relay) followTargets(ctx context.Context) error {
	loops := map[string]*follower{}
	refused := map[string]bool{}
	said := &targetState{said: map[string]string{}}
	errs := make(chan error, 1)
	defer func() {
		for _, f := range loops {
			f.cancel()
			<-f.done
		}
	}()
	b := r.newBackoff()
	endedVanished := false // once, after the first resolution
	for {
		r.m.resolutions.Inc()
		want, closed, err := r.resolveTargets(ctx, said)
		if err != nil {
			// A node that died under the request, a 5xx, a 429: retried
			// as every read is, the index loops going on meanwhile.
			if ctx.Err() != nil {
				return nil
			}
			d := b.next()
			b.report(r.log, "resolving the targets failed; retrying", err, d)
			if !sleep(ctx, d) {
				return nil
			}
			continue
		}
		b.recovered(r.log)
		r.mu.Lock()
		first := !r.resolved
		r.resolved = true
		r.mu.Unlock()
		for name, f := range loops {
			select {
			case <-f.done:
				if f.refused {
					refused[name] = true
				}
				delete(loops, name)
			default:
			}
		}
		for name, target := range want {
			if loops[name] != nil || refused[name] {
				continue
			}
			fctx, cancel := context.WithCancel(ctx)
			f := &follower{target: target, cancel: cancel, done: make(chan struct{})}
			loops[name] = f
			fromNow := first && r.cfg.From == FromNow
			go func(name string) {
				defer close(f.done)
				defer r.m.forgetIndex(name) // before done: a new loop's series stay
				err := r.follow(fctx, name, target, fromNow)
				switch {
				case errors.Is(err, ErrUnfollowable):
					r.log.Error("refusing to follow index", logkey.Index, name, logkey.Error, err.Error())
					f.refused = true
				case err != nil:
					select {
					case errs <- err:
					default:
					}
				}
			}(name)
		}
		for name, f := range loops {
			if _, ok := want[name]; ok {
				continue
			}
			f.cancel()
			<-f.done
			delete(loops, name)
			if closed[name] {
				continue // logged by resolveTargets
			}
			if err := r.endIfGone(ctx, name); err != nil {
				if fatalTargetError(err) {
					return err
				}
				// Followed again next round, and ended then if gone.
				b.report(r.log, "ending an index that no longer matches failed; retrying", err, r.cfg.PollInterval)
			}
		}
		if !endedVanished {
			if err := r.endVanished(ctx, want); err != nil {
				if fatalTargetError(err) {
					return err
				}
				b.report(r.log, "ending the indices deleted while no relay ran failed; retrying", err, r.cfg.PollInterval)
			} else {
				endedVanished = true
			}
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return nil
		case <-sleepChan(r.cfg.PollInterval):
		}
		for name := range refused {
			if _, ok := want[name]; !ok {
				delete(refused, name) // gone: look again if it comes back
			}
		}
	}
}

// fatalTargetError tells the errors of ending an index that stop the
// relay (the lease moved, Redis went back to an older state) from those a
// later round retries.
func fatalTargetError(err error) bool {
	return errors.Is(err, redisx.ErrLeaseLost) || errors.Is(err, checkpoint.ErrRolledBack) || errors.Is(err, context.Canceled)
}

// resolveTargets resolves every expression. It returns the open indices to
// follow (index -> the first expression naming it) and the closed ones.
// What it does with expressions that name or match nothing and with closed
// indices is the target policy (policy.go).
//
// With several expressions, a round asks once for all of them
// (joinedResolution) and, if that answer is the one the previous round
// had, keeps the previous round's answer: idle, the targets cost one
// request per poll whatever their number. Only a change (an index created,
// deleted, closed, an alias moved) asks each expression alone, for which
// expression names which index.
func (r *Relay) resolveTargets(ctx context.Context, said *targetState) (map[string]string, map[string]bool, error) {
	if len(r.cfg.Targets) == 1 {
		return r.resolveEach(ctx, said)
	}
	sig, err := r.joinedResolution(ctx)
	if err != nil {
		return nil, nil, err
	}
	if said.want != nil && sig == said.sig {
		return said.want, said.closed, nil
	}
	want, closed, err := r.resolveEach(ctx, said)
	if err != nil {
		return nil, nil, err
	}
	said.sig, said.want, said.closed = sig, want, closed
	return want, closed, nil
}

// joinedResolution returns the signature of what the expressions name
// together. They are joined in one request, except that an exclusion
// applies to every element before it: only the first expression with an
// exclusion joins (first, so that it excludes from itself only); any other
// one is asked alone, each answer part of the signature.
func (r *Relay) joinedResolution(ctx context.Context) (string, error) {
	var joined, alone []string
	excluding := false
	for _, expr := range r.cfg.Targets {
		switch {
		case !hasExclusion(expr):
			joined = append(joined, expr)
		case !excluding:
			excluding = true
			joined = append([]string{expr}, joined...)
		default:
			alone = append(alone, expr)
		}
	}
	var sig strings.Builder
	for _, group := range append([][]string{joined}, splitEach(alone)...) {
		if len(group) == 0 {
			continue
		}
		res, err := r.cfg.ES.ResolveAll(ctx, group, r.cfg.Hidden)
		if err != nil {
			return "", err
		}
		sig.WriteString(strings.Join(group, ",") + "\n" + res.Signature())
	}
	return sig.String(), nil
}

// hasExclusion reports whether an expression has a "-name" element.
func hasExclusion(expr string) bool {
	for _, el := range strings.Split(expr, ",") {
		if strings.HasPrefix(strings.TrimSpace(el), "-") {
			return true
		}
	}
	return false
}

func splitEach(exprs []string) [][]string {
	out := make([][]string, len(exprs))
	for i, e := range exprs {
		out[i] = []string{e}
	}
	return out
}

// resolveEach resolves each expression alone.
func (r *Relay) resolveEach(ctx context.Context, said *targetState) (map[string]string, map[string]bool, error) {
	want := map[string]string{}
	closed := map[string]bool{}
	for _, expr := range r.cfg.Targets {
		res, err := r.cfg.ES.Resolve(ctx, expr, r.cfg.Hidden)
		switch {
		case es.IsNotFound(err):
			if err := r.nameless(ctx, expr, err, said); err != nil {
				return nil, nil, err
			}
			continue
		case err != nil:
			return nil, nil, err
		}
		if len(res.Indices) == 0 {
			said.once("expr:"+expr, "empty", func() {
				r.log.Warn("the expression matches no index yet; waiting", logkey.Target, expr)
			})
			continue
		}
		said.once("expr:"+expr, "ok", func() {})
		for _, ix := range res.Indices {
			if ix.Closed {
				if err := r.closedTarget(ctx, expr, ix.Name, said); err != nil {
					return nil, nil, err
				}
				closed[ix.Name] = true
				continue
			}
			if _, ok := want[ix.Name]; !ok && !closed[ix.Name] {
				want[ix.Name] = expr
			}
		}
	}
	return want, closed, nil
}

// endIfGone ends an index that no longer matches if it was deleted; an
// index that still exists but no longer matches is just not followed.
func (r *Relay) endIfGone(ctx context.Context, name string) error {
	_, err := r.cfg.ES.Stats(ctx, []string{name})
	switch {
	case err == nil, es.IsClosed(err):
		r.log.Info("index no longer matches the targets: not following it", logkey.Index, name)
		return nil
	case !es.IsNotFound(err):
		return err
	}
	cur := &cursor{}
	if err := r.load(ctx, cur); err != nil {
		return err
	}
	return r.forgetOthers(ctx, name, "", cur)
}

// endVanished ends the indices the feed followed under these targets that
// were deleted while no relay ran.
func (r *Relay) endVanished(ctx context.Context, want map[string]string) error {
	cur := &cursor{}
	if err := r.load(ctx, cur); err != nil {
		return err
	}
	targets := map[string]bool{}
	for _, t := range r.cfg.Targets {
		targets[t] = true
	}
	var names []string
	for _, info := range cur.state.Indices {
		if _, followed := want[info.Name]; !followed && targets[info.Target] {
			names = append(names, info.Name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		if i > 0 && names[i-1] == name {
			continue
		}
		if err := r.endIfGone(ctx, name); err != nil {
			return fmt.Errorf("end index %s: %w", name, err)
		}
	}
	return nil
}

// SplitTargets turns --index values into expressions: each value is split
// at commas, and an element starting with '-' (an exclusion) stays with the
// elements before it, so "logs-*,-logs-debug*,metrics" is two expressions.
func SplitTargets(values []string) []string {
	var out []string
	for _, v := range values {
		var cur []string
		flush := func() {
			if len(cur) > 0 {
				out = append(out, strings.Join(cur, ","))
				cur = nil
			}
		}
		parts := strings.Split(v, ",")
		for i, p := range parts {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			next := "" // the next non-empty element: "a,,-b" is one expression
			for _, q := range parts[i+1:] {
				if q = strings.TrimSpace(q); q != "" {
					next = q
					break
				}
			}
			cur = append(cur, p)
			if !strings.HasPrefix(next, "-") {
				flush()
			}
		}
		flush()
	}
	return out
}

func sleepChan(d time.Duration) <-chan time.Time { return time.After(d) }
