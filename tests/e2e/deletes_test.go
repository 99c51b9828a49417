package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// waitMirror waits until the replayed stream equals the index (deletes are
// found by scans, which run after the reads caught up).
func waitMirror(tb testing.TB, c backend, f *feed, index string, timeout time.Duration) []redisx.Event {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var diff string
	for time.Now().Before(deadline) {
		evs := entries(tb, f.rdb, f.keys.Events())
		if diff = diffDocs(clusterDocs(tb, c, index), replay(evs)); diff == "" {
			return evs
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("the stream did not come to mirror %s within %s:\n%s", index, timeout, diff)
	return nil
}

// checkDeletes proves every delete event true against the cluster's own
// history: some delete op for the document must come after the version of
// it the stream last delivered (the scanner only acts on deletes at or below
// the global checkpoint, so no failover can have removed that op). It also
// refuses a second delete without an upsert in between. It returns the
// number of deletes. A real cluster keeps no op history: there only the
// second check is made (the tests check the deleted ids against their
// writers' own records).
func checkDeletes(tb testing.TB, c backend, index string, evs []redisx.Event) int {
	tb.Helper()
	type opKey struct {
		shard int
		id    string
	}
	deletedAt := map[opKey][]int64{} // seq nos of delete ops per document
	emu, _ := c.(*esemu.Cluster)
	if e, ok := c.(*emulator); ok {
		emu = e.Cluster
	}
	for n := 0; emu != nil; n++ {
		hist, ok := primaryHistory(tb, emu, index, n)
		if !ok {
			break
		}
		for _, o := range hist {
			if o.Type == "delete" {
				k := opKey{n, o.ID}
				deletedAt[k] = append(deletedAt[k], o.SeqNo)
			}
		}
	}
	lastUpsert := map[docKey]int64{}
	lastOp := map[docKey]redisx.Op{}
	n := 0
	for _, e := range evs {
		k := docKey{e.IndexUUID, e.Shard, e.ID}
		switch e.Op {
		case redisx.OpUpsert:
			lastUpsert[k] = e.SeqNo
		case redisx.OpDelete:
			n++
			if lastOp[k] == redisx.OpDelete {
				tb.Fatalf("duplicate delete for %v", k)
			}
			u, ok := lastUpsert[k]
			if !ok {
				tb.Fatalf("delete for %v, which was never delivered", k)
			}
			real := emu == nil
			for _, seq := range deletedAt[opKey{e.Shard, e.ID}] {
				real = real || seq > u
			}
			if !real {
				tb.Fatalf("false delete: %v (delivered at seq %d) has no delete op after that version; delete ops at %v",
					k, u, deletedAt[opKey{e.Shard, e.ID}])
			}
		}
		lastOp[k] = e.Op
	}
	return n
}

// TestDeletes_Mirror: 4 writers index, update and delete (with and without
// custom routing) for 8s into 3 shards × 1 replica; the replayed stream
// equals the index, every deleted document got exactly one delete.
func TestDeletes_Mirror(t *testing.T) {
	d := 8 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, MaxCompletionDelay: 3 * time.Millisecond})
	ix := c.Index("mirrordel")
	createIndex(t, c, ix, 3, 1)
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "mirrordel", []string{ix}, func(dc *deletes.Config) {
		dc.Interval = 300 * time.Millisecond
	}, nil)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	writers := make([]*writer, 4)
	for i := range writers {
		writers[i] = &writer{url: c.URL(), index: ix, id: i, rng: rand.New(rand.NewPCG(uint64(i), 11)),
			routing: map[string]string{}, deletes: true}
		wg.Add(1)
		go func(w *writer) { defer wg.Done(); w.run(t, stop) }(writers[i])
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)
	evs := waitMirror(t, c, f, ix, 30*time.Second)
	final := clusterDocs(t, c, ix)
	n := checkDeletes(t, c, ix, evs)
	// Every id a writer deleted that the feed had delivered got its delete.
	delivered := map[string]bool{}
	deleted := map[string]bool{}
	for _, e := range evs {
		if e.Op == redisx.OpUpsert {
			delivered[e.ID] = true
		} else {
			deleted[e.ID] = true
		}
	}
	writerDeletes, missed := 0, 0
	for _, w := range writers {
		for _, id := range w.deleted {
			writerDeletes++
			if delivered[id] && !deleted[id] {
				missed++
			}
		}
	}
	if missed > 0 {
		t.Fatalf("%d delivered documents were deleted by writers but got no delete event", missed)
	}
	// And every delete event is of an id a writer deleted (ids are never
	// reused): on a real cluster, where checkDeletes has no op history,
	// this is the proof that no delete is false.
	byWriters := map[string]bool{}
	for _, w := range writers {
		for _, id := range w.deleted {
			byWriters[id] = true
		}
	}
	for id := range deleted {
		if !byWriters[id] {
			t.Fatalf("false delete: no writer deleted %s", id)
		}
	}
	st := f.scanner.Stats()
	t.Logf("documents %d, stream entries %d, delete events %d (writers deleted %d ids); scans due %d: saved by gap proof %d, by count proof %d, localized %d (ranges compared %d, differed %d, seq nos read %d, stale entries %d), listings %d, aborted %d",
		len(final), len(evs), n, writerDeletes, st.Due, st.SavedByGap, st.SavedByCount, st.Localized, st.RangesCompared, st.RangesDiffered,
		st.SeqNosRead, st.StaleRemoved, st.Listings, st.Aborted)
	if n == 0 || st.Localized == 0 || st.Listings != 0 {
		t.Fatalf("%d delete events, %d localized scans, %d listings: want deletes found by localized scans, no listing", n, st.Localized, st.Listings)
	}
}

