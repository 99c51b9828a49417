package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// bootCollector keeps what the copy hands; hook runs first on each event.
type bootCollector struct {
	mu   sync.Mutex
	evs  []redisx.Event
	hook func(redisx.Event)
}

func (b *bootCollector) handle(_ context.Context, e redisx.Event) error {
	if b.hook != nil {
		b.hook(e)
	}
	b.mu.Lock()
	b.evs = append(b.evs, e)
	b.mu.Unlock()
	return nil
}

func (b *bootCollector) events() []redisx.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]redisx.Event(nil), b.evs...)
}

// fencedReplay applies events as a consumer behind the feed's fences: per
// document the highest order (idempotency.Order) wins, a delete removes.
func fencedReplay(tb testing.TB, lists ...[]redisx.Event) map[docKey]doc {
	tb.Helper()
	orders := map[docKey]uint64{}
	out := map[docKey]doc{}
	for _, evs := range lists {
		for _, e := range evs {
			if !idempotency.Fenced(e) {
				continue
			}
			o, err := idempotency.Order(e)
			if err != nil {
				tb.Fatal(err)
			}
			k := docKey{e.IndexUUID, e.Shard, e.ID}
			if cur, ok := orders[k]; ok && o <= cur {
				continue
			}
			orders[k] = o
			if e.Op == redisx.OpDelete {
				delete(out, k)
			} else {
				out[k] = doc{routing: e.Routing, seq: e.SeqNo, source: compact(e.Source)}
			}
		}
	}
	return out
}

