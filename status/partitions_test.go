package status_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/status"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestGather_NoStreamYet: a feed, or a partition, without a stream yet
// (no event so far) is reported, not an error.
func TestGather_NoStreamYet(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rep, err := status.Gather(ctx, status.Sources{Redis: rdb, Keys: redisx.NewKeys("fresh")})
	if err != nil {
		t.Fatalf("Gather of a feed without a stream: %v", err)
	}
	if rep.Stream.Length != 0 || rep.Healthy {
		t.Fatalf("report %+v: want an empty stream, unhealthy (no lease)", rep)
	}

	const P = 3
	k1 := redisx.PartitionKeys("parts", 1, P)
	e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: "a", Source: []byte(`{}`)}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k1.Events(), Values: e.Values()}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, k1.Meta(), "created", "2026-12-01T00:00:00Z")
	if err := rdb.XGroupCreate(ctx, k1.Events(), "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	pr, err := status.GatherPartitions(ctx, status.Sources{Redis: rdb, Keys: redisx.NewKeys("parts")}, P)
	if err != nil {
		t.Fatalf("GatherPartitions with partitions 0 and 2 empty: %v", err)
	}
	if got, want := len(pr.Partition), P; got != want {
		t.Fatalf("%d partition reports, want %d", got, want)
	}
	if pr.Totals.StreamLength != 1 || pr.Partition[1].Stream.Length != 1 || pr.Partition[0].Stream.Length != 0 {
		t.Errorf("stream lengths: total %d, partition 0 %d, partition 1 %d; want 1, 0, 1",
			pr.Totals.StreamLength, pr.Partition[0].Stream.Length, pr.Partition[1].Stream.Length)
	}
	problems := strings.Join(pr.Problems, "\n")
	for _, want := range []string{"partition 0: no relay holds the lease", "partition 2: no relay holds the lease",
		"group g reads 1 of the 3 partitions (not 0, 2)"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems:\n%s\nwant %q", problems, want)
		}
	}
	if pr.Healthy {
		t.Error("healthy with free leases")
	}
	var b strings.Builder
	if err := pr.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "0 of 3 held") {
		t.Errorf("text:\n%s", b.String())
	}
}

// A group that read the last entry lags by 0, whatever lag Redis reports
// (Redis 7.0 reports a stale one after a failover: made here with XGROUP
// SETID … ENTRIESREAD 0).
func TestGather_StaleLagOfAGroupThatReadEverything(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	k := redisx.NewKeys("stale")
	e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: "a", Source: []byte(`{}`)}
	for i := 0; i < 20; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Events(), Values: e.Values()})
	}
	rdb.HSet(ctx, k.Meta(), "created", "2026-12-01T00:00:00Z")
	rdb.XGroupCreate(ctx, k.Events(), "g", "$")
	if err := rdb.Do(ctx, "XGROUP", "SETID", k.Events(), "g", "$", "ENTRIESREAD", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if g := rdb.XInfoGroups(ctx, k.Events()).Val(); len(g) != 1 || g[0].Lag != 20 {
		t.Fatalf("the setup did not make Redis report a stale lag: %+v", g)
	}
	rep, err := status.Gather(ctx, status.Sources{Redis: rdb, Keys: k})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Lag != 0 {
		t.Fatalf("groups %+v: want g with lag 0 (it read the last entry)", rep.Groups)
	}
}

// leasedStore is the feed's checkpoint store, its lease held, to commit
// the state status reads.
func leasedStore(t *testing.T, rdb *redis.Client, k redisx.Keys) *checkpoint.Store {
	t.Helper()
	lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: k.Lease(), TTL: time.Minute})
	if ok, err := lease.TryAcquire(context.Background()); !ok || err != nil {
		t.Fatalf("lease: %v %v", ok, err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: k, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// status shows each shard's delivered ids and ranges, and the ids a shard
// still holds in the layout before ranges, from the feed's keys.
func TestGather_DeliveredIDs(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	k := redisx.NewKeys("dlv")
	store := leasedStore(t, rdb, k)
	sh0 := checkpoint.ShardID{IndexUUID: "u", Shard: 0}
	if err := store.Commit(ctx, checkpoint.Batch{
		Indices:     map[string]checkpoint.IndexInfo{"u": {Name: "i", Target: "i", Shards: 2}},
		Checkpoints: map[checkpoint.ShardID]int64{sh0: 200},
		Meta:        map[string]string{"created": "2026-12-01T00:00:00Z"},
		Delivered:   map[checkpoint.ShardID][]checkpoint.Doc{sh0: {{ID: "a", SeqNo: 1}, {ID: "b", SeqNo: 2}, {ID: "c", SeqNo: 200}}},
	}); err != nil {
		t.Fatal(err)
	}
	rdb.SAdd(ctx, k.Delivered("u", 1), "x", "y")
	rep, err := status.Gather(ctx, status.Sources{Redis: rdb, Keys: k})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Indices) != 1 || len(rep.Indices[0].Shards) != 2 {
		t.Fatalf("indices %+v", rep.Indices)
	}
	s0, s1 := rep.Indices[0].Shards[0], rep.Indices[0].Shards[1]
	if s0.DeliveredIDs != 3 || s0.DeliveredRanges != 2 || s0.ToMigrate != 0 || s1.DeliveredIDs != 0 || s1.ToMigrate != 2 {
		t.Errorf("shards %+v %+v: want 3 ids in 2 ranges, and 2 to migrate", s0, s1)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "delivered ids: 3 in 2 seq-no ranges of 64 over 2 shards (for delete scans); 2 ids of the layout before ranges"; !strings.Contains(b.String(), want) {
		t.Errorf("text has no %q:\n%s", want, b.String())
	}
}

// TestGather_StatsRefused: a cluster that answers GET / but refuses the
// index's _stats (a user without index monitor) is a problem named with
// the refusal, and the index is not called missing: not knowing is not
// "gone".
func TestGather_StatsRefused(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	k := redisx.NewKeys("refused")
	store := leasedStore(t, rdb, k)
	sh0 := checkpoint.ShardID{IndexUUID: "u", Shard: 0}
	if err := store.Commit(ctx, checkpoint.Batch{
		Indices:     map[string]checkpoint.IndexInfo{"u": {Name: "orders", Target: "orders", Shards: 1}},
		Checkpoints: map[checkpoint.ShardID]int64{sh0: 10},
		Meta:        map[string]string{"created": "2026-12-01T00:00:00Z"},
	}); err != nil {
		t.Fatal(err)
	}
	cluster := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/" {
			_, _ = io.WriteString(w, `{"name":"n0","cluster_name":"c","version":{"number":"2.19.6","distribution":"opensearch"}}`)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"error":{"root_cause":[{"type":"security_exception","reason":"no permissions for [indices:monitor/stats] and User [name=st]"}],"type":"security_exception","reason":"no permissions for [indices:monitor/stats] and User [name=st]"},"status":403}`)
	}))
	defer cluster.Close()
	client, err := es.New(es.Config{URLs: []string{cluster.URL}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := status.Gather(ctx, status.Sources{Redis: rdb, Keys: k, ES: client})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy || len(rep.Problems) == 0 || !strings.Contains(strings.Join(rep.Problems, "\n"), "indices:monitor/stats") {
		t.Errorf("healthy %v, problems %q: want one naming the refused stats", rep.Healthy, rep.Problems)
	}
	if len(rep.Indices) != 1 || rep.Indices[0].Missing {
		t.Errorf("indices %+v: want orders, not missing", rep.Indices)
	}
}
