package e2e

// The reliability suite: each TestReliability_* applies one kind of fault
// production applies, many times, and ends with an audit of the stream
// against the cluster's own histories (and, for consumers, of the target
// against the source). Each records a figure; `make reliability` collects
// them for docs/RELIABILITY.md.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// startWriters runs n writers on the index until the returned stop is
// called (which waits for them). Their seeds derive from seed. On a real
// cluster they share an ack log, for the audit (auditBackend), and are
// paced (realWriterPace).
func startWriters(tb testing.TB, c backend, index string, n int, seed uint64, deletes, tolerant bool) (stop func() []*writer) {
	tb.Helper()
	var acks *ackLog
	var pace time.Duration
	var urls []string
	if !onEmulator(c) {
		acks, pace = newAckLog(), realWriterPace
	}
	if e, ok := c.(*engineBackend); ok {
		urls = e.URLs() // each request to a node at random: a killed one fails some writes
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	ws := make([]*writer, n)
	for i := range ws {
		ws[i] = &writer{url: c.URL(), index: index, id: i, rng: rand.New(rand.NewPCG(uint64(i), seed)),
			routing: map[string]string{}, deletes: deletes, tolerant: tolerant, acks: acks, pace: pace, urls: urls}
		wg.Add(1)
		go func(w *writer) { defer wg.Done(); w.run(tb, done) }(ws[i])
	}
	var once sync.Once
	stop = func() []*writer {
		once.Do(func() { close(done); wg.Wait() })
		return ws
	}
	// A test that fails before it stops them must not leave writers
	// logging after it ended.
	tb.Cleanup(func() { stop() })
	return stop
}

// realWriterPace is the pause of startWriters' writers before each request
// on a real cluster: unpaced, 4 writers saturate the real node on 2 cores,
// and the relays read their backlog until the writes end, so no document
// they delivered is deleted while they follow (the scenarios' deletes
// would go untested).
const realWriterPace = 5 * time.Millisecond

// waitDeleteEvent waits, at most timeout, until one of the streams
// carries a delete event: a scenario that must exercise delete scans keeps
// its writers writing until then. The emulator's relays get there within
// the scenario's own time; a real node's, on a loaded machine, may follow
// only when the scenario's writes are nearly over, read just the documents
// that are left, and find nothing they delivered deleted.
func waitDeleteEvent(tb testing.TB, rdb *redis.Client, streams []string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range streams {
			for _, e := range entries(tb, rdb, s) {
				if e.Op == redisx.OpDelete {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			return // the scenario's check says what is missing
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func writerOps(ws []*writer) (ops, failed int) {
	for _, w := range ws {
		ops += w.ops
		failed += w.failed
	}
	return ops, failed
}

// auditBackend audits the events against c: by the emulator's op
// histories (audit), or on a real cluster, which has none, by what the
// writers ws were acknowledged (auditAcks: their ack log; a write of the
// test's own goes through a writer too, writer.do).
func auditBackend(tb testing.TB, c backend, indices []string, evs []redisx.Event, ws []*writer) auditResult {
	tb.Helper()
	switch v := c.(type) {
	case *esemu.Cluster:
		return audit(tb, v, indices, evs)
	case *emulator:
		return audit(tb, v.Cluster, indices, evs)
	}
	a, unconfirmed := auditAcks(tb, c, indices, evs, oneAckLog(ws))
	if unconfirmed != 0 {
		tb.Logf("audit: %d upserts of writes that got no answer", unconfirmed)
	}
	return a
}

// oneAckLog returns the writers with one ack log, the union of theirs
// (auditAcks reads one): writers started apart have logs of their own.
func oneAckLog(ws []*writer) []*writer {
	var logs []*ackLog
	for _, w := range ws {
		if w.acks != nil && !slices.Contains(logs, w.acks) {
			logs = append(logs, w.acks)
		}
	}
	if len(logs) < 2 {
		return ws
	}
	all := newAckLog()
	for _, l := range logs {
		for k := range l.acked {
			all.acked[k] = true
		}
		for ix, bySeq := range l.bySeq {
			if all.bySeq[ix] == nil {
				all.bySeq[ix] = map[int64][]ackKey{}
			}
			for seq, ks := range bySeq {
				all.bySeq[ix][seq] = append(all.bySeq[ix][seq], ks...)
			}
		}
		for k, n := range l.uncertain {
			all.uncertain[k] += n
		}
		all.writes += l.writes
	}
	out := make([]*writer, len(ws))
	for i, w := range ws {
		cp := *w
		cp.acks = all
		out[i] = &cp
	}
	return out
}

// auditStream waits until the stream replays to the indices (deletes come
// from scans after the reads caught up), audits it (auditBackend: ws are
// the writers, needed on a real cluster) and fails with the first problems
// if anything is off.
func auditStream(tb testing.TB, c backend, f *feed, indices []string, ws []*writer, timeout time.Duration) auditResult {
	tb.Helper()
	return auditStreams(tb, c, f.rdb, []string{f.keys.Events()}, indices, ws, timeout)
}

// auditStreams is auditStream over several streams (a partitioned feed's):
// their events are merged stream after stream, which keeps each document's
// order (a document's events are all in its shard's partition).
func auditStreams(tb testing.TB, c backend, rdb *redis.Client, streams []string, indices []string, ws []*writer, timeout time.Duration) auditResult {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var evs []redisx.Event
		for _, s := range streams {
			evs = append(evs, entries(tb, rdb, s)...)
		}
		a := auditBackend(tb, c, indices, evs, ws)
		if a.Lost+a.Duplicated+a.Wrong == 0 || time.Now().After(deadline) {
			if a.Duplicated+a.Wrong != 0 || a.Lost != 0 {
				tb.Logf("audit problems:\n%s", strings.Join(a.Problems, "\n"))
			}
			return a
		}
		if a.Duplicated+a.Wrong != 0 {
			// Duplicates and wrong events never heal: report now.
			tb.Logf("audit problems:\n%s", strings.Join(a.Problems, "\n"))
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// binaryFeed is the feed a relay binary writes, for the in-process checks.
func binaryFeed(tb testing.TB, srv *redistest.Server, name string) *feed {
	tb.Helper()
	return &feed{name: name, rdb: srv.Client(tb), keys: redisx.NewKeys(name), store: storeFor(tb, srv, name)}
}

// TestReliability_RelaySIGKILL kills the relay binary (with --deletes) at
// random moments — mid-read, mid-scan, mid-commit, while waiting out the
// previous owner's lease — 20 times while 4 writers index, update and
// delete, restarting it each time. The stream must hold every change once:
// no (index, shard, seq_no) twice, no delete twice or false, and it replays
// to exactly the index.
func TestReliability_RelaySIGKILL(t *testing.T) {
	t.Parallel()
	kills := 20
	if testing.Short() {
		kills = 5
	}
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true})
	ix := c.Index("crash")
	createIndex(t, c, ix, 3, 1)
	srv := redistest.Start(t)
	stopWriters := startWriters(t, c, ix, 4, 7, true, false)
	args := relayArgs(c, srv.URL(), "crash", ix, "--deletes", "--delete-scan-interval", "30ms", "--delete-scan-budget", "1")
	rng := rand.New(rand.NewPCG(42, 42))
	for i := 0; i < kills; i++ {
		p := startBinary(t, args...)
		time.Sleep(time.Duration(150+rng.IntN(850)) * time.Millisecond)
		p.kill()
	}
	p := startBinary(t, args...)
	f := binaryFeed(t, srv, "crash")
	waitDeleteEvent(t, f.rdb, []string{f.keys.Events()}, 30*time.Second)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)
	a := auditStream(t, c, f, []string{ix}, ws, 30*time.Second)
	p.kill()
	if a.Deletes == 0 {
		t.Fatal("no delete event: the scenario did not exercise delete scans")
	}
	record(t, figure{Scenario: "relay SIGKILL, 4 writers, --deletes", Faults: kills, Entries: a.Entries, Docs: a.Docs,
		Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes; %d delete events", ops, a.Deletes)})
}

// TestReliability_ConsumerSIGKILL: the relay plus 3 `consume --sink bulk`
// processes mirror an index into a second cluster while 4 writers index,
// update and delete; consumer processes are SIGKILLed at random 20 times
// and restarted. Afterwards the mirror equals the source (ids, sources,
// versions), nothing is pending or dead-lettered, and the redeliveries
// (entries a killed consumer left pending) are counted.
func TestReliability_ConsumerSIGKILL(t *testing.T) {
	t.Parallel()
	d, kills := 10*time.Second, 20
	if testing.Short() {
		d, kills = 3*time.Second, 4
	}
	src := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	dst := mirrorTarget(t, src, esemu.Config{})
	ix := src.Index("orders")
	createIndex(t, src, ix, 3, 1)
	// The writers use custom routing: the bulk sink writes routed events
	// only into a target that places them as the source does.
	createIndex(t, dst, ix, 3, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startRelayDeletes(t, src, srv.URL(), "shop", []string{ix}, func(dc *deletes.Config) {
		dc.Interval = 200 * time.Millisecond
	}, nil)
	procs := make([]*proc, 3)
	name := func(i int) string { return fmt.Sprintf("c%d", i) }
	for i := range procs {
		procs[i] = startBinary(t, consumeArgs(srv.URL(), "shop", "mirror", name(i), dst.URL())...)
	}
	stopWriters := startWriters(t, src, ix, 4, 31, true, false)
	rng := rand.New(rand.NewPCG(8, 8))
	interval := d / time.Duration(kills+1)
	leftPending := 0
	for k := 0; k < kills; k++ {
		time.Sleep(interval)
		i := rng.IntN(len(procs))
		procs[i].kill()
		// What the killed consumer had read but not acked is redelivered
		// (reclaimed by a live consumer, or re-read by its successor).
		pend, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: f.keys.Events(), Group: "mirror",
			Start: "-", End: "+", Count: 100000, Consumer: name(i)}).Result()
		if err != nil {
			t.Fatal(err)
		}
		leftPending += len(pend)
		procs[i] = startBinary(t, consumeArgs(srv.URL(), "shop", "mirror", name(i), dst.URL())...)
	}
	time.Sleep(interval)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	waitCaughtUp(t, src, f.store, []string{ix}, 30*time.Second)
	a := auditStream(t, src, f, []string{ix}, ws, 30*time.Second)
	waitGroupDone(t, rdb, f.keys.Events(), "mirror", 60*time.Second)
	lost := mirrorLost(t, src, dst, ix)
	dead, _ := rdb.XLen(context.Background(), f.keys.Dead()).Result()
	if dead != 0 {
		t.Errorf("%d events dead-lettered: nothing should fail here", dead)
	}
	for _, p := range procs {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	// Redeliveries refused by the target's version check: the emulator
	// counts them; a real target does not, nor do the consumers' metrics
	// (and a killed consumer's would be gone).
	refused := "a real target does not count the redeliveries its version check refused (409)"
	if n, ok := versionConflicts(dst); ok {
		refused = fmt.Sprintf("%d applied twice at the target and refused by its version check (409), 0 effective", n)
	}
	record(t, figure{Scenario: "consumer SIGKILL, 3 consumers, bulk sink", Faults: kills, Entries: a.Entries, Docs: a.Docs,
		Lost: lost + a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes; %d entries left pending by killed consumers and redelivered; %s; %d dead letters",
			ops, leftPending, refused, dead)})
}

// mirrorLost counts the source documents the target does not hold exactly
// (id, source, version), plus target documents the source does not have.
func mirrorLost(tb testing.TB, src, dst backend, index string) int {
	tb.Helper()
	want := clusterDocs(tb, src, index)
	got := targetDocs(tb, dst, index)
	n := 0
	for k, d := range want {
		m, ok := got[k.id]
		if !ok || m.source != d.source || m.version != bulkVersion(tb, d.seq) {
			n++
			if n <= 10 {
				tb.Logf("target differs for %s: %+v, source %+v", k.id, m, d)
			}
		}
		delete(got, k.id)
	}
	for id := range got {
		n++
		tb.Logf("target has %s, which the source does not", id)
	}
	return n
}

// TestReliability_ESNodeKilled: 3 nodes, 2 shards × 1 replica, writers
// running. Each round catches a shard whose primary has applied ops its
// replica has not (they are above the global checkpoint, made visible by a
// refresh), kills the primary's node — the replica is promoted and those ops
// are discarded — and brings the node back. The relay (with --deletes)
// reads only up to the gcp, so no event may exist for a discarded op, and
// after recovery the stream replays to exactly the index.
func TestReliability_ESNodeKilled(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	c := cluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, MaxCompletionDelay: 150 * time.Millisecond,
		NodeLeftDelay: 300 * time.Millisecond})
	createIndex(t, c, "nodes", 2, 1)
	srv := redistest.Start(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "nodes", "nodes", "--deletes", "--delete-scan-interval", "50ms", "--delete-scan-budget", "1")...)
	stopWriters := startWriters(t, c, "nodes", 4, 13, true, true)
	killed := 0
	for r := 0; r < rounds; r++ {
		time.Sleep(200 * time.Millisecond)
		node, ok := primaryAhead(t, c, "nodes", r%2, 2*time.Second)
		if !ok {
			continue
		}
		mustDo(t, "POST", c.URL()+"/nodes/_refresh", "")
		if err := c.KillNode(node); err != nil {
			t.Fatal(err)
		}
		killed++
		time.Sleep(time.Duration(200+100*(r%3)) * time.Millisecond)
		if err := c.RestartNode(node); err != nil {
			t.Fatal(err)
		}
	}
	ops, failed := writerOps(stopWriters())
	discarded := int64(0)
	for n := 0; n < 2; n++ {
		st, err := c.ShardState("nodes", n)
		if err != nil {
			t.Fatal(err)
		}
		discarded += st.DiscardedOps
	}
	if killed < rounds/2 || discarded == 0 {
		t.Fatalf("%d nodes killed, %d ops discarded: the scenario did not produce failovers that discard ops", killed, discarded)
	}
	f := binaryFeed(t, srv, "nodes")
	waitAllStarted(t, c, "nodes", 2, 30*time.Second)
	waitCaughtUp(t, c, f.store, []string{"nodes"}, 30*time.Second)
	a := auditStream(t, c, f, []string{"nodes"}, nil, 30*time.Second)
	p.kill()
	record(t, figure{Scenario: "ES primary's node killed (3 nodes, 1 replica), failovers discard ops above the gcp", Faults: killed,
		Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes (%d failed by failovers); %d ops discarded by failovers, 0 events for them; %d delete events", ops, failed, discarded, a.Deletes)})
}

// TestReliability_VersionHiddenAboveGCP: a document's version at or below
// the global checkpoint is hidden, in the view a search reads, by a newer
// version above it that a failover then discards. The relay must not move
// its checkpoint past the hidden version until nothing above the gcp can be
// discarded any more: when the failover comes, the document's state is the
// old version again and the stream must carry it. (Found as the lost update
// of TestReliability_ESNodeKilled; deterministic here.) A resync's snapshot
// reads such a view too, and must not emit the version the failover
// discards.
func TestReliability_VersionHiddenAboveGCP(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*relay.Config)
		// wait: how long the relay gets to pass the point it must not pass
		// before the primary's node is killed.
		wait time.Duration
	}{
		{"read", nil, time.Second},
		{"resync snapshot", func(c *relay.Config) { c.Snapshot = true }, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { versionHiddenAboveGCP(t, tc.mod, tc.wait) })
	}
}

func versionHiddenAboveGCP(t *testing.T, mod func(*relay.Config), wait time.Duration) {
	c := cluster(t, esemu.Config{Nodes: 2})
	createIndex(t, c, "hidden", 1, 1)
	srv := redistest.Start(t)
	mustDo(t, "PUT", c.URL()+"/hidden/_doc/x", `{"v":1}`) // seq 0 on both copies: gcp 0
	// seq 1 updates x on the primary only; the replica has not got it.
	h, err := c.HoldReplication("hidden", 0)
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan struct{})
	go func() {
		// Fails at the failover: that is the point.
		defer close(written)
		req, _ := http.NewRequest("PUT", c.URL()+"/hidden/_doc/x", strings.NewReader(`{"v":2}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-h.Arrived()
	defer func() { h.Release(); <-written }()
	mustDo(t, "POST", c.URL()+"/hidden/_refresh", "") // the primary's view: x at seq 1, above the gcp
	// Shard reads on the replica fail, so every read (searches, the
	// snapshot's count and its point in time, pinned to one copy by a
	// custom preference) lands on the primary, as ES sends a shard request
	// that failed on one copy to the next: the relay reads the primary's
	// view, where seq 0 is superseded. Many more failures than the relay
	// makes reads before the kill.
	if err := c.FailShardSearches("hidden", 0, esemu.CopyReplica, 1000); err != nil {
		t.Fatal(err)
	}
	f := startRelay(t, c, srv.URL(), "hidden", []string{"hidden"}, mod)
	uuid := indexUUID(t, c, "hidden")
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		st, err := f.store.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cp, ok := st.Checkpoints[checkpoint.ShardID{IndexUUID: uuid, Shard: 0}]; ok && cp >= 0 {
			break // a relay without the guard moved past seq 0 with no event (or with v2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := c.ShardState("hidden", 0)
	if err != nil {
		t.Fatal(err)
	}
	node := -1
	for _, cp := range st.Copies {
		if cp.Primary && cp.Started {
			node = cp.Node
		}
	}
	if err := c.KillNode(node); err != nil { // the replica is promoted; seq 1 is gone
		t.Fatal(err)
	}
	// The promoted copy would go on failing what is left of them.
	if err := c.StopFailingShardSearches("hidden", 0); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if err := c.RestartNode(node); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.ShardState("hidden", 0); st.DiscardedOps == 0 {
		t.Fatal("the failover discarded nothing: the scenario did not happen")
	}
	waitCaughtUp(t, c, f.store, []string{"hidden"}, 10*time.Second)
	a := auditStream(t, c, f, []string{"hidden"}, nil, 5*time.Second)
	if got, want := [3]int{a.Lost, a.Duplicated, a.Wrong}, [3]int{0, 0, 0}; got != want {
		t.Fatalf("lost, duplicated, wrong = %v, want %v:\n%s", got, want, strings.Join(a.Problems, "\n"))
	}
}

// primaryAhead waits until shard num's primary has applied ops its started
// replica has not, and returns the primary's node.
func primaryAhead(tb testing.TB, c *esemu.Cluster, index string, num int, timeout time.Duration) (int, bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st, err := c.ShardState(index, num)
		if err != nil {
			tb.Fatal(err)
		}
		var primary *esemu.CopyState
		replicaMax := int64(-2)
		for i := range st.Copies {
			cp := &st.Copies[i]
			switch {
			case cp.Primary && cp.Started:
				primary = cp
			case cp.Started && cp.InSync:
				replicaMax = max(replicaMax, cp.MaxSeqNo)
			}
		}
		if primary != nil && replicaMax > -2 && primary.MaxSeqNo > replicaMax {
			return primary.Node, true
		}
		time.Sleep(time.Millisecond)
	}
	return 0, false
}

// waitAllStarted waits until every copy of the index's shards is started.
func waitAllStarted(tb testing.TB, c *esemu.Cluster, index string, shards int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for n := 0; n < shards; n++ {
			st, err := c.ShardState(index, n)
			if err != nil {
				tb.Fatal(err)
			}
			for _, cp := range st.Copies {
				ok = ok && cp.Started
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: copies still not started after %s", index, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReliability_ESFaults: 429s, 503s, slow responses, dropped
// connections, timed-out pages and failing shard copies, on every kind of
// request the relay and its delete scans make, while writers index, update
// and delete: each is retried, logged once per change of error, never
// advances a checkpoint nor proves a delete, and the stream still mirrors
// the index exactly.
func TestReliability_ESFaults(t *testing.T) {
	c := cluster(t, esemu.Config{Nodes: 2})
	createIndex(t, c, "faulty", 2, 1)
	srv := redistest.Start(t)
	logs := &lockedLog{}
	f := startRelayDeletes(t, c, srv.URL(), "faulty", []string{"faulty"}, func(dc *deletes.Config) {
		dc.Interval = 50 * time.Millisecond
		dc.PageSize = 20
		dc.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}, func(cfg *relay.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	stopWriters := startWriters(t, c, "faulty", 2, 3, true, false)
	faults := []esemu.Fault{
		{Kind: esemu.KindSearch, Status: 429, Count: 6},
		{Kind: esemu.KindStats, Status: 503, Count: 4},
		{Kind: esemu.KindRefresh, Drop: true, Count: 2},
		{Kind: esemu.KindSearch, TimedOut: true, Count: 3},
		{Kind: esemu.KindSearch, Delay: 300 * time.Millisecond, Count: 2},
		{Kind: esemu.KindCount, Status: 503, Count: 3},
		// Searches are reads and the scans' histograms and re-checks
		// (listings, by PIT or scroll, only move a feed of the version
		// before delivered ranges: TestDeletes_Flavors).
		{Kind: esemu.KindSearch, Status: 503, Count: 2},
		{Kind: esemu.KindSearch, Drop: true, Count: 2},
		{Kind: esemu.KindSearch, Delay: 200 * time.Millisecond, Count: 2},
		// The targets' resolution, every round: a relay must retry it as
		// it retries reads (a real node killed under it reset the
		// connection, and the relay exited).
		{Kind: esemu.KindResolve, Status: 503, Count: 2},
		{Kind: esemu.KindResolve, Drop: true, Count: 2},
	}
	applied := 0
	for _, fl := range faults {
		if err := c.InjectFault(fl); err != nil {
			t.Fatal(err)
		}
		applied += fl.Count
		waitFaultsTaken(t, c, 20*time.Second)
	}
	// Failing shard copies, during reads and during listings.
	for n := 0; n < 6; n++ {
		if err := c.FailShardSearches("faulty", n%2, []string{esemu.CopyAny, esemu.CopyPrimary, esemu.CopyReplica}[n%3], 3); err != nil {
			t.Fatal(err)
		}
		applied += 3
		time.Sleep(150 * time.Millisecond)
	}
	ops, _ := writerOps(stopWriters())
	c.ClearFaults()
	waitCaughtUp(t, c, f.store, []string{"faulty"}, 30*time.Second)
	a := auditStream(t, c, f, []string{"faulty"}, nil, 30*time.Second)
	out := logs.String()
	for _, want := range []string{"HTTP 429 es_rejected_execution_exception", "HTTP 503", "timed out", "node_disconnected_exception", "recovered"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs do not mention %q:\n%s", want, out)
		}
	}
	// Six 429s on searches are at most three states — the relay's reads,
	// the scanner's histograms, its re-checks — each logged once, not once
	// per retry.
	n429 := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "HTTP 429") {
			n429++
		}
	}
	if n429 == 0 || n429 > 3 {
		t.Errorf("six 429s were logged in %d lines, want 1 to 3:\n%s", n429, out)
	}
	if a.Deletes == 0 {
		t.Error("no delete event: the faults never met a delete scan")
	}
	st := f.scanner.Stats()
	record(t, figure{Scenario: "ES 429/503/slow/dropped/timed-out/failing shard copies during reads and delete scans", Faults: applied,
		Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes; faults applied by kind %v; %d delete events; scans aborted by faults %d, 0 false deletes", ops, c.FaultHits(), a.Deletes, st.Aborted)})
}

// waitFaultsTaken waits until every injected fault was applied.
func waitFaultsTaken(tb testing.TB, c *esemu.Cluster, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for len(c.PendingFaults()) != 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("faults not consumed within %s: %+v", timeout, c.PendingFaults())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReliability_ESFaultsDuringScans: shard copies fail searches during
// scans (histograms, re-checks), scan requests fail or time out, and nodes
// die mid-scan, over many rounds: zero false deletes; scans retry and
// complete once the faults clear. Run twice, the second time from delivered
// sets of the version before ranges, so that the first scans list every id
// (by PIT) to move them into ranges, under the same faults.
func TestReliability_ESFaultsDuringScans(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"ranges", "migrating"} {
		t.Run(mode, func(t *testing.T) {
			c := cluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, NodeLeftDelay: 200 * time.Millisecond})
			createIndex(t, c, "flaky", 2, 1)
			srv := redistest.Start(t)
			dmod := func(dc *deletes.Config) {
				dc.Interval = 50 * time.Millisecond
				dc.Listing = es.ListingPIT
				dc.PageSize = 25
			}
			stopWriters := startWriters(t, c, "flaky", 2, 5, true, true)
			var f *feed
			if mode == "migrating" {
				// The old version delivers for a while, without scans.
				f = startRelayDeletes(t, c, srv.URL(), "flaky", []string{"flaky"}, nil, nil)
				time.Sleep(time.Second)
				f.halt()
				toOldLayout(t, f, indexUUID(t, c, "flaky"), 2)
			}
			f = startRelayDeletes(t, c, srv.URL(), "flaky", []string{"flaky"}, dmod, nil)
			rng := rand.New(rand.NewPCG(9, 9))
			faults := 0
			for round := 0; round < 60; round++ {
				faults++
				switch rng.IntN(5) {
				case 0:
					copySel := []string{esemu.CopyAny, esemu.CopyPrimary, esemu.CopyReplica}[rng.IntN(3)]
					_ = c.FailShardSearches("flaky", rng.IntN(2), copySel, 1+rng.IntN(3))
				case 1:
					_ = c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, Status: 503})
					_ = c.InjectFault(esemu.Fault{Kind: esemu.KindPIT, Status: 503})
				case 2:
					_ = c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, TimedOut: true, Count: 2})
				case 3:
					_ = c.InjectFault(esemu.Fault{Kind: esemu.KindCount, Status: 429})
					_ = c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, Drop: true})
				case 4:
					n := rng.IntN(3)
					if err := c.KillNode(n); err == nil {
						time.Sleep(time.Duration(20+rng.IntN(150)) * time.Millisecond)
						_ = c.RestartNode(n)
					}
				}
				time.Sleep(time.Duration(30+rng.IntN(70)) * time.Millisecond)
			}
			ops, failed := writerOps(stopWriters())
			c.ClearFaults()
			waitCaughtUp(t, c, f.store, []string{"flaky"}, 30*time.Second)
			a := auditStream(t, c, f, []string{"flaky"}, nil, 30*time.Second)
			st := f.scanner.Stats()
			if st.Aborted == 0 {
				// On a loaded machine few scans run; the audit still holds.
				t.Logf("no scan was aborted this run: the faults did not meet a scan")
			}
			if mode == "migrating" {
				waitOldLayoutGone(t, f, indexUUID(t, c, "flaky"), 2, 30*time.Second)
			}
			record(t, figure{Scenario: "ES faults and node kills during delete scans (" + mode + ")", Faults: faults,
				Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
				Note: fmt.Sprintf("%d writes (%d failed by failovers); %d delete events, 0 false; scans due %d, localized %d, listings %d, migrated %d, aborted %d",
					ops, failed, a.Deletes, st.Due, st.Localized, st.Listings, st.Migrated, st.Aborted)})
		})
	}
}

// TestReliability_TwoRelays: two relays on one feed, exactly one writes;
// SIGKILL it and the other takes over within 2 × TTL; an owner paused
// (SIGSTOP, like a long GC pause) past its lease while a third relay took
// over has its next commit refused when it resumes. Only one relay ever
// commits: no entry twice.
func TestReliability_TwoRelays(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("leased")
	createIndex(t, c, ix, 2, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("leased")
	ttl := 500 * time.Millisecond
	aAddr, bAddr := closedPort(t), closedPort(t)
	a := startBinary(t, relayArgs(c, srv.URL(), "leased", ix, "--metrics-addr", aAddr)...)
	holder := waitHolder(t, rdb.Get, keys.Lease(), "", 5*time.Second)
	b := startBinary(t, relayArgs(c, srv.URL(), "leased", ix, "--metrics-addr", bAddr)...)
	stopWriters := startWriters(t, c, ix, 2, 17, false, false)
	// Both serve their metrics: each has decided whether it leads.
	waitMetric(t, aAddr, "escf_lease_held", func(float64) bool { return true }, 10*time.Second)
	waitMetric(t, bAddr, "escf_lease_held", func(float64) bool { return true }, 10*time.Second)
	time.Sleep(time.Second)
	if h, _ := rdb.Get(context.Background(), keys.Lease()).Result(); h != holder {
		t.Fatalf("lease moved from %q to %q while the owner lived", holder, h)
	}
	// The owner is the process the lease's token names (host-pid/…).
	owner, standby, standbyAddr := a, b, bAddr
	if !leaseNames(holder, a) {
		owner, standby, standbyAddr = b, a, aAddr
	}
	if !leaseNames(holder, owner) {
		t.Fatalf("the lease %q names neither relay (pids %d, %d)", holder, a.cmd.Process.Pid, b.cmd.Process.Pid)
	}
	ownerAddr := aAddr
	if owner == b {
		ownerAddr = bAddr
	}
	if v, _ := metricValue(t, ownerAddr, "escf_lease_held"); v != 1 {
		t.Fatalf("the owner's escf_lease_held = %v, want 1:\n%s", v, owner.out)
	}
	if v, _ := metricValue(t, standbyAddr, "escf_lease_held"); v != 0 || !binaryRunning(standby) {
		t.Fatalf("the second relay is not a running standby (escf_lease_held %v, running %v):\n%s", v, binaryRunning(standby), standby.out)
	}
	// SIGKILL the owner: the standby takes over within 2 × TTL, on Redis's
	// clock (where the lease expires), from a reading taken after the kill.
	owner.kill()
	killed := redisNow(t, rdb)
	took := waitTakeover(t, rdb, []string{keys.Lease()}, killed, 2*ttl+100*time.Millisecond, func(v []string) bool { return v[0] != "" && v[0] != holder })
	// Pause the new owner past its TTL (a stale owner): a third relay takes
	// over; when the paused one resumes, its commit is refused and it
	// becomes a standby.
	holder2, _ := rdb.Get(context.Background(), keys.Lease()).Result()
	if !leaseNames(holder2, standby) {
		t.Fatalf("the lease went to %q, not to the standby (pid %d)", holder2, standby.cmd.Process.Pid)
	}
	waitMetric(t, standbyAddr, "escf_lease_held", func(v float64) bool { return v == 1 }, 10*time.Second)
	paused := time.Now()
	_ = standby.cmd.Process.Signal(syscall.SIGSTOP)
	startBinary(t, relayArgs(c, srv.URL(), "leased", ix)...)
	waitHolder(t, rdb.Get, keys.Lease(), holder2, 5*time.Second)
	time.Sleep(time.Second)
	pause := time.Since(paused)
	_ = standby.cmd.Process.Signal(syscall.SIGCONT)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	f := binaryFeed(t, srv, "leased")
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	// The resumed stale owner notices it lost the lease: it stops leading
	// (and keeps running, a standby again).
	waitMetric(t, standbyAddr, "escf_lease_held", func(v float64) bool { return v == 0 }, 10*time.Second)
	if h, _ := rdb.Get(context.Background(), keys.Lease()).Result(); leaseNames(h, standby) {
		t.Fatalf("the lease %q is the resumed stale owner's again", h)
	}
	if !binaryRunning(standby) {
		t.Fatalf("the resumed stale owner exited instead of waiting as a standby:\n%s", standby.out)
	}
	au := auditStream(t, c, f, []string{ix}, ws, 10*time.Second)
	record(t, figure{Scenario: "two relays on one feed; an owner SIGSTOPped past its lease, then SIGCONT", Faults: 2,
		Entries: au.Entries, Docs: au.Docs, Lost: au.Lost, Duplicated: au.Duplicated, Wrong: au.Wrong,
		Note: fmt.Sprintf("%d writes; takeover after SIGKILL in %s (TTL %s); stale owner paused %s, its commit refused",
			ops, took.Round(time.Millisecond), ttl, pause.Round(time.Millisecond))})
}

// TestReliability_LongOutage: the relay is stopped while writers keep
// indexing, updating and deleting in one index and a data stream rolls
// over twice (on Elasticsearch 7.17, which has none, a write alias); on
// restart it catches up exactly, including the backing index created while
// it was away and the deletes made meanwhile.
func TestReliability_LongOutage(t *testing.T) {
	t.Parallel()
	outage := 15 * time.Second
	if testing.Short() {
		outage = 3 * time.Second
	}
	c := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	orders := c.Index("orders")
	createIndex(t, c, orders, 2, 1)
	// What rolls over: a data stream, or where there are none (Elasticsearch
	// 7.17 from Maven Central's jars) a write alias, which rolls over the
	// same way: a new backing index while the relay is away.
	rolled, metrics := "a data stream", ""
	if why := noDataStreams(t, c); why != "" {
		t.Logf("%s: rolling over a write alias instead", why)
		rolled, metrics = "a write alias", rolloverAlias(t, c, "metrics-app", 1, 1)
	} else {
		metrics = dataStreamTemplate(t, c, "metrics", 1, 1)
	}
	// The appends go through a writer: on a real cluster the audit judges
	// them by their acknowledgements.
	appender := &writer{index: metrics}
	if !onEmulator(c) {
		appender.acks = newAckLog()
	}
	appender.do(t, "POST", c.URL()+"/"+metrics+"/_doc", `{"@timestamp":"2026-11-29T12:00:00Z","n":0}`)
	appended := 0
	appendMetrics := func(n int) {
		for i := 0; i < n; i++ {
			appended++
			appender.do(t, "POST", c.URL()+"/"+metrics+"/_doc", fmt.Sprintf(`{"@timestamp":"2026-11-29T12:00:00Z","n":%d}`, appended))
		}
	}
	srv := redistest.Start(t)
	args := relayArgs(c, srv.URL(), "outage", orders+","+metrics, "--deletes", "--delete-scan-interval", "100ms", "--delete-scan-budget", "1")
	p := startBinary(t, args...)
	stopWriters := startWriters(t, c, orders, 3, 23, true, false)
	appendMetrics(50)
	time.Sleep(time.Second)
	// The relay has delivered documents the outage's deletes can hit (a
	// real node's relay may take longer than the second to follow).
	f := binaryFeed(t, srv, "outage")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n, _ := f.rdb.XLen(context.Background(), f.keys.Events()).Result(); n >= 500 {
			break
		}
	}
	// The outage: a graceful stop, as for a deploy that then takes long.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
	before, _ := f.rdb.XLen(context.Background(), f.keys.Events()).Result()
	for i := 0; i < 2; i++ {
		time.Sleep(outage / 3)
		appendMetrics(100)
		mustDo(t, "POST", c.URL()+"/"+metrics+"/_rollover", "")
	}
	time.Sleep(outage / 3)
	appendMetrics(100)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	indices := append([]string{orders}, resolveNames(t, c, metrics)...)
	if len(indices) != 4 {
		t.Fatalf("indices %v: want orders and 3 backing indices", indices)
	}
	restarted := time.Now()
	p = startBinary(t, args...)
	waitCaughtUp(t, c, f.store, indices, 60*time.Second)
	a := auditStream(t, c, f, indices, append(ws, appender), 30*time.Second)
	caught := time.Since(restarted)
	p.kill()
	after, _ := f.rdb.XLen(context.Background(), f.keys.Events()).Result()
	if a.Deletes == 0 {
		t.Error("no delete event: the outage had no deletes to find")
	}
	record(t, figure{Scenario: "relay stopped for a long outage while writers write, delete and " + rolled + " rolls over twice", Faults: 1,
		Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("outage %s: %d writes to orders, %d appends and 2 rollovers; %d entries before, %d after; caught up and mirrored in %s; %d delete events",
			outage, ops, appended, before, after, caught.Round(time.Millisecond), a.Deletes)})
}
