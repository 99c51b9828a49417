package sink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// bulkEnv is a bulk sink mirroring into an emulated target cluster, with
// generations in a real redis-server.
type bulkEnv struct {
	target *esemu.Cluster
	rdb    *redis.Client
	keys   redisx.Keys
	sink   *sink.Bulk
	h      redisx.Handler
}

func newBulkEnv(tb testing.TB, flavor esemu.Flavor, mod func(*sink.BulkConfig)) *bulkEnv {
	tb.Helper()
	target, err := esemu.New(esemu.Config{Flavor: flavor})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { target.Close() })
	client, err := es.New(es.Config{URLs: []string{target.URL()}})
	if err != nil {
		tb.Fatal(err)
	}
	return newBulkEnvFor(tb, target, client, mod)
}

// newBulkEnvFor builds the sink for any client (a canned server: target nil).
func newBulkEnvFor(tb testing.TB, target *esemu.Cluster, client *es.Client, mod func(*sink.BulkConfig)) *bulkEnv {
	tb.Helper()
	rdb := redistest.Start(tb).Client(tb)
	keys := redisx.NewKeys(strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name()))
	cfg := sink.BulkConfig{ES: client, Redis: rdb, Keys: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	s, err := sink.NewBulk(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	env := &bulkEnv{target: target, rdb: rdb, keys: keys, sink: s, h: s.Handler()}
	env.setGeneration(tb, "uuid-1", 1)
	env.setIndex(tb, "uuid-1", env.sourceLayout(tb, 1))
	return env
}

// sourceLayout is the layout of a source index with that many shards on
// the target's flavor (nil for a canned target: a record without a
// layout, as relays before layouts wrote them).
func (env *bulkEnv) sourceLayout(tb testing.TB, shards int) *checkpoint.IndexLayout {
	tb.Helper()
	if env.target == nil {
		return nil
	}
	return emuLayout(tb, env.target.Flavor(), shards, "")
}

// emuLayout is the layout of a new index with that many shards and the
// given extra settings (JSON members, "" for none) on an emulator of the
// flavor, as the relay records it.
func emuLayout(tb testing.TB, flavor esemu.Flavor, shards int, extra string) *checkpoint.IndexLayout {
	tb.Helper()
	c, err := esemu.New(esemu.Config{Flavor: flavor})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if extra != "" {
		extra = "," + extra
	}
	body := fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":0%s},"mappings":{"properties":{"n":{"type":"long"}}}}`, shards, extra)
	req, _ := http.NewRequest(http.MethodPut, c.URL()+"/src", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	client, err := es.New(es.Config{URLs: []string{c.URL()}})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := client.IndexLayout(context.Background(), "src")
	if err != nil {
		tb.Fatal(err)
	}
	return &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
		RoutingPath: l.RoutingPath, Engine: l.Engine, EngineVersion: l.EngineVersion, VersionCreated: l.VersionCreated, Mappings: l.Mappings}
}

// setIndex records an index of the feed as the relay does when it adopts
// it (layout nil: as relays before layouts).
func (env *bulkEnv) setIndex(tb testing.TB, uuid string, layout *checkpoint.IndexLayout) {
	tb.Helper()
	shards := 1
	if layout != nil {
		shards = layout.Shards
	}
	b, err := json.Marshal(checkpoint.IndexInfo{Name: "orders", Target: "orders", Shards: shards, FirstSeen: time.Now().UTC(), Layout: layout})
	if err != nil {
		tb.Fatal(err)
	}
	if err := env.rdb.HSet(context.Background(), env.keys.Indices(), uuid, b).Err(); err != nil {
		tb.Fatal(err)
	}
}

func (env *bulkEnv) setGeneration(tb testing.TB, uuid string, gen int64) {
	tb.Helper()
	if err := env.rdb.HSet(context.Background(), env.keys.Generations(), uuid, gen).Err(); err != nil {
		tb.Fatal(err)
	}
}

// handle runs the handler and fails the test on an error.
func (env *bulkEnv) handle(tb testing.TB, e redisx.Event) {
	tb.Helper()
	if err := env.h(context.Background(), e); err != nil {
		tb.Fatalf("handler(%s %s seq %d): %v", e.Op, e.ID, e.SeqNo, err)
	}
}

func (env *bulkEnv) bulkRequests() int { return env.target.RequestCounts()[esemu.KindBulk] }

func upsertEvent(uuid, id string, seq int64, source string) redisx.Event {
	return redisx.Event{StreamID: strconv.FormatInt(seq, 10) + "-0", Op: redisx.OpUpsert, Index: "orders", IndexUUID: uuid,
		ID: id, SeqNo: seq, PrimaryTerm: 1, Version: 1, Source: json.RawMessage(source), Target: "orders"}
}

func deleteEvent(uuid, id string, seq int64) redisx.Event {
	return redisx.Event{StreamID: strconv.FormatInt(seq, 10) + "-1", Op: redisx.OpDelete, Index: "orders", IndexUUID: uuid,
		ID: id, SeqNo: seq, Target: "orders"}
}

// targetDoc is a document as the target's realtime GET returns it.
type targetDoc struct {
	Found   bool            `json:"found"`
	Version int64           `json:"_version"`
	Routing string          `json:"_routing"`
	Source  json.RawMessage `json:"_source"`
}

func getDoc(tb testing.TB, c *esemu.Cluster, index, id, routing string) targetDoc {
	tb.Helper()
	u := c.URL() + "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id)
	if routing != "" {
		u += "?routing=" + url.QueryEscape(routing)
	}
	resp, err := http.Get(u)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var d targetDoc
	if resp.StatusCode == http.StatusNotFound {
		return d
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		tb.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		tb.Fatal(err)
	}
	return d
}

func mustVersion(tb testing.TB, gen, seq int64, deleted bool) int64 {
	tb.Helper()
	v, err := sink.BulkVersion(gen, seq, deleted)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func createIndex(tb testing.TB, c *esemu.Cluster, name string, shards int) {
	tb.Helper()
	body := fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":0}}`, shards)
	req, _ := http.NewRequest(http.MethodPut, c.URL()+"/"+name, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		tb.Fatalf("create %s: %d %s", name, resp.StatusCode, b)
	}
}

// history is the target's one-shard index history of one id.
func history(tb testing.TB, c *esemu.Cluster, index string, shard int, id string) []esemu.Op {
	tb.Helper()
	ops, err := c.History(index, shard, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var out []esemu.Op
	for _, o := range ops {
		if o.ID == id {
			out = append(out, o)
		}
	}
	return out
}

// TestBulk_Contract runs the sinks' contract (sinktest) on Bulk: it
// mirrors into an emulated cluster reached through a proxy (the suite's
// hanging target), with the generation and layout of the suite's index
// recorded as the relay does.
func TestBulk_Contract(t *testing.T) {
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		target, err := esemu.New(esemu.Config{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { target.Close() })
		u, err := url.Parse(target.URL())
		if err != nil {
			tb.Fatal(err)
		}
		proxy := sinktest.StartProxy(tb, u.Host)
		client, err := es.New(es.Config{URLs: []string{u.Scheme + "://" + proxy.Addr()}})
		if err != nil {
			tb.Fatal(err)
		}
		rdb := redistest.Start(tb).Client(tb)
		keys := redisx.NewKeys("sinktest")
		info, err := json.Marshal(checkpoint.IndexInfo{Name: sinktest.Index, Target: sinktest.Index, Shards: 1, FirstSeen: time.Now().UTC(),
			Layout: emuLayout(tb, target.Flavor(), 1, "")})
		if err != nil {
			tb.Fatal(err)
		}
		ctx := context.Background()
		if err := rdb.HSet(ctx, keys.Generations(), sinktest.IndexUUID, 1).Err(); err != nil {
			tb.Fatal(err)
		}
		if err := rdb.HSet(ctx, keys.Indices(), sinktest.IndexUUID, info).Err(); err != nil {
			tb.Fatal(err)
		}
		open := func(tb testing.TB) sink.Sink {
			s, err := sink.NewBulk(sink.BulkConfig{ES: client, Redis: rdb, Keys: keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				tb.Fatal(err)
			}
			return s
		}
		holds := func(ctx context.Context, d sinktest.DocID) (json.RawMessage, bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.URL()+"/"+url.PathEscape(d.Index)+"/_doc/"+url.PathEscape(d.ID), nil)
			if err != nil {
				return nil, false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return nil, false, nil
			}
			var doc targetDoc
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
				return nil, false, fmt.Errorf("GET %s: %d %v", req.URL, resp.StatusCode, err)
			}
			return doc.Source, doc.Found, nil
		}
		clientsOpen := func(ctx context.Context) error {
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("the Redis client passed in: %w", err)
			}
			if _, err := client.Info(ctx); err != nil {
				return fmt.Errorf("the *es.Client passed in: %w", err)
			}
			return nil
		}
		return sinktest.Env{Sink: open(tb), Holds: holds, Gate: &proxy.Gate, ClientsOpen: clientsOpen, Reopen: open}
	}, sinktest.Features{Ordered: true, Positions: true, Reconciler: true, ClientsPassedIn: true, CloseAborts: true})
}

