package bootstrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// mirrorDocs reads a target index: _id/routing -> source ("" for none).
func mirrorDocs(tb testing.TB, url, index string) map[string]string {
	tb.Helper()
	st, _, err := tryDo("HEAD", url+"/"+index, "")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	if st == 404 {
		return out
	}
	mustDo(tb, "POST", url+"/"+index+"/_refresh", "")
	var r struct {
		Hits struct {
			Hits []struct {
				ID      string          `json:"_id"`
				Routing string          `json:"_routing"`
				Source  json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(mustDo(tb, "POST", url+"/"+index+"/_search", `{"size":10000,"query":{"match_all":{}}}`), &r); err != nil {
		tb.Fatal(err)
	}
	for _, h := range r.Hits.Hits {
		out[h.ID+"/"+h.Routing] = compact(h.Source)
	}
	return out
}

func sourceDocs(tb testing.TB, url, index string) map[string]string {
	out := map[string]string{}
	for k, d := range clusterDocs(tb, url, index) {
		out[k.id+"/"+d.routing] = d.source
	}
	return out
}

func diffMaps(want, got map[string]string) string {
	var lines []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			lines = append(lines, "missing "+k)
		} else if g != w {
			lines = append(lines, fmt.Sprintf("differs %s: %s, want %s", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, "extra "+k)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestCopy_ReconcilesTheBulkMirror: a mirror that stopped consuming while
// documents were deleted, updated and created and indices were deleted and
// created again is, after the copy into it, the source: what the source
// lacks is deleted — except documents of an older index whose new index has
// an empty shard, which no delete can be ordered for: they are kept and
// counted.
func TestCopy_ReconcilesTheBulkMirror(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{emu: esemu.Config{Nodes: 2}, targets: []string{"orders", "logs-*"}, deletes: true})
	target, err := esemu.New(esemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	tc, err := es.New(es.Config{URLs: []string{target.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	bulk, err := sink.NewBulk(sink.BulkConfig{ES: tc, Redis: r.rdb, Keys: r.keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bulk.Close(context.Background()) })

	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`)
	r.do(t, "PUT", "/logs-b", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	r.do(t, "PUT", "/logs-c", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	seed(t, r, "orders", 40)
	seed(t, r, "logs-b", 10)
	seed(t, r, "logs-c", 3)
	r.waitCaughtUp(t, "orders", "logs-b", "logs-c")
	// The mirror as a consumer left it.
	for _, e := range r.after(t, "0-0") {
		if err := bulk.Handler()(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	for _, ix := range []string{"orders", "logs-b", "logs-c"} {
		if d := diffMaps(sourceDocs(t, r.url, ix), mirrorDocs(t, target.URL(), ix)); d != "" {
			t.Fatalf("the mirror of %s before the gap:\n%s", ix, d)
		}
	}
	// While it is away (and the stream is trimmed): deletes, updates, new
	// documents, logs-b created again with fewer documents, logs-c created
	// again empty on two shards.
	for i := 1; i <= 5; i++ {
		r.do(t, "DELETE", docPath("orders", i), "")
	}
	for i := 6; i <= 10; i++ {
		r.do(t, "PUT", docPath("orders", i), `{"updated":true}`)
	}
	r.do(t, "PUT", "/orders/_doc/new-1", `{"new":true}`)
	r.do(t, "DELETE", "/logs-b", "")
	r.do(t, "PUT", "/logs-b", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	for i := 0; i < 5; i++ {
		r.do(t, "PUT", fmt.Sprintf("/logs-b/_doc/%d", i), `{"again":true}`)
	}
	r.do(t, "DELETE", "/logs-c", "")
	r.do(t, "PUT", "/logs-c", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	r.waitCaughtUp(t, "orders", "logs-b", "logs-c")
	r.waitAdopted(t, "logs-c")
	pos := r.position(t)
	if err := r.rdb.XTrimMaxLen(context.Background(), r.keys.Events(), 0).Err(); err != nil {
		t.Fatal(err)
	}

	res, err := bootstrap.Copy(context.Background(), newCopy(r, &collector{}, func(cfg *bootstrap.Config) {
		cfg.Handler = bulk.Handler()
		cfg.Reconciler = bulk
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.after(t, pos) {
		if err := bulk.Handler()(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	for _, ix := range []string{"orders", "logs-b"} {
		if d := diffMaps(sourceDocs(t, r.url, ix), mirrorDocs(t, target.URL(), ix)); d != "" {
			t.Errorf("the mirror of %s after the copy:\n%s", ix, d)
		}
	}
	if got := mirrorDocs(t, target.URL(), "logs-c"); len(got) != 3 {
		t.Errorf("the mirror of logs-c holds %v: want the 3 documents of the old index, kept", got)
	}
	got := fmt.Sprintf("removed %v kept %v", res.Removed, res.Kept)
	if want := "removed map[logs-b:5 logs-c:0 orders:5] kept map[logs-b:0 logs-c:3 orders:0]"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

// fakeSink holds what a test says and can act when it is listed.
type fakeSink struct {
	held   []sink.HeldDoc
	listed func()
}

func (f *fakeSink) Reconcilable() error { return nil }

func (f *fakeSink) Held(_ context.Context, index, uuid string, pageSize int, fn func([]sink.HeldDoc) error) (int64, error) {
	if f.listed != nil {
		f.listed()
	}
	return int64(len(f.held)), fn(f.held)
}

// TestCopy_ReconcileStamps: the deletes of the reconciliation remove
// exactly the version held (a document of this index at its seq no), a
// document of an older index at the lowest global checkpoint, and never a
// document that exists again by the time it is checked.
func TestCopy_ReconcileStamps(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{targets: []string{"orders"}})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	seed(t, r, "orders", 20)
	r.waitCaughtUp(t, "orders")
	shardOf0 := -1
	for k := range clusterDocs(t, r.url, "orders") {
		if k.id == "0" {
			shardOf0 = k.shard
		}
	}
	var once sync.Once
	fs := &fakeSink{
		held: []sink.HeldDoc{
			{ID: "0", Routing: "r0", Shard: -1, SeqNo: 0},         // in the copy
			{ID: "gone", Shard: -1, SeqNo: 3},                     // deleted in the gap
			{ID: "gone-routed", Routing: "x", Shard: 1, SeqNo: 7}, // deleted, custom routing
			{ID: "old", Shard: -1, SeqNo: 900, Older: true},       // of an older index
			{ID: "late", Shard: -1, SeqNo: 1},                     // created after the views
			{ID: "1", Routing: "elsewhere", Shard: -1, SeqNo: 2},  // the id lives on with another routing
			{ID: "0", Shard: shardOf0, SeqNo: 0},                  // known by its shard, not its routing: in the copy
			{ID: "0", Shard: 1 - shardOf0, SeqNo: 5},              // the same id on the other shard: gone
		},
		listed: func() { once.Do(func() { r.do(t, "PUT", "/orders/_doc/late?refresh=true", `{"late":true}`) }) },
	}
	c := &collector{}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) { cfg.Reconciler = fs }))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := r.es.Stats(context.Background(), []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	minGCP := stats["orders"].Shards[0].GlobalCheckpoint
	for _, sc := range stats["orders"].Shards {
		minGCP = min(minGCP, sc.GlobalCheckpoint)
	}
	var got []string
	var endAfter bool
	for _, e := range c.events() {
		switch e.Op {
		case redisx.OpDelete:
			got = append(got, fmt.Sprintf("%s/%s shard %d seq %d", e.ID, e.Routing, e.Shard, e.SeqNo))
			endAfter = false
		case redisx.OpSnapshotEnd:
			endAfter = true
		}
	}
	sort.Strings(got)
	want := []string{
		fmt.Sprintf("0/ shard %d seq 5", 1-shardOf0),
		"1/elsewhere shard -1 seq 2",
		"gone-routed/x shard 1 seq 7",
		"gone/ shard -1 seq 3",
		fmt.Sprintf("old/ shard -1 seq %d", minGCP),
	}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) || !endAfter {
		t.Fatalf("deletes %q (snapshot_end after them: %v)\nwant %q", got, endAfter, want)
	}
	if res.Removed["orders"] != 5 || res.Kept["orders"] != 0 {
		t.Fatalf("result %+v, want 5 removed", res)
	}
}
