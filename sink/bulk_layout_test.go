package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// layoutOf is a layout with the fields the placement depends on.
func layoutOf(engine string, created int64, shards, routingShards, partition int) *checkpoint.IndexLayout {
	return &checkpoint.IndexLayout{Engine: engine, VersionCreated: created, Shards: shards, RoutingShards: routingShards, RoutingPartitionSize: partition}
}

// Index versions of the engines' new indices (the emulator's flavors, and
// what the real nodes of tests/engines report).
const (
	es8Created  = 8537000   // Elasticsearch 8.19
	es9Created  = 9111000   // Elasticsearch 9.5: routes by hash modulo shards
	es93Created = 9063000   // an index created before IndexVersions.MOD_ROUTING_FUNCTION
	os2Created  = 136408527 // OpenSearch 2.19
)

// TestSamePlacement: the decision whether a target makes the same
// documents of (id, routing) pairs as its source: the rules of
// Elasticsearch's IndexRouting/RoutingFunction and OpenSearch's
// OperationRouting, by layout. It covers Elasticsearch 8 → 9, which the
// engines harness runs in e2e only when both are started in one test.
func TestSamePlacement(t *testing.T) {
	withPath := layoutOf("elasticsearch", es8Created, 3, 768, 1)
	withPath.RoutingPath = []string{"host"}
	tests := []struct {
		name     string
		src, dst *checkpoint.IndexLayout
		want     bool
	}{
		{"same layout", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 3, 768, 1), true},
		{"Elasticsearch 8 and OpenSearch, same routing shards", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("opensearch", os2Created, 3, 768, 1), true},
		{"another shard count", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 2, 1024, 1), false},
		{"other routing shards", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 3, 384, 1), false},
		{"Elasticsearch 8 to 9.4+", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("elasticsearch", es9Created, 3, 768, 1), false},
		{"Elasticsearch 9.4+ to 8 with as many routing shards as shards", layoutOf("elasticsearch", es9Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 3, 3, 1), true},
		{"Elasticsearch 9.4+ to OpenSearch with the default routing shards", layoutOf("elasticsearch", es9Created, 3, 768, 1), layoutOf("opensearch", os2Created, 3, 768, 1), false},
		{"Elasticsearch 9.4+, routing shards ignored", layoutOf("elasticsearch", es9Created, 3, 768, 1), layoutOf("elasticsearch", es9Created, 3, 6, 1), true},
		{"Elasticsearch 9 index created before 9.4", layoutOf("elasticsearch", es93Created, 3, 768, 1), layoutOf("elasticsearch", es9Created, 3, 768, 1), false},
		{"OpenSearch index version above 9.4's is not modulo", layoutOf("opensearch", os2Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 3, 768, 1), true},
		{"one shard each, whatever else", layoutOf("elasticsearch", es9Created, 1, 1, 1), layoutOf("opensearch", os2Created, 1, 1024, 4), true},
		{"one shard to three", layoutOf("elasticsearch", es8Created, 1, 1024, 1), layoutOf("elasticsearch", es8Created, 3, 768, 1), false},
		{"three shards to one", layoutOf("elasticsearch", es8Created, 3, 768, 1), layoutOf("elasticsearch", es8Created, 1, 1024, 1), false},
		{"partition size differs", layoutOf("opensearch", os2Created, 4, 8, 2), layoutOf("opensearch", os2Created, 4, 8, 1), false},
		{"partition size 0 and 1 are the same", layoutOf("opensearch", os2Created, 4, 8, 0), layoutOf("opensearch", os2Created, 4, 8, 1), true},
		{"source placed by routing_path", withPath, layoutOf("elasticsearch", es8Created, 3, 768, 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sink.SamePlacement(tt.src, tt.dst); got != tt.want {
				t.Errorf("SamePlacement = %v, want %v", got, tt.want)
			}
		})
	}
}