func TestBulkVersion(t *testing.T) {
	tests := []struct {
		name    string
		gen     int64
		seq     int64
		deleted bool
		want    int64
		err     string
	}{
		{"first upsert", 1, 0, false, 1 << 41, ""},
		{"upsert", 1, 5, false, 1<<41 | 10, ""},
		{"delete at the same seq no", 1, 5, true, 1<<41 | 11, ""},
		{"highest seq no", 1, sink.BulkMaxSeqNo, true, 1<<42 - 1, ""},
		{"second generation", 2, 0, false, 2 << 41, ""},
		{"highest generation", sink.BulkMaxGeneration, sink.BulkMaxSeqNo, true, 1<<63 - 1, ""},
		{"seq no too high", 1, 1 << 40, false, 0, "40 bits"},
		{"negative seq no", 1, -1, false, 0, "outside 0.."},
		{"generation 0", 0, 1, false, 0, "generation 0"},
		{"generation too high", 1 << 22, 1, false, 0, "22 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sink.BulkVersion(tt.gen, tt.seq, tt.deleted)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("BulkVersion = %d, %v; want an error saying %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("BulkVersion = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	t.Run("order", func(t *testing.T) {
		// upsert(s) < delete(s) < upsert(s+1) < … < everything of the next generation
		seq := []int64{
			mustVersion(t, 1, 7, false), mustVersion(t, 1, 7, true), mustVersion(t, 1, 8, false),
			mustVersion(t, 1, sink.BulkMaxSeqNo, true), mustVersion(t, 2, 0, false), mustVersion(t, 2, 0, true),
		}
		for i := 1; i < len(seq); i++ {
			if seq[i] <= seq[i-1] {
				t.Errorf("version %d (%d) is not above version %d (%d)", i, seq[i], i-1, seq[i-1])
			}
		}
	})
}

func TestBulk_Handler_Versions(t *testing.T) {
	for _, flavor := range []esemu.Flavor{esemu.FlavorES7, esemu.FlavorES9, esemu.FlavorOpenSearch2} {
		t.Run(string(flavor), func(t *testing.T) {
			env := newBulkEnv(t, flavor, nil)
			env.handle(t, upsertEvent("uuid-1", "a", 3, `{"n":1}`))
			d := getDoc(t, env.target, "orders", "a", "")
			if want := mustVersion(t, 1, 3, false); !d.Found || d.Version != want || string(d.Source) != `{"n":1}` {
				t.Fatalf("after the upsert: %+v, want version %d, source {\"n\":1}", d, want)
			}
			env.handle(t, upsertEvent("uuid-1", "a", 8, `{"n":2}`))
			d = getDoc(t, env.target, "orders", "a", "")
			if want := mustVersion(t, 1, 8, false); !d.Found || d.Version != want || string(d.Source) != `{"n":2}` {
				t.Fatalf("after the update: %+v, want version %d, source {\"n\":2}", d, want)
			}
			env.handle(t, deleteEvent("uuid-1", "a", 9))
			if d := getDoc(t, env.target, "orders", "a", ""); d.Found {
				t.Fatalf("after the delete: %+v", d)
			}
			h := history(t, env.target, "orders", 0, "a")
			if len(h) != 3 || h[2].Type != "delete" || h[2].Version != mustVersion(t, 1, 9, true) {
				t.Fatalf("target history of a = %+v; want index, index, delete with version %d", h, mustVersion(t, 1, 9, true))
			}
			if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 3, Applied: 3}); got != want {
				t.Errorf("Stats = %+v, want %+v", got, want)
			}
		})
	}
}

