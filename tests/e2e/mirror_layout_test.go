package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// routedSource fills index (3 shards) of c with 40 ids under each of two
// routing values that c puts on different shards (80 documents), and 5
// ids without routing, and returns the 85 (id, routing) pairs with their
// sources.
func routedSource(tb testing.TB, c testCluster, index string) map[[2]string]string {
	tb.Helper()
	probe := index + "-probe"
	createIndex(tb, c, index, 3, 0)
	createIndex(tb, c, probe, 3, 0)
	shardOf := map[int]string{}
	for i := 0; len(shardOf) < 2 && i < 50; i++ {
		r := fmt.Sprintf("r%d", i)
		mustDo(tb, "PUT", c.URL()+"/"+probe+"/_doc/p-"+r+"?routing="+r+"&refresh=true", `{}`)
		for k, d := range clusterDocs(tb, c, probe) {
			if _, ok := shardOf[k.shard]; !ok && d.routing == r {
				shardOf[k.shard] = r
			}
		}
	}
	if len(shardOf) < 2 {
		tb.Fatalf("no two routing values on different shards of %s", probe)
	}
	var routings []string
	for _, r := range shardOf {
		routings = append(routings, r)
	}
	want := map[[2]string]string{}
	var b strings.Builder
	add := func(id, routing string) {
		meta := map[string]any{"_id": id}
		if routing != "" {
			meta["routing"] = routing
		}
		m, _ := json.Marshal(map[string]any{"index": meta})
		src := fmt.Sprintf(`{"id":%q,"routing":%q}`, id, routing)
		b.Write(m)
		b.WriteString("\n" + src + "\n")
		want[[2]string{id, routing}] = src
	}
	for i := range 40 {
		add(fmt.Sprintf("d%d", i), routings[0])
		add(fmt.Sprintf("d%d", i), routings[1])
	}
	for i := range 5 {
		add(fmt.Sprintf("plain%d", i), "")
	}
	out := mustDo(tb, "POST", c.URL()+"/"+index+"/_bulk?refresh=true", b.String())
	if strings.Contains(string(out), `"errors":true`) {
		tb.Fatalf("bulk into %s: %s", index, out)
	}
	if n := len(clusterDocs(tb, c, index)); n != 85 {
		tb.Fatalf("the source holds %d documents, want 85", n)
	}
	return want
}

// mirrorHolds counts the (id, routing) pairs of want the target index
// holds with the source's _source, routed and not (GET by id and routing),
// and the target's document count.
func mirrorHolds(tb testing.TB, dst backend, index string, want map[[2]string]string) (routed, plain, total int) {
	tb.Helper()
	mustDo(tb, "POST", dst.URL()+"/"+index+"/_refresh", "")
	for k, src := range want {
		u := dst.URL() + "/" + index + "/_doc/" + url.PathEscape(k[0])
		if k[1] != "" {
			u += "?routing=" + url.QueryEscape(k[1])
		}
		st, b := httpDo(tb, "GET", u, "")
		if st != 200 {
			continue
		}
		var d struct {
			Source json.RawMessage `json:"_source"`
		}
		if json.Unmarshal(b, &d) != nil || compact(d.Source) != src {
			continue
		}
		if k[1] != "" {
			routed++
		} else {
			plain++
		}
	}
	var cnt struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", dst.URL()+"/"+index+"/_count", ""), &cnt); err != nil {
		tb.Fatal(err)
	}
	return routed, plain, cnt.Count
}

// deadOf counts the dead letters of a group.
func deadOf(tb testing.TB, rdb *redis.Client, keys redisx.Keys, group string) int {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), keys.Dead(), "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if m.Values["group"] == group {
			n++
		}
	}
	return n
}