// TestDeletes_RecreationOrder: a document is deleted and re-created between
// two rounds, the re-creation still invisible (in flight) at the scan: the
// stream holds the delete before the new upsert.
func TestDeletes_RecreationOrder(t *testing.T) {
	c := cluster(t, esemu.Config{Nodes: 2})
	createIndex(t, c, "recreate", 1, 1)
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "recreate", []string{"recreate"}, func(*deletes.Config) {}, nil)
	mustDo(t, "PUT", c.URL()+"/recreate/_doc/x", `{"v":1}`)
	mustDo(t, "PUT", c.URL()+"/recreate/_doc/other", `{"v":1}`)
	waitCaughtUp(t, c, f.store, []string{"recreate"}, 10*time.Second)

	mustDo(t, "DELETE", c.URL()+"/recreate/_doc/x", "")
	hold, err := c.Hold("recreate", 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); mustDo(t, "PUT", c.URL()+"/recreate/_doc/x", `{"v":2}`) }()
	<-hold.Arrived()
	// While the re-creation is in flight the scan must find x gone.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := countOps(entries(t, f.rdb, f.keys.Events()), "x", redisx.OpDelete); n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	hold.Release()
	<-done
	waitCaughtUp(t, c, f.store, []string{"recreate"}, 10*time.Second)
	evs := waitMirror(t, c, f, "recreate", 10*time.Second)
	var ops []string
	for _, e := range evs {
		if e.ID == "x" {
			ops = append(ops, fmt.Sprintf("%s@%d", e.Op, e.SeqNo))
		}
	}
	want := []string{"upsert@0", "delete@2", "upsert@3"}
	if strings.Join(ops, " ") != strings.Join(want, " ") {
		t.Fatalf("events for x = %v, want %v (delete stamped with the checkpoint 2, before the re-creation at seq 3)", ops, want)
	}
}

func countOps(evs []redisx.Event, id string, op redisx.Op) int {
	n := 0
	for _, e := range evs {
		if e.ID == id && e.Op == op {
			n++
		}
	}
	return n
}

