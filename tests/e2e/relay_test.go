package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// writer writes random creates and updates (some with custom routing) to an
// index until stop is closed.
type writer struct {
	url, index string
	id         int
	rng        *rand.Rand
	docs       []string          // live ids this writer created
	routing    map[string]string // id -> routing (fixed per document)
	ops        int
	next       int // ids are never reused: a deleted id stays deleted

	deletes bool     // also delete documents
	deleted []string // ids this writer deleted

	tolerant bool // failed writes (e.g. during a failover) are expected: count, don't fail
	failed   int

	// urls, when set, are the nodes a request goes to (one at random per
	// request, so that a killed node fails some writes, not all); a
	// request that gets no answer counts as failed (tolerant writers only).
	urls []string
	// acks, when set, records what the cluster acknowledged: the real
	// cluster's audit (auditAcks) has no op history to check against.
	acks *ackLog
	// pace, when set, is a pause before each request: unpaced writers
	// saturate a real node on a small machine, and its readers (the relays)
	// then never catch up before the writes end.
	pace time.Duration
}

// base is the URL a request goes to.
func (w *writer) base() string {
	if len(w.urls) > 0 {
		return w.urls[w.rng.IntN(len(w.urls))]
	}
	return w.url
}

// do sends a write; a tolerant writer counts failures instead of failing.
// ids are the documents the request writes (for the ack log).
func (w *writer) do(tb testing.TB, method, url, body string, ids ...string) []byte {
	tb.Helper()
	if !w.tolerant {
		b := mustDo(tb, method, url, body)
		w.acks.record(w.index, b, ids, 200)
		return b
	}
	st, b, err := tryDo(method, url, body)
	if err != nil {
		st = 0 // no answer: the write may or may not have happened
	}
	if st >= 300 || st == 0 {
		if !(method == "DELETE" && st == 404) {
			w.failed++
		}
	}
	w.acks.record(w.index, b, ids, st)
	return b
}