func TestBulk_Handler_ReorderSafety(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	env.handle(t, upsertEvent("uuid-1", "a", 10, `{"n":"new"}`))
	env.handle(t, upsertEvent("uuid-1", "a", 5, `{"n":"old"}`)) // a lane of another consumer, late
	d := getDoc(t, env.target, "orders", "a", "")
	if want := mustVersion(t, 1, 10, false); d.Version != want || string(d.Source) != `{"n":"new"}` {
		t.Fatalf("doc = %+v; want the newer version %d", d, want)
	}
	if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Applied: 1, Conflicts: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestBulk_Handler_RepeatedEvent(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	e := upsertEvent("uuid-1", "a", 4, `{"n":1}`)
	env.handle(t, e)
	env.handle(t, e) // redelivered after a crash before XACK
	if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Applied: 1, Conflicts: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if h := history(t, env.target, "orders", 0, "a"); len(h) != 1 {
		t.Errorf("the repeat was written: history %+v", h)
	}
}

func TestBulk_Handler_DeleteThenOlderUpsert(t *testing.T) {
	t.Run("older seq no", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.handle(t, deleteEvent("uuid-1", "a", 8))
		env.handle(t, upsertEvent("uuid-1", "a", 5, `{"n":1}`))
		if d := getDoc(t, env.target, "orders", "a", ""); d.Found {
			t.Fatalf("the older upsert resurrected the document: %+v", d)
		}
		// The sink's own tombstone skips the older upsert without a
		// request (the target's would refuse it too, for gc_deletes).
		if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 1, Applied: 1, Conflicts: 1}); got != want {
			t.Errorf("Stats = %+v, want %+v (a delete of a missing doc is applied: it leaves a tombstone)", got, want)
		}
	})
	t.Run("same seq no as the upsert", func(t *testing.T) {
		// A delete's seq no is the checkpoint of the scan that found it: it
		// can equal the seq no of the document's last upsert.
		env := newBulkEnv(t, "", nil)
		env.handle(t, upsertEvent("uuid-1", "a", 5, `{"n":1}`))
		env.handle(t, deleteEvent("uuid-1", "a", 5))
		if d := getDoc(t, env.target, "orders", "a", ""); d.Found {
			t.Fatalf("the delete with the upsert's seq no did not apply: %+v", d)
		}
		env.handle(t, upsertEvent("uuid-1", "a", 5, `{"n":1}`)) // the upsert again
		if d := getDoc(t, env.target, "orders", "a", ""); d.Found {
			t.Fatalf("a redelivered upsert resurrected the document: %+v", d)
		}
		if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Applied: 2, Conflicts: 1}); got != want {
			t.Errorf("Stats = %+v, want %+v (the repeated upsert is skipped by the sink's tombstone)", got, want)
		}
	})
}

