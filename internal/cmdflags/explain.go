package cmdflags

import (
	"errors"
	"fmt"
	"strings"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

// The libraries' typed errors say what is wrong in their own terms
// (targets, partition counts, a bootstrap); only the CLI knows its flags.
// Explain turns them into the advice a user of es-changefeed acts on.

// Explain returns err with the message of the typed error in its chain (a
// *relay.TargetError, *redisx.PartitionsError or *redisx.HistoryLostError)
// replaced by the CLI's advice, naming the flags; the rest of the message,
// and the chain for errors.Is/As, stay. Other errors come back as they are.
func Explain(err error) error {
	var te *relay.TargetError
	var pe *redisx.PartitionsError
	var he *redisx.HistoryLostError
	switch {
	case errors.As(err, &te):
		return Advise(err, te, explainTarget(te))
	case errors.As(err, &pe):
		return Advise(err, pe, explainPartitions(pe))
	case errors.As(err, &he):
		return Advise(err, he, explainHistoryLost(he))
	}
	return err
}

// explainTarget names --index.
func explainTarget(te *relay.TargetError) string {
	switch te.Kind {
	case relay.ErrTargetMissing:
		return fmt.Sprintf("--index %q names no index, alias or data stream on %s (%v): %s", te.Expr, te.URLs, te.Err, te.Remedy())
	case relay.ErrTargetClosed:
		return fmt.Sprintf("index %s (--index %q) is closed, and a closed index cannot be read: %s", te.Index, te.Expr, te.Remedy())
	case relay.ErrSeqNoDisabled:
		todo := te.Remedy()
		if te.Explicit() {
			todo = "remove it from --index"
		}
		return fmt.Sprintf("index %s (matched by --index %q) %s; %s", te.Index, te.Expr, relay.SeqNoDisabled, todo)
	}
	return te.Error()
}

// explainPartitions names --partitions.
func explainPartitions(pe *redisx.PartitionsError) string {
	if pe.Recorded <= 1 {
		return fmt.Sprintf("%s; you passed --partitions %d: pass --partitions 1 (or leave it out), or start a new feed; %s",
			pe.Record(), pe.Passed, redisx.PartitionsFix)
	}
	return fmt.Sprintf("%s; you passed --partitions %d: pass --partitions %d, or start a new feed; %s",
		pe.Record(), pe.Passed, pe.Recorded, redisx.PartitionsFix)
}

// explainHistoryLost names the command that re-initializes the group.
func explainHistoryLost(he *redisx.HistoryLostError) string {
	if he.New {
		return he.Loss() + ". Join with --bootstrap (copies the cluster's current documents, then follows the stream with no gap), " +
			"or with --start '$' for new changes only"
	}
	return he.Loss() + ". Its sink misses those changes; re-initialize it with `" + bootstrapCommand(he.Feed, he.Group.Name) + " --es <cluster URL>` " +
		"(copies the cluster's current documents, then follows the stream with no gap)"
}

// ExplainLost adds the command that re-initializes group to a history
// loss that is not a *redisx.HistoryLostError (pending entries found
// gone, or a loss recorded earlier).
func ExplainLost(err error, feed, group string) error {
	var he *redisx.HistoryLostError
	if !errors.Is(err, redisx.ErrHistoryLost) || errors.As(err, &he) {
		return err
	}
	// The library's own advice becomes the command, said once.
	if msg, ok := strings.CutSuffix(err.Error(), redisx.BootstrapAdvice); ok {
		return advised{err: err, msg: msg + "re-initialize the group with " + bootstrapCommand(feed, group)}
	}
	return fmt.Errorf("%w; re-initialize the group with %s", err, bootstrapCommand(feed, group))
}

// bootstrapCommand is the consume command that re-initializes group.
func bootstrapCommand(feed, group string) string {
	f := ""
	if feed != "" && feed != redisx.DefaultFeed {
		f = " --feed " + feed
	}
	return "es-changefeed consume" + f + " --group " + group + " --bootstrap"
}

// advised is an error whose message is the CLI's; its chain is err's.
type advised struct {
	err error
	msg string
}

func (a advised) Error() string { return a.msg }
func (a advised) Unwrap() error { return a.err }

// Advise replaces the message of inner (an error in err's chain) within
// err's message by text.
func Advise(err, inner error, text string) error {
	msg, in := err.Error(), inner.Error()
	if strings.Contains(msg, in) {
		return advised{err, strings.Replace(msg, in, text, 1)}
	}
	return advised{err, msg + ": " + text}
}