// TestDeletes_AppendOnlyCostsNothing: an index that only gets new documents
// never needs a listing, a count, or a scroll/PIT: the gap proof holds.
func TestDeletes_AppendOnlyCostsNothing(t *testing.T) {
	d := 20 * time.Second
	if testing.Short() {
		d = 5 * time.Second
	}
	t.Parallel()
	c := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	ix := c.Index("appendonly")
	createIndex(t, c, ix, 3, 1)
	srv := redistest.Start(t)
	// The relay's requests are counted: by the emulator, or by a proxy in
	// front of a real cluster.
	view, counter := relayCounted(t, c)
	f := startRelayDeletes(t, view, srv.URL(), "appendonly", []string{ix}, func(dc *deletes.Config) {
		dc.Interval = 50 * time.Millisecond
	}, nil)
	stop := time.Now().Add(d)
	n := 0
	for time.Now().Before(stop) {
		var b strings.Builder
		for i := 0; i < 20; i++ {
			fmt.Fprintf(&b, "{\"index\":{\"_index\":%q,\"_id\":\"doc-%d\"}}\n{\"n\":%d}\n", ix, n, n)
			n++
		}
		mustDo(t, "POST", c.URL()+"/_bulk", b.String())
		time.Sleep(20 * time.Millisecond)
	}
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)
	// Stopped first, so no scan is between due and its outcome; the one
	// the stop cuts short counts as aborted.
	f.halt()
	reqs := counter.RequestCounts()
	st := f.scanner.Stats()
	t.Logf("%d documents over %s; requests %v; scans due %d, saved by gap proof %d, aborted %d", n, d, reqs, st.Due, st.SavedByGap, st.Aborted)
	// One _count is the relay's own: the total for the progress log of the
	// index's first read. Scans made none.
	if reqs[esemu.KindPIT] != 0 || reqs[esemu.KindScroll] != 0 || reqs[esemu.KindCount] > 1 {
		t.Fatalf("an append-only index caused listing work: %d PIT, %d scroll, %d count requests", reqs[esemu.KindPIT], reqs[esemu.KindScroll], reqs[esemu.KindCount])
	}
	if st.Due == 0 || st.SavedByGap != st.Due-st.Aborted || st.Aborted > 1 {
		t.Fatalf("scans due %d, saved by the gap proof %d, aborted %d: want every due scan saved (but one the stop may cut short)", st.Due, st.SavedByGap, st.Aborted)
	}
}