func TestBulk_Handler_RecreatedIndex(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	env.setGeneration(t, "uuid-2", 2)
	env.setIndex(t, "uuid-2", env.sourceLayout(t, 1))
	env.handle(t, upsertEvent("uuid-1", "a", 100, `{"gen":1}`))
	env.handle(t, upsertEvent("uuid-2", "a", 0, `{"gen":2}`)) // re-created: seq nos restart at 0
	d := getDoc(t, env.target, "orders", "a", "")
	if want := mustVersion(t, 2, 0, false); d.Version != want || string(d.Source) != `{"gen":2}` {
		t.Fatalf("doc = %+v; want the re-created index's document, version %d", d, want)
	}
	// The old index's delete (and a late upsert) arrive afterwards.
	env.handle(t, deleteEvent("uuid-1", "a", 250))
	env.handle(t, upsertEvent("uuid-1", "a", 200, `{"gen":1}`))
	d = getDoc(t, env.target, "orders", "a", "")
	if !d.Found || string(d.Source) != `{"gen":2}` {
		t.Fatalf("doc = %+v; the generation-1 tombstone or upsert beat generation 2", d)
	}
	// The late generation-1 upsert is older than the generation-1 delete
	// the sink recorded: skipped without a request.
	if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 3, Applied: 2, Conflicts: 2}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestBulk_Handler_Routing(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	env.setIndex(t, "uuid-1", env.sourceLayout(t, 4))
	createIndex(t, env.target, "orders", 4)
	// Without custom routing a document's shard comes from its _id, so the
	// routed document "doc-i" with routing "user-i" must share the shard of
	// the unrouted probe document "user-i".
	const n = 8
	var events []redisx.Event
	for i := range n {
		e := upsertEvent("uuid-1", fmt.Sprintf("doc-%d", i), int64(2*i), `{"routed":true}`)
		e.Routing = fmt.Sprintf("user-%d", i)
		events = append(events, e, upsertEvent("uuid-1", fmt.Sprintf("user-%d", i), int64(2*i+1), `{"probe":true}`))
	}
	for _, e := range events {
		env.handle(t, e)
	}
	shardOf := map[string]int{}
	routingOf := map[string]string{}
	for shard := range 4 {
		ops, err := env.target.History("orders", shard, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ops {
			shardOf[o.ID], routingOf[o.ID] = shard, o.Routing
		}
	}
	missedWithoutRouting := 0
	for i := range n {
		id, r := fmt.Sprintf("doc-%d", i), fmt.Sprintf("user-%d", i)
		if got, want := shardOf[id], shardOf[r]; got != want || routingOf[id] != r {
			t.Errorf("%s is on shard %d with routing %q; want shard %d (that of _id %s) and routing %q", id, got, routingOf[id], want, r, r)
		}
		if d := getDoc(t, env.target, "orders", id, r); !d.Found || d.Routing != r {
			t.Errorf("GET %s?routing=%s = %+v", id, r, d)
		}
		if !getDoc(t, env.target, "orders", id, "").Found {
			missedWithoutRouting++
		}
	}
	if missedWithoutRouting == 0 {
		t.Errorf("every routed document is also found without routing: the routing did not move any of them")
	}
	// A routed delete reaches the document.
	del := deleteEvent("uuid-1", "doc-0", 100)
	del.Routing = "user-0"
	env.handle(t, del)
	if d := getDoc(t, env.target, "orders", "doc-0", "user-0"); d.Found {
		t.Errorf("routed delete missed the document: %+v", d)
	}
}

func TestBulk_Handler_IndexTemplate(t *testing.T) {
	env := newBulkEnv(t, "", func(c *sink.BulkConfig) { c.IndexTemplate = "mirror-{index}-{index_uuid}" })
	env.setGeneration(t, "Ab_C-d", 1)
	env.setIndex(t, "Ab_C-d", env.sourceLayout(t, 1))
	env.handle(t, upsertEvent("Ab_C-d", "a", 1, `{}`))
	if d := getDoc(t, env.target, "mirror-orders-ab_c-d", "a", ""); !d.Found {
		t.Fatalf("document not in mirror-orders-ab_c-d; indices: %v", env.target.IndexNames())
	}
}

func TestBulk_Handler_PrettyPrintedSource(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	env.handle(t, upsertEvent("uuid-1", "a", 1, "{\n  \"n\": 1,\n  \"s\": \"x\"\n}\n"))
	if d := getDoc(t, env.target, "orders", "a", ""); string(d.Source) != `{"n":1,"s":"x"}` {
		t.Fatalf("doc = %+v", d)
	}
}

// handleAll runs the handler on events concurrently and returns the errors
// in event order.
func handleAll(h redisx.Handler, events []redisx.Event) []error {
	errs := make([]error, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() { errs[i] = h(context.Background(), e) })
	}
	wg.Wait()
	return errs
}

