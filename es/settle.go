package es

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/backoff"
)

// ErrPrimaryChanged: a shard's primary (term, node or history) changed
// between reading its checkpoints and settling what a search showed.
var ErrPrimaryChanged = errors.New("the shard's primary changed while it was read")

// Settle returns once what a search (or a view) of shard shard of index
// name, made after primary was read, may show can no longer be taken back:
// once the primary's global checkpoint has reached the max seq no it
// reports first here, with the same primary (ShardCheckpoints.SamePrimary).
// read returns the shard's primary checkpoints now.
//
// Why (docs/DESIGN.md §2): a search sees the latest refreshed version of each
// document, including versions written above the global checkpoint. Such a
// version hides the older one (an update at seq 20 hides the document's seq
// 16); if a failover then discards seq 20, seq 16 is the document's state
// again, and a reader that moved past it never delivers it. Every op the
// search could see is at or below the primary's max seq no read after it;
// once the gcp covers that, on the same primary, none of them can be
// discarded any more. A failover in between (a higher term, or the primary
// on another node: Elasticsearch may report the new term only later) is
// ErrPrimaryChanged: read again. A gcp that does not get there within
// timeout is an error too.
func Settle(ctx context.Context, name string, shard int, primary ShardCheckpoints, timeout time.Duration,
	read func() (ShardCheckpoints, error)) error {
	sc, err := read()
	if err != nil {
		return err
	}
	target := sc.MaxSeqNo
	deadline := time.Now().Add(timeout)
	pause := backoff.Backoff{Min: 5 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		if !sc.SamePrimary(primary) {
			return fmt.Errorf("shard %d of %s: %w (primary term %d on node %s, then %d on %s)",
				shard, name, ErrPrimaryChanged, primary.PrimaryTerm, primary.Node, sc.PrimaryTerm, sc.Node)
		}
		if sc.GlobalCheckpoint >= target {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shard %d of %s: the global checkpoint stayed at %d below the max seq no %d for %s: a replica is not keeping up",
				shard, name, sc.GlobalCheckpoint, target, timeout)
		}
		t := time.NewTimer(pause.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if sc, err = read(); err != nil {
			return err
		}
	}
}
