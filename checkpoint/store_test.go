package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func newStore(tb testing.TB, feed string, ttl time.Duration) (*checkpoint.Store, *redisx.Lease, *redistest.Server) {
	tb.Helper()
	srv := redistest.Start(tb)
	rdb, err := redisx.NewClient(srv.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	keys := redisx.NewKeys(feed)
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: ttl, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	return st, lease, srv
}

func upsert(uuid string, shard int, id string, seq int64) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: "idx", IndexUUID: uuid, Shard: shard, ID: id, SeqNo: seq,
		PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{"n":1}`)}
}

func TestStore_CommitThenLoad(t *testing.T) {
	ctx := context.Background()
	st, lease, srv := newStore(t, "commit", time.Second)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	sh0 := checkpoint.ShardID{IndexUUID: "U1", Shard: 0}
	sh1 := checkpoint.ShardID{IndexUUID: "U1", Shard: 1}
	b := checkpoint.Batch{
		Events:      []redisx.Event{upsert("U1", 0, "a", 0), upsert("U1", 0, "b", 3), upsert("U1", 1, "a", 1)},
		Checkpoints: map[checkpoint.ShardID]int64{sh0: 5, sh1: 1},
		Delivered:   map[checkpoint.ShardID][]checkpoint.Doc{sh0: {{ID: "a", SeqNo: 0}, {ID: "b", Routing: "r1", SeqNo: 3}}, sh1: {{ID: "a", SeqNo: 1}}},
		Gaps:        map[checkpoint.ShardID]int64{sh0: 2},
		Histories:   map[checkpoint.ShardID]string{sh0: "h-0"},
		Indices:     map[string]checkpoint.IndexInfo{"U1": {Name: "idx", Target: "idx", Shards: 2, FirstSeen: time.Unix(100, 0).UTC()}},
	}
	if err := st.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	for i, e := range b.Events {
		if e.StreamID == "" {
			t.Errorf("event %d has no StreamID after commit", i)
		}
	}
	got, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Checkpoints[sh0] != 5 || got.Checkpoints[sh1] != 1 || len(got.Checkpoints) != 2 {
		t.Errorf("checkpoints = %v, want U1/0=5 U1/1=1", got.Checkpoints)
	}
	if got.Histories[sh0] != "h-0" || len(got.Histories) != 1 {
		t.Errorf("histories = %v, want U1/0=h-0", got.Histories)
	}
	if info := got.Indices["U1"]; info.Name != "idx" || info.Shards != 2 || !info.FirstSeen.Equal(time.Unix(100, 0)) {
		t.Errorf("index info = %+v", info)
	}
	rdb := srv.Client(t)
	keys := redisx.NewKeys("commit")
	msgs, err := rdb.XRange(ctx, keys.Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("stream has %d entries, want 3", len(msgs))
	}
	for i, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			t.Fatal(err)
		}
		if e.ID != b.Events[i].ID || e.SeqNo != b.Events[i].SeqNo || e.StreamID != b.Events[i].StreamID {
			t.Errorf("entry %d = %+v, want %+v", i, e, b.Events[i])
		}
	}
	// Each id in the hash of its seq no's range (offset, then routing),
	// counted per range.
	wantRanges := func(when string, want map[string]map[string]string, counts map[string]string) {
		t.Helper()
		for key, fields := range want {
			if got, _ := rdb.HGetAll(ctx, key).Result(); !maps.Equal(got, fields) {
				t.Errorf("%s: %s = %v, want %v", when, key, got, fields)
			}
		}
		if got, _ := rdb.HGetAll(ctx, keys.DeliveredCounts("U1", 0)).Result(); !maps.Equal(got, counts) {
			t.Errorf("%s: counts of U1/0 = %v, want %v", when, got, counts)
		}
	}
	r0, r1 := keys.DeliveredRange("U1", 0, 0), keys.DeliveredRange("U1", 0, 1)
	wantRanges("first commit", map[string]map[string]string{r0: {"a": "0", "b": "3 r1"}, keys.DeliveredRange("U1", 1, 0): {"a": "1"}},
		map[string]string{"0": "2", "total": "2"})
	if got.Gaps[sh0] != 2 {
		t.Errorf("gap U1/0 = %d, want 2", got.Gaps[sh0])
	}
	// An update within the range overwrites its entry; one to a later
	// range adds an entry there and leaves the old one (stale, for a scan).
	// Delivering the same again changes nothing.
	for range 2 {
		if err := st.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh0: {{ID: "a", SeqNo: 7}, {ID: "b", SeqNo: 64 + 9}}}}); err != nil {
			t.Fatal(err)
		}
	}
	wantRanges("updates", map[string]map[string]string{r0: {"a": "7", "b": "3 r1"}, r1: {"b": "9"}}, map[string]string{"0": "2", "1": "1", "total": "3"})
	// Removal and a gap adjustment in a later batch; removing twice
	// uncounts once, and an emptied range leaves the counts.
	for range 2 {
		if err := st.Commit(ctx, checkpoint.Batch{Removed: map[checkpoint.ShardID][]checkpoint.Doc{sh0: {{ID: "b", SeqNo: 3}, {ID: "b", SeqNo: 73}}}, Gaps: map[checkpoint.ShardID]int64{sh0: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	wantRanges("removal", map[string]map[string]string{r0: {"a": "7"}, r1: {}}, map[string]string{"0": "1", "total": "1"})
	if docs, err := checkpoint.ReadDelivered(ctx, rdb, keys, sh0); err != nil || len(docs) != 1 || docs[0] != (checkpoint.Doc{ID: "a", SeqNo: 7}) {
		t.Errorf("ReadDelivered(U1/0) = %v, %v; want a at 7", docs, err)
	}
	if again, _ := st.Load(ctx); again.Gaps[sh0] != 0 {
		t.Errorf("gap U1/0 after -2 = %d, want 0", again.Gaps[sh0])
	}
	// Forget the index: every key and field of its shards goes.
	scratch := keys.Scan("U1", 1)
	rdb.SAdd(ctx, scratch, "x")
	rdb.SAdd(ctx, keys.Delivered("U1", 1), "old")
	rdb.HSet(ctx, keys.Routing("U1", 1), "old", "r")
	if err := st.Commit(ctx, checkpoint.Batch{ForgetShards: []checkpoint.ShardID{sh0, sh1}, ForgetIndices: []string{"U1"}}); err != nil {
		t.Fatal(err)
	}
	after, _ := st.Load(ctx)
	if len(after.Checkpoints) != 0 || len(after.Gaps) != 0 || len(after.Indices) != 0 || len(after.Histories) != 0 {
		t.Errorf("state after forgetting U1: %+v", after)
	}
	for _, key := range []string{keys.Delivered("U1", 1), keys.Routing("U1", 1), r0, keys.DeliveredRange("U1", 1, 0), keys.DeliveredCounts("U1", 0), keys.DeliveredCounts("U1", 1), scratch} {
		if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
			t.Errorf("%s still exists after forgetting the index", key)
		}
	}
}

func TestStore_CommitRefusedWithoutLease(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, lease *redisx.Lease, srv *redistest.Server)
	}{
		{"never acquired", func(t *testing.T, lease *redisx.Lease, srv *redistest.Server) {}},
		{"another owner", func(t *testing.T, lease *redisx.Lease, srv *redistest.Server) {
			srv.Client(t).Set(ctx, lease.Key(), "someone-else", time.Minute)
		}},
		{"expired and taken over", func(t *testing.T, lease *redisx.Lease, srv *redistest.Server) {
			if ok, _ := lease.TryAcquire(ctx); !ok {
				t.Fatal("acquire failed")
			}
			time.Sleep(150 * time.Millisecond) // TTL 100ms: expired
			srv.Client(t).Set(ctx, lease.Key(), "standby", time.Minute)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, lease, srv := newStore(t, "fenced", 100*time.Millisecond)
			tt.setup(t, lease, srv)
			err := st.Commit(ctx, checkpoint.Batch{
				Events:      []redisx.Event{upsert("U", 0, "a", 0)},
				Checkpoints: map[checkpoint.ShardID]int64{{IndexUUID: "U", Shard: 0}: 0},
			})
			if !errors.Is(err, redisx.ErrLeaseLost) {
				t.Fatalf("err = %v, want ErrLeaseLost", err)
			}
			keys := redisx.NewKeys("fenced")
			rdb := srv.Client(t)
			if n, _ := rdb.XLen(ctx, keys.Events()).Result(); n != 0 {
				t.Errorf("stream has %d entries after a refused commit, want 0", n)
			}
			if n, _ := rdb.HLen(ctx, keys.Checkpoints()).Result(); n != 0 {
				t.Errorf("checkpoints has %d fields after a refused commit, want 0", n)
			}
		})
	}
}

func TestStore_LoadRejectsCorruptState(t *testing.T) {
	ctx := context.Background()
	st, _, srv := newStore(t, "corrupt", time.Second)
	keys := redisx.NewKeys("corrupt")
	srv.Client(t).HSet(ctx, keys.Checkpoints(), "U/0", "not-a-number")
	if _, err := st.Load(ctx); err == nil {
		t.Fatal("Load accepted a non-integer checkpoint")
	}
}

// TestStore_CommitSurvivesLeaseRenewal: the owner's own renewals (PEXPIRE)
// touch the watched lease key and abort EXEC; that must not be taken for a
// lost lease.
func TestStore_CommitSurvivesLeaseRenewal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, lease, srv := newStore(t, "renewing", 60*time.Millisecond) // renewed every 20ms
	if err := lease.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	go lease.Keep(ctx)
	sh := checkpoint.ShardID{IndexUUID: "U", Shard: 0}
	deadline := time.Now().Add(time.Second)
	n := 0
	for ; time.Now().Before(deadline); n++ {
		evs := make([]redisx.Event, 50)
		for i := range evs {
			evs[i] = upsert("U", 0, "d", int64(n*50+i))
		}
		if err := st.Commit(ctx, checkpoint.Batch{Events: evs, Checkpoints: map[checkpoint.ShardID]int64{sh: int64(n)}}); err != nil {
			t.Fatalf("commit %d: %v", n, err)
		}
	}
	if got, _ := srv.Client(t).XLen(ctx, redisx.NewKeys("renewing").Events()).Result(); got != int64(n*50) {
		t.Fatalf("stream has %d entries after %d commits of 50, want %d", got, n, n*50)
	}
}

// TestStore_RolledBackThenRebased: a Redis that came back with fewer
// commits than the store made (an older AOF, a lagging replica) refuses the
// next commit without writing it; Rebase reports the lost commits and the
// documents they delivered, and commits go on from there.
func TestStore_RolledBackThenRebased(t *testing.T) {
	ctx := context.Background()
	st, lease, srv := newStore(t, "rollback", time.Minute)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	rdb := srv.Client(t)
	keys := redisx.NewKeys("rollback")
	sh := checkpoint.ShardID{IndexUUID: "U", Shard: 0}
	commit := func(id, routing string, seq int64) error {
		return st.Commit(ctx, checkpoint.Batch{Events: []redisx.Event{upsert("U", 0, id, seq)},
			Checkpoints: map[checkpoint.ShardID]int64{sh: seq}, Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {{ID: id, Routing: routing}}}})
	}
	for i, id := range []string{"a", "b", "c"} {
		if err := commit(id, "", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Redis comes back with the first commit only.
	rdb.HSet(ctx, keys.Meta(), checkpoint.MetaCommits, 1)
	err := commit("d", "", 3)
	if !errors.Is(err, checkpoint.ErrRolledBack) {
		t.Fatalf("commit on a rolled-back Redis: %v, want ErrRolledBack", err)
	}
	if n, _ := rdb.XLen(ctx, keys.Events()).Result(); n != 3 {
		t.Fatalf("the refused commit wrote: stream has %d entries, want 3", n)
	}
	rb, err := st.Rebase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rb.Delivered[sh] {
		got = append(got, d.ID)
	}
	if rb.Commits != 2 || rb.Forgotten || strings.Join(got, ",") != "b,c" {
		t.Fatalf("Rebase = %+v, want 2 commits lost that delivered b and c", rb)
	}
	if err := commit("d", "", 3); err != nil {
		t.Fatalf("commit after Rebase: %v", err)
	}
	if n, _ := rdb.HGet(ctx, keys.Meta(), checkpoint.MetaCommits).Int64(); n != 2 {
		t.Errorf("commit counter = %d after the rebased commit, want 2", n)
	}
	if rb, err := st.Rebase(ctx); err != nil || rb.Commits != 0 {
		t.Errorf("Rebase with nothing lost = %+v, %v", rb, err)
	}
}

// watchSkipper is a client whose Watch returns nil without running the
// transaction, as go-redis's ClusterClient.Watch does when its last
// redirect retry's WATCH fails (MOVED or READONLY during a failover).
type watchSkipper struct{ redis.UniversalClient }

func (watchSkipper) Watch(context.Context, func(*redis.Tx) error, ...string) error { return nil }

// TestStore_CommitWatchNotRun: a Watch that returns nil without running
// the transaction is a failed commit (retried by the relay), never a
// success and never a panic.
func TestStore_CommitWatchNotRun(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb, err := redisx.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	keys := redisx.NewKeys("skipped")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Minute, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lease.TryAcquire(ctx); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	st, err := checkpoint.New(checkpoint.Config{Client: watchSkipper{rdb}, Keys: keys, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Commit(ctx, checkpoint.Batch{
		Events:      []redisx.Event{upsert("U", 0, "a", 0)},
		Checkpoints: map[checkpoint.ShardID]int64{{IndexUUID: "U", Shard: 0}: 0},
	})
	if err == nil || !strings.Contains(err.Error(), "not run") {
		t.Fatalf("Commit through a Watch that ran nothing: err = %v, want an error saying the transaction was not run", err)
	}
	if n, _ := rdb.XLen(ctx, keys.Events()).Result(); n != 0 {
		t.Errorf("stream has %d entries, want 0", n)
	}
}

// TestReadDelivered_OneStateWhileCommitting: a reader of a shard's
// delivered documents sees one state although a relay commits to it all
// along, each commit moving the shard's one document to the next range.
// Read key by key, the counts listed a range that a later commit had
// emptied before the range was read.
func TestReadDelivered_OneStateWhileCommitting(t *testing.T) {
	ctx := context.Background()
	st, lease, srv := newStore(t, "readone", 10*time.Second)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	rdb, keys := srv.Client(t), redisx.NewKeys("readone")
	sh := checkpoint.ShardID{IndexUUID: "U", Shard: 0}
	doc := func(j int) checkpoint.Doc {
		return checkpoint.Doc{ID: fmt.Sprint("d", j), SeqNo: int64(j) * redisx.RangeSize}
	}
	if err := st.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {doc(0)}}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for j := 1; ; j++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			b := checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {doc(j)}}, Removed: map[checkpoint.ShardID][]checkpoint.Doc{sh: {doc(j - 1)}}}
			if err := st.Commit(ctx, b); err != nil {
				done <- err
				return
			}
		}
	}()
	for i := 0; i < 500; i++ {
		docs, err := checkpoint.ReadDelivered(ctx, rdb, keys, sh)
		if err != nil || len(docs) != 1 {
			close(stop)
			t.Fatalf("read %d while committing: %v, %v; want the one document", i, docs, err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStore_Index: one index's record by uuid, with its layout; a record
// an older relay wrote (no layout) reads with a nil Layout, and an unknown
// uuid is not found.
func TestStore_Index(t *testing.T) {
	ctx := context.Background()
	st, lease, srv := newStore(t, "index", time.Second)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	layout := &checkpoint.IndexLayout{Shards: 3, RoutingShards: 768, RoutingPartitionSize: 2, Engine: "opensearch", EngineVersion: "2.19.6",
		VersionCreated: 136408527, Mappings: json.RawMessage(`{"_routing":{"required":true}}`)}
	b := checkpoint.Batch{Indices: map[string]checkpoint.IndexInfo{"U1": {Name: "idx", Target: "idx*", Shards: 3, FirstSeen: time.Unix(100, 0).UTC(), Layout: layout}}}
	if err := st.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	// As relays before layouts wrote records.
	old := `{"name":"old","target":"old","shards":2,"first_seen":"2025-01-01T00:00:00Z","cluster_uuid":"C"}`
	if err := srv.Client(t).HSet(ctx, redisx.NewKeys("index").Indices(), "U0", old).Err(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.Index(ctx, "U1")
	if err != nil || !ok {
		t.Fatalf("Index(U1) = %+v, %v, %v", got, ok, err)
	}
	if got.Name != "idx" || got.Layout == nil || got.Layout.Shards != 3 || got.Layout.RoutingShards != 768 || got.Layout.RoutingPartitionSize != 2 ||
		got.Layout.Engine != "opensearch" || got.Layout.VersionCreated != 136408527 || string(got.Layout.Mappings) != `{"_routing":{"required":true}}` {
		t.Errorf("Index(U1) = %+v, layout %+v", got, got.Layout)
	}
	got, ok, err = st.Index(ctx, "U0")
	if err != nil || !ok || got.Name != "old" || got.Shards != 2 || got.ClusterUUID != "C" || got.Layout != nil {
		t.Errorf("Index(U0) = %+v, %v, %v; want the old record without a layout", got, ok, err)
	}
	if _, ok, err := st.Index(ctx, "U9"); ok || err != nil {
		t.Errorf("Index(U9) = %v, %v; want not found", ok, err)
	}
	all, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all.Indices["U1"].Layout == nil || all.Indices["U0"].Layout != nil {
		t.Errorf("Load: %+v", all.Indices)
	}
}

// TestCommit_RecordsRanges: the delivered documents of commits land in
// their ranges' hashes (field id → offset, then the routing), each
// range's count is its HLEN and total their sum, against a model: pages
// spanning several ranges, documents out of seq-no order, the same
// document again in its range (an update within it: overwritten, not
// counted), moved to a later range (the old entry stays), and twice in
// one batch.
func TestCommit_RecordsRanges(t *testing.T) {
	ctx := context.Background()
	st, lease, srv := newStore(t, "ranges", 10*time.Second)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	rdb, keys := srv.Client(t), redisx.NewKeys("ranges")
	sh := checkpoint.ShardID{IndexUUID: "U", Shard: 2}
	model := map[int64]map[string]string{} // range -> id -> value
	commit := func(docs ...checkpoint.Doc) {
		t.Helper()
		if err := st.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: docs}}); err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			r := d.SeqNo / redisx.RangeSize
			if model[r] == nil {
				model[r] = map[string]string{}
			}
			v := fmt.Sprint(d.SeqNo % redisx.RangeSize)
			if d.Routing != "" {
				v += " " + d.Routing
			}
			model[r][d.ID] = v
		}
	}
	var page []checkpoint.Doc
	for s := int64(0); s < 1000; s++ {
		page = append(page, checkpoint.Doc{ID: fmt.Sprint("d", s), SeqNo: s})
	}
	commit(page...)
	commit(checkpoint.Doc{ID: "d5", SeqNo: 60}, // the same range again
		checkpoint.Doc{ID: "d7", SeqNo: 1000, Routing: "user-1"},                  // moved to a later range
		checkpoint.Doc{ID: "x", SeqNo: 1003}, checkpoint.Doc{ID: "y", SeqNo: 130}, // out of order
		checkpoint.Doc{ID: "x", SeqNo: 1010, Routing: "r"}) // twice in one batch
	counts, total, err := checkpoint.RangeCounts(ctx, rdb, keys, sh)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for r, ids := range model {
		got, err := rdb.HGetAll(ctx, keys.DeliveredRange(sh.IndexUUID, sh.Shard, r)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, ids) {
			t.Errorf("range %d holds %v, want %v", r, got, ids)
		}
		if counts[r] != int64(len(ids)) {
			t.Errorf("range %d counted %d, holds %d", r, counts[r], len(ids))
		}
		want += int64(len(ids))
	}
	if len(counts) != len(model) || total != want {
		t.Errorf("counts list %d ranges, total %d; want %d ranges, %d", len(counts), total, len(model), want)
	}
}