func TestBulk_Handler_GroupCommit(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	var events []redisx.Event
	for i := range 50 {
		events = append(events, upsertEvent("uuid-1", fmt.Sprintf("d%d", i), int64(i), fmt.Sprintf(`{"i":%d}`, i)))
	}
	for i, err := range handleAll(env.h, events) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	requests := env.bulkRequests()
	if requests > 10 {
		t.Errorf("50 concurrent events took %d _bulk requests; want far fewer", requests)
	}
	if st := env.sink.Stats(); st.Requests != int64(requests) || st.Applied != 50 {
		t.Errorf("Stats = %+v; want %d requests, 50 applied", st, requests)
	}
	for i := range 50 {
		if d := getDoc(t, env.target, "orders", fmt.Sprintf("d%d", i), ""); string(d.Source) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("d%d = %+v", i, d)
		}
	}
	t.Logf("50 events in %d _bulk requests", requests)
}

// TestBulk_Handler_MaxBatch: a batch is sent as soon as it is full. With
// MaxWait an hour, the handlers return only if their full batches were
// sent without waiting for it (the minute below only turns a hang into a
// failure that says so).
func TestBulk_Handler_MaxBatch(t *testing.T) {
	env := newBulkEnv(t, "", func(c *sink.BulkConfig) { c.MaxBatch = 4; c.MaxWait = time.Hour })
	var events []redisx.Event
	for i := range 8 {
		events = append(events, upsertEvent("uuid-1", fmt.Sprintf("d%d", i), int64(i), `{}`))
	}
	done := make(chan []error, 1)
	go func() { done <- handleAll(env.h, events) }()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
		}
	case <-time.After(time.Minute):
		t.Fatalf("8 events with MaxBatch 4 not handled in a minute: full batches wait for MaxWait (an hour); %d requests", env.bulkRequests())
	}
	if got := env.bulkRequests(); got != 2 {
		t.Errorf("8 events with MaxBatch 4: %d requests, want 2", got)
	}
}

func TestBulk_Handler_RequestFailures(t *testing.T) {
	three := func(base int64) []redisx.Event {
		return []redisx.Event{upsertEvent("uuid-1", "a", base, `{}`), upsertEvent("uuid-1", "b", base, `{}`), deleteEvent("uuid-1", "c", base)}
	}
	batched := func(c *sink.BulkConfig) { c.MaxBatch = 3; c.MaxWait = 10 * time.Second } // the three events form one batch
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status)+" fails the whole batch, retryable", func(t *testing.T) {
			env := newBulkEnv(t, "", batched)
			if err := env.target.InjectFault(esemu.Fault{Kind: esemu.KindBulk, Status: status}); err != nil {
				t.Fatal(err)
			}
			for i, err := range handleAll(env.h, three(1)) {
				var ee *es.Error
				if err == nil || redisx.IsPermanent(err) || !errors.As(err, &ee) || ee.Status != status || !ee.Temporary() {
					t.Errorf("event %d: err = %v; want a retryable *es.Error with status %d", i, err, status)
				}
			}
			for i, err := range handleAll(env.h, three(1)) { // the redelivery
				if err != nil {
					t.Errorf("retry of event %d: %v", i, err)
				}
			}
			if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Applied: 3, Failed: 3}); got != want {
				t.Errorf("Stats = %+v, want %+v", got, want)
			}
		})
	}
	t.Run("answer lost after the write: the retry is a conflict", func(t *testing.T) {
		env := newBulkEnv(t, "", batched)
		if err := env.target.InjectFault(esemu.Fault{Kind: esemu.KindBulk, Drop: true}); err != nil {
			t.Fatal(err)
		}
		for i, err := range handleAll(env.h, three(1)) {
			if err == nil || redisx.IsPermanent(err) {
				t.Errorf("event %d: err = %v; want a retryable error", i, err)
			}
		}
		for i, err := range handleAll(env.h, three(1)) {
			if err != nil {
				t.Errorf("retry of event %d: %v", i, err)
			}
		}
		if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 2, Conflicts: 3, Failed: 3}); got != want {
			t.Errorf("Stats = %+v, want %+v", got, want)
		}
	})
	t.Run("400 for the whole batch: events sent one by one", func(t *testing.T) {
		env := newBulkEnv(t, "", batched)
		if err := env.target.InjectFault(esemu.Fault{Kind: esemu.KindBulk, Status: 400}); err != nil {
			t.Fatal(err)
		}
		for i, err := range handleAll(env.h, three(1)) {
			if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
		}
		if got := env.bulkRequests(); got != 4 {
			t.Errorf("%d requests; want 4 (the batch, then one per event)", got)
		}
	})
	t.Run("400 for one event: permanent", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		if err := env.target.InjectFault(esemu.Fault{Kind: esemu.KindBulk, Status: 400}); err != nil {
			t.Fatal(err)
		}
		if err := env.h(context.Background(), upsertEvent("uuid-1", "a", 1, `{}`)); !redisx.IsPermanent(err) {
			t.Errorf("err = %v, want a permanent error", err)
		}
	})
	t.Run("target down: retryable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		addr := srv.URL
		srv.Close()
		client, err := es.New(es.Config{URLs: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		env := newBulkEnvFor(t, nil, client, nil)
		err = env.h(context.Background(), upsertEvent("uuid-1", "a", 1, `{}`))
		var ee *es.Error
		if err == nil || redisx.IsPermanent(err) || !errors.As(err, &ee) || !ee.Temporary() {
			t.Errorf("err = %v; want a retryable *es.Error", err)
		}
	})
}