// TestMirror_Routing: a 3-shard source with 40 ids under two routings (80
// documents, on two shards) and 5 without routing, mirrored by `consume
// --sink bulk`, on the emulator and on every engine of ESCF_TEST_ENGINE:
//   - into a target that does not exist: the sink creates it with the
//     source's layout, and the mirror holds all 85 documents (with the
//     cluster's defaults, one shard, it held 45: two routings of one _id
//     became one document);
//   - into a target that exists with another shard count: the 5 without
//     routing are mirrored, the 80 routed ones refused and dead-lettered,
//     and none of them reaches the target.
func TestMirror_Routing(t *testing.T) {
	src := esCluster(t, esemu.Config{})
	dst := mirrorTarget(t, src, esemu.Config{})
	ix := src.Index("routed")
	want := routedSource(t, src, ix)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startRelay(t, src, srv.URL(), "routing", []string{ix}, nil)
	waitCaughtUp(t, src, f.store, []string{ix}, 30*time.Second)

	t.Run("target missing: created, exact", func(t *testing.T) {
		c := startBinary(t, consumeArgs(srv.URL(), "routing", "exact", "c1", dst.URL())...)
		waitGroupDone(t, rdb, f.keys.Events(), "exact", 60*time.Second)
		routed, plain, total := mirrorHolds(t, dst, ix, want)
		if routed != 80 || plain != 5 || total != 85 {
			t.Fatalf("the mirror holds %d routed and %d plain documents as the source, %d in all; want 80, 5, 85\n%s", routed, plain, total, tail(c.out.String(), 20))
		}
		if n := deadOf(t, rdb, f.keys, "exact"); n != 0 {
			t.Errorf("%d dead letters", n)
		}
		var st map[string]struct {
			Settings map[string]any `json:"settings"`
		}
		if err := json.Unmarshal(mustDo(t, "GET", dst.URL()+"/"+ix+"/_settings?flat_settings=true", ""), &st); err != nil {
			t.Fatal(err)
		}
		if n := fmt.Sprint(st[ix].Settings["index.number_of_shards"]); n != "3" {
			t.Errorf("the target has %s shards, want the source's 3", n)
		}
		c.kill()
	})
	t.Run("target with another shard count: routed events refused", func(t *testing.T) {
		two := ix + "-two"
		createIndex(t, dst, two, 2, 0)
		c := startBinary(t, append(consumeArgs(srv.URL(), "routing", "two", "c1", dst.URL()), "--bulk-index", "{index}-two")...)
		waitGroupDone(t, rdb, f.keys.Events(), "two", 60*time.Second)
		routed, plain, total := mirrorHolds(t, dst, two, want)
		if routed != 0 || plain != 5 || total != 5 {
			t.Fatalf("the target holds %d routed and %d plain documents, %d in all; want 0, 5, 5\n%s", routed, plain, total, tail(c.out.String(), 20))
		}
		if n := deadOf(t, rdb, f.keys, "two"); n != 80 {
			t.Errorf("%d dead letters of group two; want the 80 routed events", n)
		}
		c.kill()
	})
}

// versionCluster is a cluster of the flavor's engine line for a test
// about two of them: an emulator of the flavor on the emulator backend;
// with ESCF_TEST_ENGINE elasticsearch-8 or elasticsearch-9, the shared
// node when it is that engine, else a node of that engine started for the
// test. Other backends skip.
func versionCluster(tb testing.TB, flavor esemu.Flavor) testCluster {
	tb.Helper()
	want := string(flavor) // a flavor is named as its engine line
	switch name := testEngineName(); {
	case name == want:
		return esCluster(tb, esemu.Config{Flavor: flavor})
	case name == "elasticsearch-8" || name == "elasticsearch-9":
		c := engines.StartTB(tb, engines.Config{Engine: want})
		return &realCluster{realEnv: &realEnv{url: c.URL(), client: &http.Client{Timeout: time.Minute}, engine: c},
			prefix: fmt.Sprintf("escf-%s-%d-", runID, runSeq.Add(1))}
	case name != "":
		tb.Skipf("about Elasticsearch 8 and 9; ESCF_TEST_ENGINE is %s", name)
	case realClusterEnv(tb) != nil:
		tb.Skip("about Elasticsearch 8 and 9: on the emulator, or ESCF_TEST_ENGINE=elasticsearch-8 or -9")
	}
	return &emulator{newEmulator(tb, esemu.Config{Flavor: flavor})}
}