// streamAfter reads the feed's events after a stream id.
func streamAfter(tb testing.TB, rdb *redis.Client, stream, id string) []redisx.Event {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "("+id, "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]redisx.Event, len(msgs))
	for i, m := range msgs {
		if out[i], err = redisx.ParseEvent(m); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// lastShardDocs returns the ids of the n documents of one shard with the
// highest seq nos (the last pages of a view of the shard), with their
// routing.
func lastShardDocs(tb testing.TB, c backend, index string, shard, n int) map[string]string {
	tb.Helper()
	var r struct {
		Hits struct {
			Hits []struct {
				ID      string `json:"_id"`
				Routing string `json:"_routing"`
			} `json:"hits"`
		} `json:"hits"`
	}
	body := fmt.Sprintf(`{"size":%d,"seq_no_primary_term":true,"sort":[{"_seq_no":"desc"}],"query":{"match_all":{}}}`, n)
	if err := json.Unmarshal(mustDo(tb, "POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", c.URL(), index, shard), body), &r); err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, h := range r.Hits.Hits {
		out[h.ID] = h.Routing
	}
	if len(out) != n {
		tb.Fatalf("shard %d of %s: %d documents, want at least %d", shard, index, len(out), n)
	}
	return out
}

// bootDo sends a request from a handler's goroutine: a failure is a test
// error (Fatal belongs to the test's goroutine).
func bootDo(tb testing.TB, method, url, body string) {
	if st, b, err := tryDo(method, url, body); err != nil || st >= 300 {
		tb.Errorf("%s %s: HTTP %d %s %v", method, url, st, b, err)
	}
}

func bootDocURL(c backend, index, id, routing string) string {
	u := c.URL() + "/" + index + "/_doc/" + id
	if routing != "" {
		u += "?routing=" + routing
	}
	return u
}

// TestBootstrapCopy_ChangesDuringTheCopy: the copy of a feed's indices
// runs while documents are created, updated, deleted and created again —
// some of them in the pages of a view not yet read — and while an index is
// deleted and created again under a new uuid in the middle of its copy. The
// copy's events, then the stream's after the position recorded before the
// copy, replayed through fences, are exactly the cluster's documents. Runs
// on the emulator and on a real engine (ESCF_TEST_ENGINE).
func TestBootstrapCopy_ChangesDuringTheCopy(t *testing.T) {
	t.Parallel()
	c := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	orders, logs := c.Index("boot-orders"), c.Index("boot-logs")
	createIndex(t, c, orders, 3, 1)
	createIndex(t, c, logs, 2, 1)
	var bulk strings.Builder
	for i := 0; i < 300; i++ {
		meta := fmt.Sprintf(`{"index":{"_index":%q,"_id":"%d"}}`, orders, i)
		if i%5 == 0 {
			meta = fmt.Sprintf(`{"index":{"_index":%q,"_id":"%d","routing":"r%d"}}`, orders, i, i%4)
		}
		fmt.Fprintf(&bulk, "%s\n{\"n\":%d}\n", meta, i)
	}
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&bulk, "{\"index\":{\"_index\":%q,\"_id\":\"l%d\"}}\n{\"n\":%d}\n", logs, i, i)
	}
	if b := mustDo(t, "POST", c.URL()+"/_bulk?refresh=true", bulk.String()); strings.Contains(string(b), `"errors":true`) {
		t.Fatalf("seed: %s", b)
	}
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "boot", []string{c.Index("boot-*")}, func(*deletes.Config) {}, nil)
	waitCaughtUp(t, c, f.store, []string{orders, logs}, 30*time.Second)
	oldLogs := indexUUID(t, c, logs)
	ordersUUID := indexUUID(t, c, orders)
	last, err := f.rdb.XRevRangeN(context.Background(), f.keys.Events(), "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatalf("the stream's last entry: %v %v", last, err)
	}
	pos := last[0].ID // what consume --bootstrap records first

	// The documents the mutations touch: the last of shard 0's view, which
	// the copy reads only after it began on that shard.
	tail := lastShardDocs(t, c, orders, 0, 8)
	var updated, deleted, recreated []string
	for id := range tail {
		switch {
		case len(updated) < 3:
			updated = append(updated, id)
		case len(deleted) < 3:
			deleted = append(deleted, id)
		default:
			recreated = append(recreated, id)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a writer all along the copy: creates, updates, deletes, re-creates
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 8))
		for ctx.Err() == nil {
			i := rng.IntN(400)
			if _, mine := tail[fmt.Sprint(i)]; mine {
				continue // the hook's
			}
			routing := ""
			if i%5 == 0 {
				routing = fmt.Sprintf("r%d", i%4)
			}
			method, body := "PUT", fmt.Sprintf(`{"n":%d,"w":%d}`, i, writes.Load())
			if rng.IntN(3) == 0 {
				method, body = "DELETE", ""
			}
			if st, _, err := tryDo(method, bootDocURL(c, orders, fmt.Sprint(i), routing), body); err == nil && st < 500 {
				writes.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var touchedOrders, touchedLogs atomic.Bool
	bc := &bootCollector{hook: func(e redisx.Event) {
		time.Sleep(time.Millisecond) // a slow sink: the writes land during the copy
		if e.Op != redisx.OpUpsert {
			return
		}
		if e.Index == orders && e.Shard == 0 && touchedOrders.CompareAndSwap(false, true) {
			for _, id := range updated {
				bootDo(t, "PUT", bootDocURL(c, orders, id, tail[id]), `{"during":"update"}`)
			}
			for _, id := range append(append([]string(nil), deleted...), recreated...) {
				bootDo(t, "DELETE", bootDocURL(c, orders, id, tail[id]), "")
			}
			for _, id := range recreated {
				bootDo(t, "PUT", bootDocURL(c, orders, id, tail[id]), `{"during":"re-created"}`)
			}
		}
		if e.Index == logs && touchedLogs.CompareAndSwap(false, true) {
			bootDo(t, "DELETE", c.URL()+"/"+logs, "")
			bootDo(t, "PUT", c.URL()+"/"+logs, `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`)
			for i := 0; i < 15; i++ {
				bootDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/again-%d", c.URL(), logs, i), `{"again":true}`)
			}
		}
	}}
	client, err := es.New(inspect(c).esConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := bootstrap.Copy(context.Background(), bootstrap.Config{ES: client, Redis: f.rdb, Feed: "boot", Handler: bc.handle,
		PageSize: 10, Workers: 2, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: newTestLogger(testWriter{t})})
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy: documents %v, left to the stream %v, skipped %v, took %s; %d writes during it",
		res.Documents, res.Deferred, res.Skipped, res.Duration.Round(time.Millisecond), writes.Load())
	if !touchedOrders.Load() || !touchedLogs.Load() || writes.Load() < 20 {
		t.Fatalf("mutations during the copy: orders %v, logs %v, %d writes: the test did not exercise the copy",
			touchedOrders.Load(), touchedLogs.Load(), writes.Load())
	}
	copied := bc.events()
	// The copy handed the versions its views held: the ones updated and
	// deleted after their view opened, at their old seq nos (the fences
	// must order the stream's newer events over them).
	handed := map[string]bool{}
	for _, e := range copied {
		if e.Op == redisx.OpUpsert && e.IndexUUID == ordersUUID && e.Shard == 0 {
			handed[e.ID] = true
		}
	}
	for _, id := range append(append(append([]string(nil), updated...), deleted...), recreated...) {
		if !handed[id] {
			t.Errorf("document %s was changed after the view of its shard opened, but the copy did not hand its old version", id)
		}
	}

	newLogs := indexUUID(t, c, logs)
	waitCaughtUp(t, c, f.store, []string{orders, logs}, 30*time.Second)
	want := clusterDocs(t, c, orders)
	for k, d := range clusterDocs(t, c, logs) {
		want[k] = d
	}
	// The relay's delete scans run after its reads: wait for them.
	deadline := time.Now().Add(30 * time.Second)
	var diff string
	for time.Now().Before(deadline) {
		got := fencedReplay(t, copied, streamAfter(t, f.rdb, f.keys.Events(), pos))
		for k := range got {
			if k.uuid != ordersUUID && k.uuid != oldLogs && k.uuid != newLogs {
				delete(got, k)
			}
		}
		if diff = diffDocs(want, got); diff == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the copy, then the stream after %s, is not the cluster:\n%s", pos, diff)
}

// TestBootstrapCopy_FailingResponsesAbort: shard reads that keep failing
// (a 503, pages timing out, a shard whose copies fail) end the copy with
// an error naming the shard, never with a short copy: the index gets no
// snapshot_end. Emulator only (injected faults).
func TestBootstrapCopy_FailingResponsesAbort(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault func(*esemu.Cluster) error
	}{
		{"503", func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, Status: 503, Count: 100})
		}},
		{"timed out", func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, TimedOut: true, Count: 100})
		}},
		{"failed shard", func(c *esemu.Cluster) error { return c.FailShardSearches("boot-fail", 1, "any", 100) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := cluster(t, esemu.Config{Nodes: 2})
			createIndex(t, c, "boot-fail", 2, 1)
			for i := 0; i < 30; i++ {
				mustDo(t, "PUT", fmt.Sprintf("%s/boot-fail/_doc/%d", c.URL(), i), `{}`)
			}
			srv := redistest.Start(t)
			f := startRelay(t, c, srv.URL(), "boot", []string{"boot-fail"}, nil)
			waitCaughtUp(t, c, f.store, []string{"boot-fail"}, 10*time.Second)
			f.halt()
			if err := tt.fault(c); err != nil {
				t.Fatal(err)
			}
			client, err := es.New(inspect(c).esConfig())
			if err != nil {
				t.Fatal(err)
			}
			bc := &bootCollector{}
			res, err := bootstrap.Copy(context.Background(), bootstrap.Config{ES: client, Redis: f.rdb, Feed: "boot", Handler: bc.handle,
				PageSize: 5, MaxAttempts: 3, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: newTestLogger(testWriter{t})})
			if !errors.Is(err, bootstrap.ErrGaveUp) || !strings.Contains(err.Error(), "shard") || !strings.Contains(err.Error(), "boot-fail") {
				t.Fatalf("error %v, want ErrGaveUp naming the shard and the index", err)
			}
			for _, e := range bc.events() {
				if e.Op == redisx.OpSnapshotEnd {
					t.Fatalf("a failed copy handed snapshot_end %+v", e)
				}
			}
			if n := res.Documents["boot-fail"]; n != 0 {
				t.Fatalf("a failed copy counts %d documents", n)
			}
		})
	}
}