func TestBulk_Handler_ItemErrorFromTarget(t *testing.T) {
	// The emulator refuses a source that is not a JSON object, per item:
	// only that event fails, permanently; its batch neighbours land.
	env := newBulkEnv(t, "", func(c *sink.BulkConfig) { c.MaxBatch = 3; c.MaxWait = 10 * time.Second })
	events := []redisx.Event{upsertEvent("uuid-1", "a", 1, `{"ok":1}`), upsertEvent("uuid-1", "b", 1, `[1,2]`), upsertEvent("uuid-1", "c", 1, `{"ok":3}`)}
	errs := handleAll(env.h, events)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("good neighbours failed: %v, %v", errs[0], errs[2])
	}
	if err := errs[1]; !redisx.IsPermanent(err) || !strings.Contains(err.Error(), "document_parsing_exception") {
		t.Errorf("non-object source: err = %v; want a permanent document_parsing_exception", err)
	}
	if got, want := env.sink.Stats(), (sink.BulkStats{Requests: 1, Applied: 2, Failed: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

// cannedBulkItems is a _bulk endpoint answering each action with the item
// body listed for its _id (status, result, error).
func cannedBulkItems(tb testing.TB, items map[string]string) *es.Client {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out []string
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			var a map[string]struct {
				Index string `json:"_index"`
				ID    string `json:"_id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				continue
			}
			for action, m := range a {
				if action == "index" {
					sc.Scan() // the source
				}
				item, ok := items[m.ID]
				if !ok {
					item = `"status":201,"result":"created","_version":1`
				}
				out = append(out, fmt.Sprintf(`{%q:{"_index":%q,"_id":%q,%s}}`, action, m.Index, m.ID, item))
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"took":1,"errors":true,"items":[%s]}`, strings.Join(out, ","))
	}))
	tb.Cleanup(srv.Close)
	c, err := es.New(es.Config{URLs: []string{srv.URL}})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestBulk_Handler_ItemOutcomes(t *testing.T) {
	const conflict = `"status":409,"error":{"type":"version_conflict_engine_exception","reason":"[x]: version conflict, current version [9] is higher or equal to the one provided [4]"}`
	items := map[string]string{
		"ok":           `"status":200,"result":"updated","_version":4`,
		"conflict":     conflict,
		"not-found":    `"status":404,"result":"not_found","_version":4`,
		"no-index":     `"status":404,"error":{"type":"index_not_found_exception","reason":"no such index [orders]"}`,
		"no-index-up":  `"status":404,"error":{"type":"index_not_found_exception","reason":"no such index [orders]"}`,
		"rejected":     `"status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution"}`,
		"unavailable":  `"status":503,"error":{"type":"unavailable_shards_exception","reason":"[orders][0] primary shard is not active"}`,
		"mapping":      `"status":400,"error":{"type":"document_parsing_exception","reason":"failed to parse field [n]","caused_by":{"type":"illegal_argument_exception","reason":"For input string"}}`,
		"bad-name":     `"status":400,"error":{"type":"invalid_index_name_exception","reason":"Invalid index name [Orders], must be lowercase"}`,
		"other-409":    `"status":409,"error":{"type":"some_other_conflict","reason":"busy"}`,
		"forbidden":    `"status":403,"error":{"type":"security_exception","reason":"action [indices:data/write/bulk[s]] is unauthorized"}`,
		"index-404":    `"status":404,"result":"not_found","_version":4`,
		"conflict-del": conflict,
	}
	tests := []struct {
		name      string
		event     redisx.Event
		ok        bool
		permanent bool
		text      string
	}{
		{"2xx", upsertEvent("uuid-1", "ok", 4, `{}`), true, false, ""},
		{"version conflict on an upsert", upsertEvent("uuid-1", "conflict", 4, `{}`), true, false, ""},
		{"version conflict on a delete", deleteEvent("uuid-1", "conflict-del", 4), true, false, ""},
		{"delete found nothing", deleteEvent("uuid-1", "not-found", 4), true, false, ""},
		{"delete of an index that does not exist", deleteEvent("uuid-1", "no-index", 4), true, false, ""},
		{"item 429", upsertEvent("uuid-1", "rejected", 4, `{}`), false, false, "HTTP 429 es_rejected_execution_exception"},
		{"item 503", deleteEvent("uuid-1", "unavailable", 4), false, false, "HTTP 503 unavailable_shards_exception"},
		{"other 409", upsertEvent("uuid-1", "other-409", 4, `{}`), false, false, "some_other_conflict"},
		{"mapping error", upsertEvent("uuid-1", "mapping", 4, `{}`), false, true, "For input string"},
		{"invalid index name", upsertEvent("uuid-1", "bad-name", 4, `{}`), false, true, "must be lowercase"},
		{"403", upsertEvent("uuid-1", "forbidden", 4, `{}`), false, true, "security_exception"},
		{"404 not_found answering an index action", upsertEvent("uuid-1", "index-404", 4, `{}`), false, true, "not_found"},
		{"upsert into an index that does not exist", upsertEvent("uuid-1", "no-index-up", 4, `{}`), false, true, "index_not_found_exception"},
	}
	env := newBulkEnvFor(t, nil, cannedBulkItems(t, items), nil)
	var events []redisx.Event
	for _, tt := range tests {
		events = append(events, tt.event)
	}
	errs := handleAll(env.h, events) // batched together, in any order
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := errs[i]
			if tt.ok {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || redisx.IsPermanent(err) != tt.permanent || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v (permanent %v); want permanent %v, saying %q", err, redisx.IsPermanent(err), tt.permanent, tt.text)
			}
			if !strings.Contains(err.Error(), tt.event.ID) || !strings.Contains(err.Error(), tt.event.StreamID) {
				t.Errorf("err %q does not name the document and event", err)
			}
		})
	}
	st := env.sink.Stats()
	if st.Applied != 3 || st.Conflicts != 2 || st.Failed != 8 {
		t.Errorf("Stats = %+v; want 3 applied, 2 conflicts, 8 failed", st)
	}
}

