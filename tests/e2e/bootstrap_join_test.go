package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestBootstrap_ReinitializesAMirrorThatLostHistory: a bulk mirror runs,
// stops; 4 writers go on indexing, updating and deleting; the stream is
// trimmed to a tenth, past the mirror's group. consume refuses the group
// (history lost); consume --bootstrap, with the writers still writing,
// copies the cluster's documents, deletes from the mirror what the source
// no longer has, moves the group and follows on: the mirror ends exactly
// the cluster's documents, and the group is healthy.
func TestBootstrap_ReinitializesAMirrorThatLostHistory(t *testing.T) {
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, MaxCompletionDelay: 3 * time.Millisecond})
	ix := c.Index("reinit")
	createIndex(t, c, ix, 3, 0)
	dst := mirrorTarget(t, c, esemu.Config{})
	srv := redistest.Start(t)
	relayP := startBinary(t, relayArgs(c, srv.URL(), "reinit", ix, "--deletes", "--delete-scan-interval", "300ms", "--delete-scan-budget", "1")...)
	defer relayP.kill()
	f := binaryFeed(t, srv, "reinit")
	ctx := context.Background()
	consume := func(extra ...string) *proc {
		args := append([]string{"consume", "--redis", srv.URL(), "--feed", "reinit", "--group", "mirror",
			"--sink", "bulk", "--bulk-es", dst.URL(), "--log-level", "warn", "--wait-for-feed", "1m"}, extra...)
		return startBinary(t, args...)
	}
	stopWriters := startWriters(t, c, ix, 4, 77, true, true)
	m := consume()
	waitStream(t, f, 300, time.Minute)
	waitGroupRead(t, f.rdb, f.keys.Events(), "mirror", 300, time.Minute)
	stopGracefully(t, m, "the mirror's consume")

	// The mirror is stopped; the feed goes on, then is trimmed past it
	// (to a tenth: the group read at least 300 entries, and 400 more come).
	target := f.rdb.XLen(ctx, f.keys.Events()).Val() + 400
	waitStream(t, f, target, 2*time.Minute)
	n := f.rdb.XLen(ctx, f.keys.Events()).Val()
	f.rdb.XTrimMaxLen(ctx, f.keys.Events(), n/10)
	refused := consume()
	if code := waitExit(t, refused, 30*time.Second); code != 1 || !strings.Contains(refused.out.String(), "history lost") {
		t.Fatalf("consume of the trimmed group exited %d, want 1 with history lost:\n%s", code, refused.out)
	}

	b := consume(append([]string{"--bootstrap"}, inspect(c).cliArgs()...)...)
	time.Sleep(3 * time.Second) // writers go on during and after the copy
	ws := stopWriters()
	ops, failed := writerOps(ws)
	waitCaughtUp(t, c, f.store, []string{ix}, time.Minute)
	waitGroupDone(t, f.rdb, f.keys.Events(), "mirror", 2*time.Minute)
	var diff string
	var docs int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if diff, docs = diffMirror(t, c, dst, ix); diff == "" || time.Now().After(deadline) {
			break
		}
	}
	stopGracefully(t, b, "consume --bootstrap")
	if diff != "" {
		t.Fatalf("the re-initialized mirror differs from the source:\n%s\nconsume --bootstrap:\n%s", diff, tail(b.out.String(), 30))
	}
	_, g, _, err := redisx.ReadGroup(ctx, f.rdb, f.keys.Events(), "mirror")
	if err != nil || g.HistoryLost() {
		t.Fatalf("group after the bootstrap: %+v, %v; want healthy", g, err)
	}
	if rec, _ := redisx.RecordedLoss(ctx, f.rdb, f.keys, "mirror"); rec != "" {
		t.Fatalf("the recorded loss stayed after the bootstrap: %s", rec)
	}
	if gs := f.rdb.XInfoGroups(ctx, f.keys.Events()).Val(); len(gs) != 1 {
		t.Fatalf("groups after the bootstrap: %+v; want only the mirror's (the holding group dropped)", gs)
	}
	t.Logf("%d writes (%d failed or unanswered); stream trimmed from %d to %d entries; the re-initialized mirror holds exactly the source's %d documents",
		ops, failed, n, n/10, docs)
	record(t, figure{Scenario: "consume --bootstrap re-initializes a bulk mirror after the stream was trimmed to a tenth past it, 4 writers on",
		Faults: 1, Entries: int(n), Docs: docs,
		Note: fmt.Sprintf("%d writes; the mirror refused first (history lost), exact after --bootstrap", ops)})
}

// waitStream waits until the feed's stream has at least n entries.
func waitStream(tb testing.TB, f *feed, n int64, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for f.rdb.XLen(context.Background(), f.keys.Events()).Val() < n {
		if time.Now().After(deadline) {
			tb.Fatalf("the stream did not reach %d entries within %s", n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBootstrap_RefusedCopyLeavesNoHold: --bootstrap without --es is a
// usage error (exit 2) that leaves the feed as it was: no holding group,
// which would keep safe trimming from going past it.
func TestBootstrap_RefusedCopyLeavesNoHold(t *testing.T) {
	srv, f, _ := historyRig(t)
	p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "lost", "--group", "g1", "--sink", "stdout", "--bootstrap")
	if code := waitExit(t, p, 15*time.Second); code != 2 || !strings.Contains(p.out.String(), "--bootstrap needs --es") {
		t.Fatalf("consume --bootstrap without --es exited %d, want 2 naming --es:\n%s", code, p.out)
	}
	if gs := f.rdb.XInfoGroups(context.Background(), f.keys.Events()).Val(); len(gs) != 1 || gs[0].Name != "g1" {
		t.Fatalf("groups after the refused bootstrap: %+v; want only g1", gs)
	}
}