// TestMirror_Routing_AcrossVersions: Elasticsearch 9.4+ routes the indices
// it creates by hash modulo shards. An Elasticsearch 8 source with routed
// documents cannot be mirrored exactly into Elasticsearch 9: its routed
// events are refused (the others mirrored); an Elasticsearch 9 source into
// Elasticsearch 8 can (the sink creates the target with as many routing
// shards as shards), and the mirror is exact. Two engines in one test:
// with ESCF_TEST_ENGINE elasticsearch-8 or -9 the other one is started.
func TestMirror_Routing_AcrossVersions(t *testing.T) {
	for _, dir := range []struct {
		name     string
		from, to esemu.Flavor
		exact    bool
	}{
		{"8 to 9: routed events refused", esemu.FlavorES8, esemu.FlavorES9, false},
		{"9 to 8: exact", esemu.FlavorES9, esemu.FlavorES8, true},
	} {
		t.Run(dir.name, func(t *testing.T) {
			src := versionCluster(t, dir.from)
			dst := versionCluster(t, dir.to)
			ix := src.Index("versions")
			if rs, ok := src.(*realCluster); ok {
				if rd, ok := dst.(*realCluster); ok {
					rd.prefix = rs.prefix // the mirror is named as the source: clean it up
				}
			}
			want := routedSource(t, src, ix)
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			f := startRelay(t, src, srv.URL(), "versions", []string{ix}, nil)
			waitCaughtUp(t, src, f.store, []string{ix}, 30*time.Second)
			c := startBinary(t, consumeArgs(srv.URL(), "versions", "mirror", "c1", dst.URL())...)
			waitGroupDone(t, rdb, f.keys.Events(), "mirror", 60*time.Second)
			routed, plain, total := mirrorHolds(t, dst, ix, want)
			dead := deadOf(t, rdb, f.keys, "mirror")
			switch {
			case dir.exact && (routed != 80 || plain != 5 || total != 85 || dead != 0):
				t.Fatalf("the mirror holds %d routed and %d plain documents, %d in all, %d dead letters; want 80, 5, 85, 0\n%s", routed, plain, total, dead, tail(c.out.String(), 20))
			case !dir.exact && (routed != 0 || plain != 5 || total != 5 || dead != 80):
				t.Fatalf("the target holds %d routed and %d plain documents, %d in all, %d dead letters; want 0, 5, 5, 80\n%s", routed, plain, total, dead, tail(c.out.String(), 20))
			}
			c.kill()
		})
	}
}

