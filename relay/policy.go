package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// The target policy: what the relay does with what an expression resolves
// to. It is decided here only, and both the start-up check (checkTargets,
// which Feed.Run runs before it takes a lease) and the resolver of every
// round (resolveTargets) apply it, so the two cannot drift apart.
//
//   - An expression that names nothing (a concrete name, alias or data
//     stream that exists nowhere; Elasticsearch 8+ answers 404,
//     Elasticsearch 7 and OpenSearch an empty resolution, es.Client.Resolve
//     makes both es.ErrNotFound): at start-up it is refused as a typo,
//     unless the feed followed an index of that name or under that
//     expression: that index was deleted while no relay ran, and the relay
//     ends it (its deletes or index_deleted event). While running (it named
//     something at start, or the feed had followed it), it is warned about
//     once and waited for: deleting an index must not stop the feed.
//   - A pattern that matches nothing: warned about and waited for, at
//     start-up too (a pattern is how one waits for indices to appear).
//   - A closed index: skipped with a warning until it is reopened; at
//     start-up, one the expression names explicitly (not through a
//     pattern or alias) that the feed never followed is refused: almost
//     certainly a mistake.
//   - An index whose sequence numbers are disabled: refused at start-up;
//     one that appears later is refused by its own loop (logged) while the
//     others go on.

// startCheck is the start-up side of the policy: what the feed followed,
// loaded once.
type startCheck struct {
	state *checkpoint.State
}

// followed reports whether the feed's state records an index match
// accepts. Start-up only (every round has its own loaded state).
func (r *Relay) followed(ctx context.Context, sc *startCheck, match func(checkpoint.IndexInfo) bool) (bool, error) {
	if sc.state == nil {
		st, err := r.cfg.Store.Load(ctx)
		if err != nil {
			return false, err
		}
		sc.state = &st
	}
	for _, info := range sc.state.Indices {
		if match(info) {
			return true, nil
		}
	}
	return false, nil
}

// The kinds of TargetError, for errors.Is.
var (
	// ErrTargetMissing: a target expression names no index, alias or data
	// stream, and the feed never followed one by that name.
	ErrTargetMissing = errors.New("the target names nothing")
	// ErrTargetClosed: a target names a closed index explicitly.
	ErrTargetClosed = errors.New("the target index is closed")
	// ErrSeqNoDisabled: a target matches an index without sequence numbers.
	ErrSeqNoDisabled = errors.New("the index has sequence numbers disabled")
)

// TargetError refuses a target expression at start-up (Run, before
// anything is written): its Kind says why. The message names no
// command-line flag: the CLI says which one to change.
type TargetError struct {
	Kind  error  // ErrTargetMissing, ErrTargetClosed or ErrSeqNoDisabled
	Expr  string // the expression of Config.Targets
	Index string // the concrete index at fault ("" for ErrTargetMissing)
	URLs  string // the cluster's URLs (ErrTargetMissing)
	Err   error  // the cluster's answer (ErrTargetMissing), or nil
}

func (e *TargetError) Error() string {
	switch e.Kind {
	case ErrTargetMissing:
		return fmt.Sprintf("target %q names no index, alias or data stream on %s (%v): %s", e.Expr, e.URLs, e.Err, e.Remedy())
	case ErrTargetClosed:
		return fmt.Sprintf("index %s (target %q) is closed, and a closed index cannot be read: %s", e.Index, e.Expr, e.Remedy())
	case ErrSeqNoDisabled:
		return fmt.Sprintf("index %s (matched by target %q) %s: %s", e.Index, e.Expr, SeqNoDisabled, e.Remedy())
	}
	return fmt.Sprintf("target %q: %v", e.Expr, e.Kind)
}

// Remedy is what to do about the target, in terms of target expressions.
func (e *TargetError) Remedy() string {
	switch e.Kind {
	case ErrTargetMissing:
		return fmt.Sprintf("check for a typo, or use a pattern such as %q to wait for indices to appear", e.Expr+"*")
	case ErrTargetClosed:
		return fmt.Sprintf("open it (POST /%s/_open), or follow it with a pattern such as %q to wait until it is reopened", e.Index, e.Index+"*")
	case ErrSeqNoDisabled:
		if e.Explicit() {
			return "remove it from the targets"
		}
		return fmt.Sprintf("exclude it (e.g. %q)", e.Expr+",-"+e.Index)
	}
	return ""
}

// Explicit reports whether Expr names Index itself, not through a pattern
// or an alias.
func (e *TargetError) Explicit() bool { return namesExplicitly(e.Expr, e.Index) }

// Is reports whether target is e's Kind. Err is not in the chain: the
// cluster's answer is part of the message, not a second reason.
func (e *TargetError) Is(target error) bool { return target == e.Kind }

// SeqNoDisabled says why an index without sequence numbers cannot be followed.
const SeqNoDisabled = "has sequence numbers disabled (index.disable_sequence_numbers: true, the default for index.mode columnar in Elasticsearch 9.5): a change feed reads documents by _seq_no and cannot follow it"

// nameless applies the policy to an expression that names nothing
// (notFound, from es.Client.Resolve): a start-up error, or a warning.
func (r *Relay) nameless(ctx context.Context, expr string, notFound error, said *targetState) error {
	if sc := said.start; sc != nil {
		known, err := r.followed(ctx, sc, func(info checkpoint.IndexInfo) bool { return info.Target == expr || info.Name == expr })
		if err != nil {
			return err
		}
		if !known {
			return &TargetError{Kind: ErrTargetMissing, Expr: expr, URLs: r.cfg.ES.URLs(), Err: notFound}
		}
	}
	said.once("expr:"+expr, "missing", func() {
		r.log.Warn("the expression names no index, alias or data stream (a typo?); waiting for it to appear", logkey.Target, expr, logkey.Error, notFound.Error())
	})
	return nil
}

// closedTarget applies the policy to a closed index an expression matched:
// a start-up error, or a warning (once) and the index is skipped.
func (r *Relay) closedTarget(ctx context.Context, expr, name string, said *targetState) error {
	if sc := said.start; sc != nil && namesExplicitly(expr, name) {
		known, err := r.followed(ctx, sc, func(info checkpoint.IndexInfo) bool { return info.Name == name })
		if err != nil {
			return err
		}
		if !known {
			return &TargetError{Kind: ErrTargetClosed, Expr: expr, Index: name}
		}
	}
	r.sayClosed(name, expr)
	return nil
}

// checkTargets resolves the targets once, under the start-up side of the
// policy, and refuses the indices that cannot be followed. It writes
// nothing.
func (r *Relay) checkTargets(ctx context.Context) error {
	want, _, err := r.resolveTargets(ctx, &targetState{said: map[string]string{}, start: &startCheck{}})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		settings, err := r.cfg.ES.Settings(ctx, name)
		if err != nil {
			return err
		}
		if !settings.SequenceNumbersDisabled {
			continue
		}
		return &TargetError{Kind: ErrSeqNoDisabled, Expr: want[name], Index: name}
	}
	return nil
}

// namesExplicitly reports whether an expression names the index itself (an
// element without wildcards), not through a pattern or alias.
func namesExplicitly(expr, index string) bool {
	for _, el := range strings.Split(expr, ",") {
		if el = strings.TrimSpace(el); el == index {
			return true
		}
	}
	return false
}