func (w *writer) run(tb testing.TB, stop <-chan struct{}) {
	for {
		if w.pace > 0 {
			select {
			case <-stop:
				return
			case <-time.After(w.pace):
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		switch {
		case w.rng.IntN(5) == 0:
			w.bulk(tb)
		default:
			w.one(tb)
		}
	}
}

func (w *writer) pick() (string, string, bool) {
	if len(w.docs) == 0 || w.rng.IntN(2) == 0 {
		id := fmt.Sprintf("w%d-%d", w.id, w.next)
		w.next++
		w.docs = append(w.docs, id)
		if w.rng.IntN(3) == 0 {
			w.routing[id] = fmt.Sprintf("tenant-%d", w.rng.IntN(7))
		}
		return id, w.routing[id], true
	}
	id := w.docs[w.rng.IntN(len(w.docs))]
	return id, w.routing[id], false
}

func (w *writer) source(id string) string {
	b, _ := json.Marshal(map[string]any{"writer": w.id, "id": id, "n": w.rng.IntN(1 << 20), "note": strings.Repeat("x", w.rng.IntN(40))})
	return string(b)
}

// takeForDelete removes a random live id from the writer's documents.
func (w *writer) takeForDelete() (string, string) {
	i := w.rng.IntN(len(w.docs))
	id := w.docs[i]
	w.docs[i] = w.docs[len(w.docs)-1]
	w.docs = w.docs[:len(w.docs)-1]
	w.deleted = append(w.deleted, id)
	return id, w.routing[id]
}

func (w *writer) one(tb testing.TB) {
	if w.deletes && len(w.docs) > 3 && w.rng.IntN(5) == 0 {
		id, routing := w.takeForDelete()
		q := ""
		if routing != "" {
			q = "?routing=" + routing
		}
		w.do(tb, "DELETE", w.base()+"/"+w.index+"/_doc/"+id+q, "", id)
		w.ops++
		return
	}
	id, routing, fresh := w.pick()
	q := ""
	if routing != "" {
		q = "?routing=" + routing
	}
	if !fresh && w.rng.IntN(2) == 0 {
		body := fmt.Sprintf(`{"doc":{"n":%d,"patched":true}}`, w.rng.IntN(1<<20))
		w.do(tb, "POST", w.base()+"/"+w.index+"/_update/"+id+q, body, id)
	} else {
		w.do(tb, "PUT", w.base()+"/"+w.index+"/_doc/"+id+q, w.source(id), id)
	}
	w.ops++
}

func (w *writer) bulk(tb testing.TB) {
	var b strings.Builder
	n := 2 + w.rng.IntN(15)
	var ids []string
	for i := 0; i < n; i++ {
		if w.deletes && len(w.docs) > 3 && w.rng.IntN(5) == 0 {
			id, routing := w.takeForDelete()
			meta := map[string]any{"_index": w.index, "_id": id}
			if routing != "" {
				meta["routing"] = routing
			}
			m, _ := json.Marshal(map[string]any{"delete": meta})
			b.Write(m)
			b.WriteByte('\n')
			ids = append(ids, id)
			continue
		}
		id, routing, _ := w.pick()
		ids = append(ids, id)
		meta := map[string]any{"_index": w.index, "_id": id}
		if routing != "" {
			meta["routing"] = routing
		}
		m, _ := json.Marshal(map[string]any{"index": meta})
		b.Write(m)
		b.WriteByte('\n')
		b.WriteString(w.source(id))
		b.WriteByte('\n')
	}
	body := w.do(tb, "POST", w.base()+"/_bulk", b.String(), ids...)
	if strings.Contains(string(body), `"errors":true`) {
		if !w.tolerant {
			tb.Errorf("bulk had item errors: %s", body)
		}
		w.failed++
	}
	w.ops += n
}

// TestRelay_Mirror is the seed's CI flow: 4 writers index and update
// documents (with and without custom routing) for 8s into 3 shards × 1
// replica on 3 nodes with out-of-order completion, while the relay runs;
// then the stream replayed equals the index exactly.
func TestRelay_Mirror(t *testing.T) {
	d := 8 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, MaxCompletionDelay: 3 * time.Millisecond})
	ix := c.Index("mirror")
	createIndex(t, c, ix, 3, 1)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "mirror", []string{ix}, nil)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	writers := make([]*writer, 4)
	for i := range writers {
		writers[i] = &writer{url: c.URL(), index: ix, id: i, rng: rand.New(rand.NewPCG(uint64(i), 99)), routing: map[string]string{}}
		wg.Add(1)
		go func(w *writer) { defer wg.Done(); w.run(t, stop) }(writers[i])
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)

	evs := entries(t, f.rdb, f.keys.Events())
	want := clusterDocs(t, c, ix)
	got := replay(evs)
	ops, routed := 0, 0
	for _, w := range writers {
		ops += w.ops
		routed += len(w.routing)
	}
	t.Logf("writes %d (%d documents routed), stream entries %d, documents %d", ops, routed, len(evs), len(want))
	if diff := diffDocs(want, got); diff != "" {
		t.Fatalf("the replayed stream differs from the index:\n%s", diff)
	}
	if len(want) < 100 {
		t.Fatalf("only %d documents written: the test did not exercise the relay", len(want))
	}
	// Per shard, seq nos in the stream strictly increase: no duplicates,
	// delivered in order.
	last := map[docKey]int64{}
	for _, e := range evs {
		k := docKey{e.IndexUUID, e.Shard, ""}
		if prev, ok := last[k]; ok && e.SeqNo <= prev {
			t.Fatalf("shard %d: seq %d after %d", e.Shard, e.SeqNo, prev)
		}
		last[k] = e.SeqNo
	}
}