// probeSource creates a source index on an emulator of the flavor and
// returns its layout and the shard each routing value puts a document on.
func probeSource(tb testing.TB, flavor esemu.Flavor, shards int, routings []string) (*checkpoint.IndexLayout, map[string]int) {
	tb.Helper()
	c, err := esemu.New(esemu.Config{Flavor: flavor})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	emuDo(tb, c, http.MethodPut, "/src", fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":0},"mappings":{"properties":{"n":{"type":"long"}}}}`, shards))
	for _, r := range routings {
		emuDo(tb, c, http.MethodPut, "/src/_doc/probe?routing="+r, `{"n":0}`)
	}
	shardOf := map[string]int{}
	for s := range shards {
		ops, err := c.History("src", s, 0)
		if err != nil {
			tb.Fatal(err)
		}
		for _, o := range ops {
			shardOf[o.Routing] = s
		}
	}
	client, err := es.New(es.Config{URLs: []string{c.URL()}})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := client.IndexLayout(context.Background(), "src")
	if err != nil {
		tb.Fatal(err)
	}
	return &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
		Engine: l.Engine, EngineVersion: l.EngineVersion, VersionCreated: l.VersionCreated, Mappings: l.Mappings}, shardOf
}

func emuDo(tb testing.TB, c *esemu.Cluster, method, path, body string) []byte {
	tb.Helper()
	req, _ := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		tb.Fatalf("%s %s: HTTP %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

// twoRoutings are two routing values the source puts on different shards.
func twoRoutings(tb testing.TB, shardOf map[string]int) (string, string) {
	tb.Helper()
	for a, sa := range shardOf {
		for b, sb := range shardOf {
			if sa != sb {
				return a, b
			}
		}
	}
	tb.Fatalf("no two routing values on different shards: %v", shardOf)
	return "", ""
}

var routingCandidates = []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"}

// routedEvents are 40 ids each under routings a and b (80 source
// documents: the two routings are on different shards), then 5 ids
// without routing, as the relay emits them.
func routedEvents(shardOf map[string]int, a, b string, unroutedShard func(string) int) []redisx.Event {
	var out []redisx.Event
	seq := map[int]int64{}
	add := func(id, routing string, shard int) {
		e := upsertEvent("uuid-1", id, seq[shard], fmt.Sprintf(`{"n":%d,"routing":%q}`, seq[shard], routing))
		e.Shard, e.Routing = shard, routing
		seq[shard]++
		out = append(out, e)
	}
	for i := range 40 {
		add(fmt.Sprintf("d%d", i), a, shardOf[a])
		add(fmt.Sprintf("d%d", i), b, shardOf[b])
	}
	for i := range 5 {
		id := fmt.Sprintf("plain%d", i)
		add(id, "", unroutedShard(id))
	}
	return out
}

// targetCount is how many documents the target index holds.
func targetCount(tb testing.TB, c *esemu.Cluster, index string) int {
	tb.Helper()
	emuDo(tb, c, http.MethodPost, "/"+index+"/_refresh", "")
	var r struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(emuDo(tb, c, http.MethodGet, "/"+index+"/_count", ""), &r); err != nil {
		tb.Fatal(err)
	}
	return r.Count
}

// mirrored counts the events whose document the target holds with the
// event's source (read by id and routing).
func mirrored(tb testing.TB, c *esemu.Cluster, index string, events []redisx.Event) (routed, plain int) {
	tb.Helper()
	for _, e := range events {
		d := getDoc(tb, c, index, e.ID, e.Routing)
		if !d.Found || string(d.Source) != string(e.Source) {
			continue
		}
		if e.Routing != "" {
			routed++
		} else {
			plain++
		}
	}
	return routed, plain
}

// TestBulk_Layout_MissingTargetCreatedExact: from a 3-shard source with
// ids under two routings (80 documents) into a target that does not exist,
// on every flavor: the sink creates the target with the source's shards,
// routing shards and mappings, and the mirror holds all 80 documents (with
// cluster defaults, 1 shard, it held 40).
func TestBulk_Layout_MissingTargetCreatedExact(t *testing.T) {
	for _, flavor := range []esemu.Flavor{esemu.FlavorES7, esemu.FlavorES8, esemu.FlavorES9, esemu.FlavorOpenSearch2, esemu.FlavorOpenSearch3} {
		t.Run(string(flavor), func(t *testing.T) {
			src, shardOf := probeSource(t, flavor, 3, routingCandidates)
			a, b := twoRoutings(t, shardOf)
			env := newBulkEnv(t, flavor, nil)
			env.setIndex(t, "uuid-1", src)
			events := routedEvents(shardOf, a, b, func(string) int { return 0 })
			for i, err := range handleAll(env.h, events) { // concurrently: one creation
				if err != nil {
					t.Fatalf("event %d (%s routing %q): %v", i, events[i].ID, events[i].Routing, err)
				}
			}
			if got := targetCount(t, env.target, "orders"); got != 85 {
				t.Errorf("target holds %d documents; want 85 (80 routed, 5 without routing)", got)
			}
			if routed, plain := mirrored(t, env.target, "orders", events); routed != 80 || plain != 5 {
				t.Errorf("target holds %d routed and %d plain documents as the source; want 80 and 5", routed, plain)
			}
			client, _ := es.New(es.Config{URLs: []string{env.target.URL()}})
			l, err := client.IndexLayout(context.Background(), "orders")
			if err != nil {
				t.Fatal(err)
			}
			dst := &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
				Engine: l.Engine, VersionCreated: l.VersionCreated}
			if l.Shards != 3 || !sink.SamePlacement(src, dst) || !strings.Contains(string(l.Mappings), `"n":{"type":"long"}`) {
				t.Errorf("target layout %+v; want 3 shards placed as the source's (%+v), the source's mappings", l, src)
			}
		})
	}
}

// TestBulk_Layout_ExistingTargetRefusesRoutedEvents: a target that exists
// with another shard count gets the events without routing; those with
// routing are refused, permanently, with a *BulkLayoutError naming both
// layouts, and none of them reaches the target.
func TestBulk_Layout_ExistingTargetRefusesRoutedEvents(t *testing.T) {
	src, shardOf := probeSource(t, esemu.FlavorES8, 3, routingCandidates)
	a, b := twoRoutings(t, shardOf)
	env := newBulkEnv(t, esemu.FlavorES8, nil)
	env.setIndex(t, "uuid-1", src)
	createIndex(t, env.target, "orders", 2)
	events := routedEvents(shardOf, a, b, func(string) int { return 0 })
	errs := handleAll(env.h, events)
	for i, e := range events {
		err := errs[i]
		if e.Routing == "" {
			if err != nil {
				t.Errorf("%s without routing: %v", e.ID, err)
			}
			continue
		}
		var le *sink.BulkLayoutError
		if !redisx.IsPermanent(err) || !errors.Is(err, sink.ErrLayoutMismatch) || !errors.As(err, &le) {
			t.Fatalf("%s routing %s: err = %v; want a permanent *BulkLayoutError wrapping ErrLayoutMismatch", e.ID, e.Routing, err)
		}
		if !strings.Contains(le.Source, "3 shards") || !strings.Contains(le.TargetLayout, "2 shards") || !strings.Contains(le.Fix, `"index.number_of_shards":3`) {
			t.Fatalf("%+v: want both layouts and the settings that fix it", le)
		}
	}
	if routed, plain := mirrored(t, env.target, "orders", events); routed != 0 || plain != 5 {
		t.Errorf("target holds %d routed and %d plain documents; want 0 and 5", routed, plain)
	}
	if got := targetCount(t, env.target, "orders"); got != 5 {
		t.Errorf("target holds %d documents; want the 5 without routing", got)
	}
	if st := env.sink.Stats(); st.Failed != 80 || st.Applied != 5 {
		t.Errorf("Stats = %+v; want 80 failed, 5 applied", st)
	}
}

// TestBulk_Layout_AcrossVersions: Elasticsearch 9.4+ routes the indices it
// creates by hash modulo shards. From an Elasticsearch 8 source into a
// target the sink creates on Elasticsearch 9, no layout can match: routed
// events are refused, saying so; the other way round the sink creates the
// Elasticsearch 8 target with as many routing shards as shards, which
// routes as 9.4+ does, and the mirror is exact.
func TestBulk_Layout_AcrossVersions(t *testing.T) {
	t.Run("8 to 9: refused", func(t *testing.T) {
		src, shardOf := probeSource(t, esemu.FlavorES8, 3, routingCandidates)
		a, b := twoRoutings(t, shardOf)
		env := newBulkEnv(t, esemu.FlavorES9, nil)
		env.setIndex(t, "uuid-1", src)
		events := routedEvents(shardOf, a, b, func(string) int { return 0 })
		errs := handleAll(env.h, events)
		for i, e := range events {
			var le *sink.BulkLayoutError
			switch {
			case e.Routing == "" && errs[i] != nil:
				t.Errorf("%s without routing: %v", e.ID, errs[i])
			case e.Routing != "" && (!errors.As(errs[i], &le) || !redisx.IsPermanent(errs[i]) || !strings.Contains(le.Fix, "Elasticsearch 9.4+")):
				t.Fatalf("%s routing %s: err = %v; want a permanent *BulkLayoutError explaining 9.4+ routing", e.ID, e.Routing, errs[i])
			}
		}
		if routed, plain := mirrored(t, env.target, "orders", events); routed != 0 || plain != 5 {
			t.Errorf("target holds %d routed and %d plain documents; want 0 and 5", routed, plain)
		}
	})
	t.Run("9 to 8: exact", func(t *testing.T) {
		src, shardOf := probeSource(t, esemu.FlavorES9, 3, routingCandidates)
		a, b := twoRoutings(t, shardOf)
		env := newBulkEnv(t, esemu.FlavorES8, nil)
		env.setIndex(t, "uuid-1", src)
		events := routedEvents(shardOf, a, b, func(string) int { return 0 })
		for i, err := range handleAll(env.h, events) {
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
		if routed, plain := mirrored(t, env.target, "orders", events); routed != 80 || plain != 5 || targetCount(t, env.target, "orders") != 85 {
			t.Errorf("target holds %d routed and %d plain documents as the source; want 80 and 5", routed, plain)
		}
	})
}

// TestBulk_Layout_NotRecorded: an index the feed has no layout for (a
// relay before layouts): events without routing are mirrored as before;
// those with routing are refused (ErrNoLayout), unless the index and the
// target have one shard each.
func TestBulk_Layout_NotRecorded(t *testing.T) {
	t.Run("three shards", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.setIndex(t, "uuid-1", nil)
		old, _ := json.Marshal(checkpoint.IndexInfo{Name: "orders", Target: "orders", Shards: 3})
		env.rdb.HSet(context.Background(), env.keys.Indices(), "uuid-1", old)
		plain := upsertEvent("uuid-1", "p", 1, `{"n":1}`)
		routed := upsertEvent("uuid-1", "r", 2, `{"n":2}`)
		routed.Routing = "x"
		env.handle(t, plain)
		err := env.h(context.Background(), routed)
		if !errors.Is(err, sink.ErrNoLayout) || !redisx.IsPermanent(err) {
			t.Fatalf("routed: err = %v; want a permanent ErrNoLayout", err)
		}
		if !getDoc(t, env.target, "orders", "p", "").Found || getDoc(t, env.target, "orders", "r", "x").Found {
			t.Errorf("want p mirrored and r not")
		}
	})
	t.Run("no record at all", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.rdb.HDel(context.Background(), env.keys.Indices(), "uuid-1")
		routed := upsertEvent("uuid-1", "r", 2, `{"n":2}`)
		routed.Routing = "x"
		env.handle(t, upsertEvent("uuid-1", "p", 1, `{"n":1}`))
		if err := env.h(context.Background(), routed); !errors.Is(err, sink.ErrNoLayout) || !redisx.IsPermanent(err) {
			t.Fatalf("routed: err = %v; want a permanent ErrNoLayout", err)
		}
	})
	t.Run("one shard each", func(t *testing.T) {
		env := newBulkEnv(t, "", nil)
		env.setIndex(t, "uuid-1", nil) // Shards 1
		createIndex(t, env.target, "orders", 1)
		routed := upsertEvent("uuid-1", "r", 2, `{"n":2}`)
		routed.Routing = "x"
		env.handle(t, routed)
		if !getDoc(t, env.target, "orders", "r", "x").Found {
			t.Error("r not mirrored")
		}
	})
}