func TestBulk_Handler_Generations(t *testing.T) {
	t.Run("missing generation is retryable, then found", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		e := upsertEvent("uuid-new", "a", 1, `{}`)
		err := env.h(context.Background(), e)
		if !errors.Is(err, sink.ErrNoGeneration) || redisx.IsPermanent(err) {
			t.Fatalf("err = %v; want a retryable ErrNoGeneration", err)
		}
		if got := env.bulkRequests(); got != 0 {
			t.Errorf("%d requests for an event without generation", got)
		}
		env.setGeneration(t, "uuid-new", 3)
		env.setIndex(t, "uuid-new", env.sourceLayout(t, 1))
		env.handle(t, e)
		if d := getDoc(t, env.target, "orders", "a", ""); d.Version != mustVersion(t, 3, 1, false) {
			t.Errorf("doc = %+v, want generation 3's version", d)
		}
	})
	t.Run("cached per uuid", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.handle(t, upsertEvent("uuid-1", "a", 1, `{}`))
		if err := env.rdb.Del(context.Background(), env.keys.Generations()).Err(); err != nil {
			t.Fatal(err)
		}
		env.handle(t, upsertEvent("uuid-1", "a", 2, `{}`))
	})
	t.Run("bad values", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.rdb.HSet(context.Background(), env.keys.Generations(), "uuid-junk", "x", "uuid-huge", int64(sink.BulkMaxGeneration)+1)
		if err := env.h(context.Background(), upsertEvent("uuid-junk", "a", 1, `{}`)); !errors.Is(err, sink.ErrNoGeneration) || redisx.IsPermanent(err) {
			t.Errorf("junk generation: err = %v; want a retryable ErrNoGeneration", err)
		}
		if err := env.h(context.Background(), upsertEvent("uuid-huge", "a", 1, `{}`)); !redisx.IsPermanent(err) || !strings.Contains(err.Error(), "highest generation") {
			t.Errorf("generation above the maximum: err = %v; want a permanent error", err)
		}
	})
	t.Run("redis down is retryable", func(t *testing.T) {
		target, err := esemu.New(esemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { target.Close() })
		client, _ := es.New(es.Config{URLs: []string{target.URL()}})
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		s, err := sink.NewBulk(sink.BulkConfig{ES: client, Redis: rdb, Keys: redisx.NewKeys("down")})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		srv.Stop()
		err = s.Handler()(context.Background(), upsertEvent("uuid-1", "a", 1, `{}`))
		if err == nil || redisx.IsPermanent(err) {
			t.Errorf("err = %v; want a retryable error", err)
		}
	})
}

func TestBulk_Handler_BadEvents(t *testing.T) {
	tooHigh := upsertEvent("uuid-1", "a", sink.BulkMaxSeqNo+1, `{}`)
	noID := upsertEvent("uuid-1", "", 1, `{}`)
	noUUID := deleteEvent("", "a", 1)
	notJSON := upsertEvent("uuid-1", "a", 1, `{"a":`)
	noSource := upsertEvent("uuid-1", "a", 1, ``)
	tests := []struct {
		name  string
		event redisx.Event
		text  string
	}{
		{"seq no at 2^40", tooHigh, "40 bits"},
		{"negative seq no", deleteEvent("uuid-1", "a", -1), "outside 0.."},
		{"no id", noID, "without index, index_uuid or id"},
		{"no uuid", noUUID, "without index, index_uuid or id"},
		{"source not JSON", notJSON, "source is not JSON"},
		{"upsert without source", noSource, "source is not JSON"},
		{"unknown op", redisx.Event{Op: "truncate", Index: "orders"}, `unknown op "truncate"`},
	}
	env := newBulkEnv(t, "", nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := env.h(context.Background(), tt.event)
			if !redisx.IsPermanent(err) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v; want a permanent error saying %q", err, tt.text)
			}
		})
	}
	if got := env.bulkRequests(); got != 0 {
		t.Errorf("bad events sent %d requests", got)
	}
	if got := env.sink.Stats().Failed; got != int64(len(tests)) {
		t.Errorf("Failed = %d, want %d", got, len(tests))
	}
}

