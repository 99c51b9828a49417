package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// TestRelay_Round_RecordsLayout: adopting an index records where it puts
// documents (shards, routing shards, engine, creation version, mappings)
// with its record, so that a consumer without access to the cluster can
// copy it; a record of an older relay (no layout) gets one when the index
// is adopted again; a cluster that refuses the reads leaves the record
// without a layout and the index followed.
func TestRelay_Round_RecordsLayout(t *testing.T) {
	const mappings = `{"properties":{"n":{"type":"long"}}}`
	create := func(t *testing.T, e roundEnv) {
		e.do(t, http.MethodPut, "/idx", `{"settings":{"number_of_shards":3,"number_of_routing_shards":6,"number_of_replicas":0},"mappings":`+mappings+`}`)
		e.write(t, "idx", "a")
	}
	check := func(t *testing.T, l *checkpoint.IndexLayout) {
		t.Helper()
		if l == nil || l.Shards != 3 || l.RoutingShards != 6 || l.RoutingPartitionSize != 1 || l.Engine != "elasticsearch" || l.EngineVersion == "" ||
			l.VersionCreated == 0 || string(l.Mappings) != mappings {
			t.Fatalf("layout %+v", l)
		}
	}
	t.Run("new index", func(t *testing.T) {
		e := newRoundEnv(t, "layout")
		create(t, e)
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx"}
		if err := r.round(context.Background(), "idx", cur); err != nil {
			t.Fatal(err)
		}
		check(t, e.state(t).Indices[cur.uuid].Layout)
	})
	t.Run("record of an older relay", func(t *testing.T) {
		e := newRoundEnv(t, "layout")
		create(t, e)
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx"}
		if err := r.round(context.Background(), "idx", cur); err != nil {
			t.Fatal(err)
		}
		old := e.state(t).Indices[cur.uuid]
		old.Layout = nil
		old.FirstSeen = time.Unix(100, 0).UTC()
		b, _ := json.Marshal(old)
		if err := e.rdb.HSet(context.Background(), e.keys.Indices(), cur.uuid, b).Err(); err != nil {
			t.Fatal(err)
		}
		// A new relay (a restart) adopts the index again.
		r = e.relay(t, []string{"idx"}, nil)
		cur = &cursor{target: "idx"}
		if err := r.round(context.Background(), "idx", cur); err != nil {
			t.Fatal(err)
		}
		got := e.state(t).Indices[cur.uuid]
		check(t, got.Layout)
		if !got.FirstSeen.Equal(old.FirstSeen) || got.Name != "idx" || got.Shards != 3 {
			t.Errorf("record %+v: the rest of the old record (first seen %s) should stay", got, old.FirstSeen)
		}
	})
	t.Run("reads refused", func(t *testing.T) {
		e := newRoundEnv(t, "layout")
		create(t, e)
		if err := e.emu.InjectFault(esemu.Fault{Kind: esemu.KindClusterState, Status: http.StatusForbidden}); err != nil {
			t.Fatal(err)
		}
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx"}
		if err := r.round(context.Background(), "idx", cur); err != nil {
			t.Fatal(err)
		}
		if info, ok := e.state(t).Indices[cur.uuid]; !ok || info.Layout != nil || info.Shards != 3 {
			t.Fatalf("record %+v (found %v): want one without a layout", info, ok)
		}
	})
}