// TestDeletes_IndexGone: a followed index is deleted (one delete per
// delivered document, or one index_deleted event), its state goes, and a
// re-created index of the same name is followed from -1 after the old one's
// end.
func TestDeletes_IndexGone(t *testing.T) {
	for _, perDoc := range []bool{true, false} {
		t.Run(fmt.Sprintf("per_document=%v", perDoc), func(t *testing.T) {
			c := esCluster(t, esemu.Config{})
			ix := c.Index("ephemeral")
			createIndex(t, c, ix, 2, 0)
			srv := redistest.Start(t)
			f := startRelayDeletes(t, c, srv.URL(), "gone", []string{ix}, func(dc *deletes.Config) {}, func(cfg *relay.Config) {
				cfg.IndexDeletedEvent = !perDoc
			})
			for i := 0; i < 30; i++ {
				q := ""
				if i%3 == 0 {
					q = "?routing=r" + fmt.Sprint(i%7)
				}
				mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d%s", c.URL(), ix, i, q), `{}`)
			}
			waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
			oldUUID := indexUUID(t, c, ix)
			mustDo(t, "DELETE", c.URL()+"/"+ix, "")
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				st, _ := f.store.Load(context.Background())
				if _, ok := st.Indices[oldUUID]; !ok {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			createIndex(t, c, ix, 1, 0)
			mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/0", `{"reborn":true}`)
			waitCaughtUp(t, c, f.store, []string{ix}, 15*time.Second)
			evs := entries(t, f.rdb, f.keys.Events())
			var dels, ends, routed int
			lastOld := -1
			firstNew := -1
			for i, e := range evs {
				if e.IndexUUID == oldUUID {
					lastOld = i
					switch e.Op {
					case redisx.OpDelete:
						dels++
						if e.Routing != "" {
							routed++
						}
						if ends > 0 {
							t.Fatalf("a delete of the old index at %d after its index_deleted", i)
						}
					case redisx.OpIndexDeleted:
						ends++
					}
				} else if firstNew < 0 {
					firstNew = i
				}
			}
			if perDoc && (dels != 30 || routed != 10 || ends != 1) {
				t.Fatalf("per-document end: %d deletes (%d routed), %d index_deleted; want 30 (10 routed), then 1", dels, routed, ends)
			}
			if !perDoc && (dels != 0 || ends != 1) {
				t.Fatalf("single end: %d deletes, %d index_deleted; want 0, 1", dels, ends)
			}
			if firstNew < lastOld {
				t.Fatalf("the new index's first event (%d) comes before the old index's end (%d)", firstNew, lastOld)
			}
			if e := evs[firstNew]; e.ID != "0" || e.SeqNo != 0 || string(e.Source) != `{"reborn":true}` {
				t.Fatalf("first event of the new index = %+v", e)
			}
			st, _ := f.store.Load(context.Background())
			for id := range st.Checkpoints {
				if id.IndexUUID == oldUUID {
					t.Fatalf("checkpoint of the deleted index is still stored: %v", id)
				}
			}
			keys, _ := f.rdb.Keys(context.Background(), "escf:{gone}:*"+oldUUID+"*").Result()
			sort.Strings(keys)
			if len(keys) != 0 {
				t.Fatalf("keys of the deleted index remain: %v", keys)
			}
		})
	}
}

// TestDeletes_MassDeleteIsConfirmed: a scan that would delete more than
// --max-delete-fraction of a shard's delivered ids lists a second time and
// emits only what both scans found gone.
func TestDeletes_MassDeleteIsConfirmed(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("mass")
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "mass", []string{ix}, func(*deletes.Config) {}, nil)
	for i := 0; i < 10; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), `{}`)
	}
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	// One bulk, so that no scan sees only some of the deletes (and finds
	// a share below the threshold).
	var del strings.Builder
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&del, "{\"delete\":{\"_index\":%q,\"_id\":\"%d\"}}\n", ix, i)
	}
	mustDo(t, "POST", c.URL()+"/_bulk", del.String())
	evs := waitMirror(t, c, f, ix, 10*time.Second)
	if n := checkDeletes(t, c, ix, evs); n != 8 {
		t.Fatalf("%d deletes, want 8", n)
	}
	st := f.scanner.Stats()
	if st.Confirmations != 1 || st.RangesCompared != 2 || st.Listings != 0 {
		t.Fatalf("confirmations %d, ranges compared %d, listings %d: want the 80%% delete confirmed by a second comparison of the shard's one range, and no listing",
			st.Confirmations, st.RangesCompared, st.Listings)
	}
}