func TestBulk_Handler_IgnoresIndexAndSnapshotEvents(t *testing.T) {
	env := newBulkEnv(t, "", nil)
	for _, e := range []redisx.Event{
		{Op: redisx.OpIndexDeleted, Index: "orders", IndexUUID: "uuid-1"},
		{Op: redisx.OpSnapshotStart, Target: "orders"},
		{Op: redisx.OpSnapshotEnd, Target: "orders", Counts: map[string]int64{"orders": 3}},
	} {
		if err := env.h(context.Background(), e); err != nil {
			t.Errorf("%s: %v", e.Op, err)
		}
	}
	if got := env.bulkRequests(); got != 0 {
		t.Errorf("%d requests", got)
	}
	if st := env.sink.Stats(); st != (sink.BulkStats{}) {
		t.Errorf("Stats = %+v", st)
	}
}

func TestBulk_Close(t *testing.T) {
	t.Run("sends the batch being formed", func(t *testing.T) {
		env := newBulkEnv(t, "", func(c *sink.BulkConfig) { c.MaxWait = time.Minute })
		joined := make(chan struct{}, 1)
		sink.SetBulkJoined(env.sink, func() { joined <- struct{}{} })
		errc := make(chan error, 1)
		go func() { errc <- env.h(context.Background(), upsertEvent("uuid-1", "a", 1, `{}`)) }()
		select {
		case <-joined: // the event is in a batch that waits for MaxWait
		case err := <-errc:
			t.Fatalf("handler returned %v before its event joined a batch", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the event joined no batch within 30s")
		}
		start := time.Now()
		if err := env.sink.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close waited %s for MaxWait", d)
		}
		if err := <-errc; err != nil {
			t.Fatalf("handler: %v; want the batch it joined sent by Close", err)
		}
		if !getDoc(t, env.target, "orders", "a", "").Found {
			t.Errorf("the batch formed before Close was not sent")
		}
	})
	t.Run("handler context ends while waiting", func(t *testing.T) {
		env := newBulkEnv(t, "", func(c *sink.BulkConfig) { c.MaxWait = time.Minute })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := env.h(ctx, upsertEvent("uuid-1", "a", 1, `{}`)); !errors.Is(err, context.DeadlineExceeded) || redisx.IsPermanent(err) {
			t.Fatalf("err = %v; want a retryable DeadlineExceeded", err)
		}
	})
}

func TestBulkConfig_Validate(t *testing.T) {
	client, _ := es.New(es.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	good := sink.BulkConfig{ES: client, Redis: rdb, Keys: redisx.NewKeys("f")}
	tests := []struct {
		name string
		mod  func(*sink.BulkConfig)
		text string // "" = valid
	}{
		{"defaults", func(*sink.BulkConfig) {}, ""},
		{"template with both placeholders", func(c *sink.BulkConfig) { c.IndexTemplate = "mirror-{index}-{index_uuid}" }, ""},
		{"constant template", func(c *sink.BulkConfig) { c.IndexTemplate = "all-docs" }, ""},
		{"no ES", func(c *sink.BulkConfig) { c.ES = nil }, "ES is nil"},
		{"no Redis", func(c *sink.BulkConfig) { c.Redis = nil }, "Redis is nil"},
		{"no keys", func(c *sink.BulkConfig) { c.Keys = redisx.Keys{} }, "Keys is empty"},
		{"negative MaxBatch", func(c *sink.BulkConfig) { c.MaxBatch = -1 }, "MaxBatch = -1"},
		{"negative MaxWait", func(c *sink.BulkConfig) { c.MaxWait = -time.Second }, "MaxWait = -1s"},
		{"negative MaxBytes", func(c *sink.BulkConfig) { c.MaxBytes = -1 }, "MaxBytes = -1"},
		{"negative Partitions", func(c *sink.BulkConfig) { c.Partitions = -1 }, "Partitions = -1"},
		{"too many Partitions", func(c *sink.BulkConfig) { c.Partitions = redisx.MaxPartitions + 1 }, "Partitions = 1025"},
		{"negative TombstoneKeep", func(c *sink.BulkConfig) { c.TombstoneKeep = -time.Second }, "TombstoneKeep = -1s"},
		{"unknown placeholders", func(c *sink.BulkConfig) { c.IndexTemplate = "{index}-{shard}-{date}" }, "unknown placeholder {shard}, {date}"},
		{"unclosed brace", func(c *sink.BulkConfig) { c.IndexTemplate = "{index" }, "'{' without '}'"},
		{"stray brace", func(c *sink.BulkConfig) { c.IndexTemplate = "index}" }, "'}' without '{'"},
		{"uppercase", func(c *sink.BulkConfig) { c.IndexTemplate = "Mirror-{index}" }, `'M' cannot be part of an index name`},
		{"leading underscore", func(c *sink.BulkConfig) { c.IndexTemplate = "_{index}" }, "cannot start with"},
		{"uuid first", func(c *sink.BulkConfig) { c.IndexTemplate = "{index_uuid}-{index}" }, "starts with {index_uuid}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mod(&cfg)
			err := cfg.Validate()
			if tt.text == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Validate = %v; want an error saying %q", err, tt.text)
			}
			if _, err := sink.NewBulk(cfg); err == nil {
				t.Errorf("NewBulk accepted the config")
			}
		})
	}
}