// TestRelay_LateCommit: seq 1 is searchable while seq 0 is still in flight,
// so the gcp stays below both; the relay must deliver nothing until seq 0
// completes, then both, in order.
func TestRelay_LateCommit(t *testing.T) {
	c := cluster(t, esemu.Config{Nodes: 2})
	createIndex(t, c, "late", 1, 1)
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	f := startRelay(t, c, srv.URL(), "late", []string{"late"}, func(cfg *relay.Config) { cfg.Metrics = reg })

	hold, err := c.Hold("late", 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		mustDo(t, "PUT", c.URL()+"/late/_doc/first", `{"n":0}`)
	}()
	<-hold.Arrived()
	if seqs := hold.Seqs(); len(seqs) != 1 || seqs[0] != 0 {
		t.Fatalf("parked seqs = %v, want [0]", seqs)
	}
	mustDo(t, "PUT", c.URL()+"/late/_doc/second?refresh=true", `{"n":1}`)
	// The later write is searchable, the earlier is not, and the gcp lags.
	_, body := httpDo(t, "POST", c.URL()+"/late/_search", `{"query":{"ids":{"values":["first","second"]}},"seq_no_primary_term":true}`)
	if !strings.Contains(string(body), `"_id":"second"`) || strings.Contains(string(body), `"_id":"first"`) {
		t.Fatalf("want only seq 1 visible, got %s", body)
	}
	st, _ := c.ShardState("late", 0)
	if st.GlobalCheckpoint != -1 {
		t.Fatalf("gcp = %d while seq 0 is in flight, want -1", st.GlobalCheckpoint)
	}
	// 10 rounds of the relay see the gcp below both writes.
	rounds := counterValue(t, reg, "escf_rounds_total")
	for deadline := time.Now().Add(30 * time.Second); counterValue(t, reg, "escf_rounds_total") < rounds+10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("10 relay rounds not within 30 s")
		}
	}
	if evs := entries(t, f.rdb, f.keys.Events()); len(evs) != 0 {
		t.Fatalf("the relay delivered %d events above the gcp: %+v", len(evs), evs)
	}
	hold.Release()
	<-done
	waitCaughtUp(t, c, f.store, []string{"late"}, 10*time.Second)
	evs := entries(t, f.rdb, f.keys.Events())
	if len(evs) != 2 || evs[0].ID != "first" || evs[0].SeqNo != 0 || evs[1].ID != "second" || evs[1].SeqNo != 1 {
		t.Fatalf("events = %+v, want first@0 then second@1", evs)
	}
}

// TestRelay_CustomRouting: the same _id routed to two shards is two
// documents, each tracked on its own shard.
func TestRelay_CustomRouting(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("routed")
	createIndex(t, c, ix, 2, 0)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "routed", []string{ix}, nil)
	// Find two routing values that land on different shards.
	shardOf := map[int]string{}
	for i := 0; len(shardOf) < 2 && i < 50; i++ {
		r := fmt.Sprintf("r%d", i)
		mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/probe-"+r+"?routing="+r+"&refresh=true", `{}`)
		for k := range clusterDocs(t, c, ix) {
			if _, ok := shardOf[k.shard]; !ok && k.id == "probe-"+r {
				shardOf[k.shard] = r
			}
		}
	}
	if len(shardOf) < 2 {
		t.Fatal("no routing values found for both shards")
	}
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/same?routing="+shardOf[0], `{"on":"zero"}`)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/same?routing="+shardOf[1], `{"on":"one"}`)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/same?routing="+shardOf[1], `{"on":"one","v":2}`)
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	got := replay(entries(t, f.rdb, f.keys.Events()))
	uuid := indexUUID(t, c, ix)
	zero, ok0 := got[docKey{uuid, 0, "same"}]
	one, ok1 := got[docKey{uuid, 1, "same"}]
	if !ok0 || !ok1 {
		t.Fatalf("want document 'same' on shards 0 and 1, got %v", got)
	}
	if zero.source != `{"on":"zero"}` || zero.routing != shardOf[0] || one.source != `{"on":"one","v":2}` || one.routing != shardOf[1] {
		t.Fatalf("shard 0: %+v, shard 1: %+v", zero, one)
	}
	if diff := diffDocs(clusterDocs(t, c, ix), got); diff != "" {
		t.Fatalf("stream differs from the index:\n%s", diff)
	}
	var delivered atomic.Int64
	for n := 0; n < 2; n++ {
		for _, id := range deliveredIDs(t, f.rdb, f.keys, uuid, n) {
			if id == "same" {
				delivered.Add(1)
			}
		}
	}
	if delivered.Load() != 2 {
		t.Fatalf("'same' is in %d delivered sets, want 2 (one per shard)", delivered.Load())
	}
}