// TestDeletes_Flavors: deletes are found on every flavor, by comparing
// seq-no ranges (no listing of ids), and on a feed written before delivered
// ranges by its migration, with each listing path (ES and OpenSearch point
// in time, scroll): its first scans list every live id, move the delivered
// sets into ranges and emit the deletes, each once. On a real cluster: its
// own flavor.
func TestDeletes_Flavors(t *testing.T) {
	flavors := esemu.Flavors
	if realClusterEnv(t) != nil {
		flavors = []esemu.Flavor{"real"}
	}
	for _, fl := range flavors {
		for _, mode := range []string{"ranges", "migrate-pit", "migrate-scroll"} {
			t.Run(string(fl)+"/"+mode, func(t *testing.T) {
				c := esCluster(t, esemu.Config{Flavor: fl, Nodes: 2})
				ix := c.Index("flavored")
				createIndex(t, c, ix, 2, 1)
				srv := redistest.Start(t)
				view, counter := relayCounted(t, c)
				listing, migrate := strings.CutPrefix(mode, "migrate-")
				dmod := func(dc *deletes.Config) {
					if migrate {
						dc.Listing = listing
					}
					dc.PageSize = 7
				}
				var first func(*deletes.Config) // the old version: no scans
				if !migrate {
					first = dmod
				}
				f := startRelayDeletes(t, view, srv.URL(), "flavored", []string{ix}, first, nil)
				for i := 0; i < 40; i++ {
					mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d?routing=r%d", c.URL(), ix, i, i%3), `{}`)
				}
				waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
				uuid := indexUUID(t, c, ix)
				if migrate {
					f.halt()
					toOldLayout(t, f, uuid, 2)
					f = startRelayDeletes(t, view, srv.URL(), "flavored", []string{ix}, dmod, nil)
				}
				for i := 0; i < 40; i += 4 {
					mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/%d?routing=r%d", c.URL(), ix, i, i%3), "")
				}
				evs := waitMirror(t, c, f, ix, 15*time.Second)
				if n := checkDeletes(t, c, ix, evs); n != 10 {
					t.Fatalf("%d deletes, want 10", n)
				}
				for _, e := range evs {
					if e.Op == redisx.OpDelete && e.Routing != "r"+strconv.Itoa(mustAtoi(t, e.ID)%3) {
						t.Errorf("delete of %s has routing %q", e.ID, e.Routing)
					}
				}
				reqs := counter.RequestCounts()
				if listed := reqs[esemu.KindPIT] + reqs[esemu.KindScroll]; !migrate && listed != 0 ||
					migrate && ((listing == "pit") != (reqs[esemu.KindPIT] > 0) || (listing == "scroll") != (reqs[esemu.KindScroll] > 0)) {
					t.Fatalf("%s, but requests were %v", mode, reqs)
				}
				if migrate {
					waitOldLayoutGone(t, f, uuid, 2, 15*time.Second)
					if st := f.scanner.Stats(); st.Migrated != 2 || st.ListedIDs == 0 {
						t.Errorf("scanner stats %+v: want 2 shards migrated by listings", st)
					}
				}
			})
		}
	}
}

// toOldLayout rewrites a stopped feed's delivered ranges of an index as
// the version before them kept delivered ids: one set per shard and a
// hash of the custom routing values.
func toOldLayout(tb testing.TB, f *feed, uuid string, shards int) {
	tb.Helper()
	ctx := context.Background()
	for n := 0; n < shards; n++ {
		id := checkpoint.ShardID{IndexUUID: uuid, Shard: n}
		docs, err := checkpoint.ReadDelivered(ctx, f.rdb, f.keys, id)
		if err != nil || len(docs) == 0 {
			tb.Fatalf("shard %d: %d delivered, %v", n, len(docs), err)
		}
		for _, d := range docs {
			f.rdb.SAdd(ctx, f.keys.Delivered(uuid, n), d.ID)
			if d.Routing != "" {
				f.rdb.HSet(ctx, f.keys.Routing(uuid, n), d.ID, d.Routing)
			}
			f.rdb.Del(ctx, f.keys.DeliveredRange(uuid, n, checkpoint.Range(d.SeqNo)))
		}
		f.rdb.Del(ctx, f.keys.DeliveredCounts(uuid, n))
	}
}

// waitOldLayoutGone waits until no shard of the index has a set or
// routing hash of the layout before delivered ranges.
func waitOldLayoutGone(tb testing.TB, f *feed, uuid string, shards int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for n := 0; n < shards; n++ {
			for _, k := range []string{f.keys.Delivered(uuid, n), f.keys.Routing(uuid, n)} {
				if x, _ := f.rdb.Exists(context.Background(), k).Result(); x != 0 {
					left = append(left, k)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the old layout's keys remain after %s: %v", timeout, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustAtoi(tb testing.TB, s string) int {
	tb.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		tb.Fatalf("%q: %v", s, err)
	}
	return n
}