// TestBootstrapCopy_Large: a copy of 20,000 documents over 4 shards in
// pages of 1,000 hands each exactly once (with a sink that does nothing,
// so the time is the copy's own; logged as documents per second).
func TestBootstrapCopy_Large(t *testing.T) {
	t.Parallel()
	c := esCluster(t, esemu.Config{})
	ix := c.Index("boot-large")
	createIndex(t, c, ix, 4, 0)
	const n = 20000
	for start := 0; start < n; start += 2000 {
		var bulk strings.Builder
		for i := start; i < start+2000; i++ {
			fmt.Fprintf(&bulk, "{\"index\":{\"_index\":%q,\"_id\":\"%d\"}}\n{\"n\":%d,\"pad\":\"%s\"}\n", ix, i, i, strings.Repeat("x", 200))
		}
		if b := mustDo(t, "POST", c.URL()+"/_bulk", bulk.String()); strings.Contains(string(b), `"errors":true`) {
			t.Fatalf("seed: %.500s", b)
		}
	}
	mustDo(t, "POST", c.URL()+"/"+ix+"/_refresh", "")
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "boot", []string{ix}, func(cfg *relay.Config) { cfg.BatchSize = 1000 })
	waitCaughtUp(t, c, f.store, []string{ix}, 60*time.Second)
	client, err := es.New(inspect(c).esConfig())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	res, err := bootstrap.Copy(context.Background(), bootstrap.Config{ES: client, Redis: f.rdb, Feed: "boot",
		Handler: func(_ context.Context, e redisx.Event) error {
			if e.Op == redisx.OpUpsert {
				mu.Lock()
				seen[e.ID]++
				mu.Unlock()
			}
			return nil
		}, Logger: newTestLogger(testWriter{t})})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n || res.Documents[ix] != n {
		t.Fatalf("%d distinct documents handed, %v counted; want %d", len(seen), res.Documents, n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("document %s handed %d times", id, k)
		}
	}
	t.Logf("bootstrap copy of %d documents (4 shards, pages of 1000): %s, %.0f documents/s",
		n, res.Duration.Round(time.Millisecond), float64(n)/res.Duration.Seconds())
}