// TestMirror_NoResurrectionAfterGCDeletes: the bulk sink into a target
// index with index.gc_deletes 1s, on the emulator and on the real engine
// of ESCF_TEST_ENGINE. After the target forgot a delete (the control
// document, written directly with the same versions, comes back with an
// older one), a stale upsert of the deleted document (a pending entry
// reclaimed after a consumer was down) is skipped: the document stays
// deleted.
func TestMirror_NoResurrectionAfterGCDeletes(t *testing.T) {
	src := esCluster(t, esemu.Config{})
	dst := mirrorTarget(t, src, esemu.Config{})
	ix := src.Index("gc")
	mustDo(t, "PUT", dst.URL()+"/"+ix, `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.gc_deletes":"1s"}}`)
	client, err := es.New(inspect(dst).esConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := client.IndexLayout(context.Background(), ix)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Start(t).Client(t)
	keys := redisx.NewKeys("gc")
	layout := &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
		Engine: l.Engine, EngineVersion: l.EngineVersion, VersionCreated: l.VersionCreated, Mappings: l.Mappings}
	rec, _ := json.Marshal(checkpoint.IndexInfo{Name: ix, Target: ix, Shards: 1, FirstSeen: time.Now().UTC(), Layout: layout})
	rdb.HSet(context.Background(), keys.Indices(), "U", rec)
	rdb.HSet(context.Background(), keys.Generations(), "U", 1)
	s, err := sink.NewBulk(sink.BulkConfig{ES: client, Redis: rdb, Keys: keys, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	h := s.Handler()
	ev := func(op redisx.Op, id string, seq int64) redisx.Event {
		e := redisx.Event{StreamID: fmt.Sprintf("%d-0", seq), Op: op, Index: ix, IndexUUID: "U", ID: id, SeqNo: seq, Target: ix}
		if op == redisx.OpUpsert {
			e.PrimaryTerm, e.Version, e.Source = 1, 1, json.RawMessage(`{"v":"old"}`)
		}
		return e
	}
	for _, e := range []redisx.Event{ev(redisx.OpUpsert, "a", 5), ev(redisx.OpDelete, "a", 8)} {
		if err := h(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	v5, _ := sink.BulkVersion(1, 5, false)
	v8, _ := sink.BulkVersion(1, 8, true)
	mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/ctl?version=%d&version_type=external", dst.URL(), ix, v5), `{"v":"old"}`)
	mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/ctl?version=%d&version_type=external", dst.URL(), ix, v8), "")
	// A real engine prunes its tombstones older than gc_deletes at a
	// refresh (at most every quarter of gc_deletes): retry until the
	// control's older version is taken.
	forgot := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		mustDo(t, "POST", dst.URL()+"/"+ix+"/_refresh", "")
		st, _ := httpDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/ctl?version=%d&version_type=external", dst.URL(), ix, v5), `{"v":"old"}`)
		if st < 300 {
			break
		}
		if time.Now().After(forgot) {
			t.Fatalf("control: the target still refuses the older version 30s after the delete (HTTP %d): the test proves nothing", st)
		}
	}
	if err := h(context.Background(), ev(redisx.OpUpsert, "a", 5)); err != nil {
		t.Fatal(err)
	}
	if st, b := httpDo(t, "GET", dst.URL()+"/"+ix+"/_doc/a", ""); st != http.StatusNotFound {
		t.Fatalf("the stale upsert brought the deleted document back: HTTP %d %s", st, b)
	}
	if st := s.Stats(); st.Conflicts != 1 || st.Applied != 2 {
		t.Errorf("Stats = %+v; want the stale upsert skipped (1 conflict) and 2 applied", st)
	}
}

// TestMirror_Routing_Partitioned: a source with index.routing_partition_size
// (4 shards, partitions of 2: a routing value spreads its documents over
// two shards by their _id) mirrored into a target that does not exist: the
// sink creates it with the same partition size and the mirror holds every
// source document. Real engines only: the emulator does not model
// routing_partition_size (it refuses the setting, loudly).
func TestMirror_Routing_Partitioned(t *testing.T) {
	if testEngineName() == "" && realClusterEnv(t) == nil {
		t.Skip("the emulator does not model index.routing_partition_size: run with ESCF_TEST_ENGINE")
	}
	src := esCluster(t, esemu.Config{})
	dst := mirrorTarget(t, src, esemu.Config{})
	ix := src.Index("partitioned")
	mustDo(t, "PUT", src.URL()+"/"+ix, `{"settings":{"number_of_shards":4,"number_of_replicas":0,"index.routing_partition_size":2},"mappings":{"_routing":{"required":true}}}`)
	var b strings.Builder
	for i := range 40 {
		for _, r := range []string{"ra", "rb", "rc"} {
			fmt.Fprintf(&b, "{\"index\":{\"_id\":\"d%d\",\"routing\":%q}}\n{\"id\":\"d%d\",\"routing\":%q}\n", i, r, i, r)
		}
	}
	if out := mustDo(t, "POST", src.URL()+"/"+ix+"/_bulk?refresh=true", b.String()); strings.Contains(string(out), `"errors":true`) {
		t.Fatalf("bulk: %s", out)
	}
	want := map[[2]string]string{}
	for _, d := range clusterDocs(t, src, ix) {
		var s struct{ ID string }
		_ = json.Unmarshal([]byte(d.source), &s)
		want[[2]string{s.ID, d.routing}] = d.source
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startRelay(t, src, srv.URL(), "partitioned", []string{ix}, nil)
	waitCaughtUp(t, src, f.store, []string{ix}, 30*time.Second)
	c := startBinary(t, consumeArgs(srv.URL(), "partitioned", "mirror", "c1", dst.URL())...)
	waitGroupDone(t, rdb, f.keys.Events(), "mirror", 60*time.Second)
	routed, _, total := mirrorHolds(t, dst, ix, want)
	if routed != len(want) || total != len(want) || deadOf(t, rdb, f.keys, "mirror") != 0 {
		t.Fatalf("the mirror holds %d of the source's %d documents, %d in all\n%s", routed, len(want), total, tail(c.out.String(), 20))
	}
	var st map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(mustDo(t, "GET", dst.URL()+"/"+ix+"/_settings?flat_settings=true", ""), &st); err != nil {
		t.Fatal(err)
	}
	if p := fmt.Sprint(st[ix].Settings["index.routing_partition_size"]); p != "2" {
		t.Errorf("the target's routing_partition_size is %s, want the source's 2", p)
	}
	t.Logf("mirrored %d documents of a partitioned index (3 routings × 40 ids over 4 shards)", len(want))
	c.kill()
}
