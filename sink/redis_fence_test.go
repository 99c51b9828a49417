package sink_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// indexDeleted is the index_deleted event of index "orders" with uuid.
func indexDeleted(uuid string) redisx.Event {
	return redisx.Event{Op: redisx.OpIndexDeleted, Index: "orders", IndexUUID: uuid}
}

// inIndex is e moved to index uuid.
func inIndex(e redisx.Event, uuid string) redisx.Event {
	e.IndexUUID = uuid
	return e
}

// TestRedis_IndexDeleted: an index_deleted event drops the index's fences
// and leaves a marker that refuses its late events, in this consumer and
// in others; a re-created index (new uuid) is fenced afresh.
func TestRedis_IndexDeleted(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	cfg := sink.RedisConfig{Mode: sink.RedisSet, Key: "cache:{index}:{id}", FenceEndGrace: time.Hour}
	h := newRedisSink(t, c, cfg).Handler()
	for n := range 50 {
		if err := h(ctx, sinkUpsert(strconv.Itoa(n), 5)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.HLen(ctx, "escf:{cache}:fence:cache:U1").Val(); got != 50 {
		t.Fatalf("the fence of U1 has %d fields, want 50", got)
	}
	if err := h(ctx, indexDeleted("U1")); err != nil {
		t.Fatal(err)
	}
	fields := c.HGetAll(ctx, "escf:{cache}:fence:cache:U1").Val()
	if _, ok := fields[idempotency.EndedField]; len(fields) != 1 || !ok {
		t.Fatalf("after index_deleted the fence of U1 holds %v, want only the marker", fields)
	}
	if ttl := c.TTL(ctx, "escf:{cache}:fence:cache:U1").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("the marker's TTL is %s, want the grace (1h)", ttl)
	}
	if got, want := redisValue(t, c, "cache:orders:7"), `{"seq":5}`; got != want {
		t.Errorf("cache:orders:7 = %q, want %q: index_deleted leaves the cache keys", got, want)
	}
	other := newRedisSink(t, srv.Client(t), cfg).Handler() // another consumer
	for _, hh := range []redisx.Handler{h, other} {
		for _, e := range []redisx.Event{sinkUpsert("7", 3), sinkUpsert("7", 9), sinkDelete("7", 9), sinkUpsert("new", 1)} {
			if err := hh(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := redisValue(t, c, "cache:orders:7"), `{"seq":5}`; got != want {
		t.Errorf("late events of the deleted index were applied: cache:orders:7 = %q, want %q", got, want)
	}
	if got := redisValue(t, c, "cache:orders:new"); got != "" {
		t.Errorf("a late event of the deleted index was applied: cache:orders:new = %q", got)
	}
	// The index re-created under a new uuid.
	if err := other(ctx, inIndex(sinkUpsert("7", 0), "U2")); err != nil {
		t.Fatal(err)
	}
	if got, want := redisValue(t, c, "cache:orders:7"), `{"seq":0}`; got != want {
		t.Errorf("re-created index: cache:orders:7 = %q, want %q", got, want)
	}
	if err := h(ctx, indexDeleted("U1")); err != nil {
		t.Errorf("a redelivered index_deleted: %v", err)
	}
}

// TestRedis_Upgrade: fences an earlier version wrote (one hash,
// escf:{cache}:fence:cache) still refuse older events after an upgrade,
// are not written, and leave with their index.
func TestRedis_Upgrade(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	//lint:ignore SA1019 the upgrade from the deprecated single-hash layout is what this test is about
	old, err := idempotency.New(idempotency.Config{Client: c, Key: "escf:{cache}:fence:cache"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []redisx.Event{sinkUpsert("1", 8), sinkUpsert("2", 8), inIndex(sinkUpsert("1", 8), "U9")} {
		if _, err := old.ApplyRedis(ctx, e, idempotency.Set{Key: "cache:orders:" + e.ID, Value: e.Source}); err != nil {
			t.Fatal(err)
		}
	}
	h := newRedisSink(t, c, sink.RedisConfig{Mode: sink.RedisSet}).Handler()
	for _, s := range []struct {
		e    redisx.Event
		want string
	}{
		{sinkUpsert("1", 7), `{"seq":8}`}, // older than the old fence: refused
		{sinkUpsert("1", 8), `{"seq":8}`}, // redelivered
		{sinkUpsert("1", 9), `{"seq":9}`},
		{sinkUpsert("1", 8), `{"seq":9}`},
	} {
		if err := h(ctx, s.e); err != nil {
			t.Fatal(err)
		}
		if got := redisValue(t, c, "cache:orders:1"); got != s.want {
			t.Fatalf("after %s seq_no %d: %q, want %q", s.e.ID, s.e.SeqNo, got, s.want)
		}
	}
	if got := c.HLen(ctx, "escf:{cache}:fence:cache").Val(); got != 3 {
		t.Errorf("the old hash has %d fields, want its 3: it is not written", got)
	}
	if err := h(ctx, indexDeleted("U1")); err != nil {
		t.Fatal(err)
	}
	if got, want := c.HKeys(ctx, "escf:{cache}:fence:cache").Val(), []string{"U9/0/1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the old hash after U1 ended: %v, want %v", got, want)
	}
}

// TestRedis_Cluster: in a real Redis Cluster the sink works with any key
// template, each fence in the slot of its document's key, and an old
// deployment's fence hash (whose tag every key had to carry) is still read.
func TestRedis_Cluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Client(t)
	ctx := context.Background()
	ids := []string{"42", "a{b}c", "{x}", "}{", "{}", "a}b", "{", "}", "é/ü", "x{}{y}"}
	for i, tpl := range []string{"cache:{index}:{id}", "{id}", "{index}:{id}", "cache:{{{id}}}", "c:{{x}}:{id}", "{{}}{id}", "{{{index}}}:{shard}:{id}"} {
		t.Run(tpl, func(t *testing.T) {
			s := newRedisSink(t, c, sink.RedisConfig{Mode: sink.RedisSet, Key: tpl, Name: "t" + strconv.Itoa(i)})
			kt, err := sink.ParseKeyTemplate(tpl)
			if err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			for _, id := range ids {
				key := kt.Key(sinkUpsert(id, 0))
				for _, st := range []struct {
					e    redisx.Event
					want string
				}{
					{sinkUpsert(id, 2), `{"seq":2}`},
					{sinkUpsert(id, 1), `{"seq":2}`},
					{sinkDelete(id, 2), ""},
					{sinkUpsert(id, 2), ""},
					{sinkUpsert(id, 3), `{"seq":3}`},
				} {
					if err := h(ctx, st.e); err != nil {
						t.Fatalf("%s seq_no %d on key %q: %v", st.e.Op, st.e.SeqNo, key, err)
					}
					got, err := c.Get(ctx, key).Result()
					if err == redis.Nil {
						got = ""
					} else if err != nil {
						t.Fatal(err)
					}
					if got != st.want {
						t.Fatalf("%s seq_no %d: %q = %q, want %q", st.e.Op, st.e.SeqNo, key, got, st.want)
					}
				}
				fence, _ := s.Fence().KeyOf(sinkUpsert(id, 0))
				if got, want := rc.Slot(t, fence), rc.Slot(t, key); got != want {
					t.Errorf("fence %q is in slot %d, its key %q in %d", fence, got, key, want)
				}
			}
		})
	}
	t.Run("a sink opened from a redis-cluster:// URL", func(t *testing.T) {
		s, err := sink.NewRedis(sink.RedisConfig{URL: rc.URL(), Mode: sink.RedisSet, Name: "url"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		for _, id := range ids {
			if err := s.Handler()(ctx, sinkUpsert(id, 1)); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if got, want := c.Get(ctx, "cache:orders:"+id).Val(), `{"seq":1}`; got != want {
				t.Errorf("cache:orders:%s = %q, want %q", id, got, want)
			}
		}
	})
	t.Run("an old deployment's fence", func(t *testing.T) {
		//lint:ignore SA1019 an old deployment's fence uses the deprecated single-hash layout
		old, err := idempotency.New(idempotency.Config{Client: c, Key: "escf:{cache}:fence:cache"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.ApplyRedis(ctx, sinkUpsert("9", 8), idempotency.Set{Key: "cache:{cache}:orders:9", Value: []byte(`{"seq":8}`)}); err != nil {
			t.Fatal(err)
		}
		h := newRedisSink(t, c, sink.RedisConfig{Mode: sink.RedisSet, Key: "cache:{{cache}}:{index}:{id}"}).Handler()
		if err := h(ctx, sinkUpsert("9", 7)); err != nil {
			t.Fatal(err)
		}
		if got, want := c.Get(ctx, "cache:{cache}:orders:9").Val(), `{"seq":8}`; got != want {
			t.Errorf("an event older than the old fence was applied: %q, want %q", got, want)
		}
		if err := h(ctx, indexDeleted("U1")); err != nil {
			t.Fatal(err)
		}
		if n := c.HLen(ctx, "escf:{cache}:fence:cache").Val(); n != 0 {
			t.Errorf("the old fence keeps %d fields of the ended index", n)
		}
	})
}

// clusterMemory sums used_memory less mem_clients_normal and
// mem_cluster_links (connection buffers) over the cluster's masters, each
// the least of ten reads 100 ms apart.
func clusterMemory(tb testing.TB, c *redis.ClusterClient) int64 {
	tb.Helper()
	var mu sync.Mutex
	var total int64
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		least := int64(-1)
		for range 10 {
			info, err := node.InfoMap(ctx, "memory").Result()
			if err != nil {
				return err
			}
			n := int64(0)
			for field, sign := range map[string]int64{"used_memory": 1, "mem_clients_normal": -1, "mem_cluster_links": -1} {
				v, err := strconv.ParseInt(info["Memory"][field], 10, 64)
				if err != nil {
					return fmt.Errorf("INFO memory %s: %w", field, err)
				}
				n += sign * v
			}
			if least < 0 || n < least {
				least = n
			}
			time.Sleep(100 * time.Millisecond)
		}
		mu.Lock()
		total += least
		mu.Unlock()
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return total
}

// clusterKeys counts the keys of every master matching pattern and sums
// their MEMORY USAGE.
func clusterKeys(tb testing.TB, c *redis.ClusterClient, pattern string) (keys, bytes int64) {
	tb.Helper()
	var mu sync.Mutex
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n, err := node.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				return err
			}
			mu.Lock()
			keys, bytes = keys+1, bytes+n
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return keys, bytes
}

// TestRedis_ClusterFenceMemory: 100,000 documents cached (del mode: only
// the fences take memory) through the sink in a real 3-master Redis
// Cluster with the default template, then index_deleted: the fences go at
// once (markers stay for the grace), and the masters' used_memory comes
// back to within 16 KiB each of before (less the connections' buffers).
// -short caches 10,000.
//
// Without EndIndex the fences would stay: the test fails then.
func TestRedis_ClusterFenceMemory(t *testing.T) {
	docs := 100_000
	if testing.Short() {
		docs = 10_000
	}
	const margin = 3 * 16 << 10
	rc := redistest.StartCluster(t)
	c := rc.Client(t)
	ctx := context.Background()
	h := newRedisSink(t, c, sink.RedisConfig{FenceEndGrace: 3 * time.Second}).Handler()
	apply := func(uuid string, docs int) {
		const workers = 16
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := w; n < docs; n += workers {
					if err := h(ctx, inIndex(sinkUpsert("doc-"+strconv.Itoa(n), int64(n)), uuid)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	waitGone := func() { // the database holds only fences
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			var mu sync.Mutex
			n := int64(0)
			if err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				k, err := node.DBSize(ctx).Result()
				mu.Lock()
				n += k
				mu.Unlock()
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("fence keys left 30s after the grace")
			}
		}
	}
	apply("warmup", 100)              // the scripts cached on every master
	clusterKeys(t, c, "escf:fence:*") // MEMORY USAGE's first call allocates
	if err := h(ctx, indexDeleted("warmup")); err != nil {
		t.Fatal(err)
	}
	waitGone()
	base := clusterMemory(t, c)

	const uuid = "RaKiYyrYBt8STHHJNxlVog"
	start := time.Now()
	apply(uuid, docs)
	took := time.Since(start)
	full := clusterMemory(t, c)
	fenceKeys, fenceBytes := clusterKeys(t, c, "escf:fence:*")
	var perMaster []string
	for _, m := range rc.Nodes {
		perMaster = append(perMaster, strconv.FormatInt(m.Client(t).DBSize(ctx).Val(), 10))
	}
	t.Logf("fence keys per master: %s", strings.Join(perMaster, ", "))
	start = time.Now()
	if err := h(ctx, indexDeleted(uuid)); err != nil {
		t.Fatal(err)
	}
	endTook := time.Since(start)
	markers, markerBytes := clusterKeys(t, c, "escf:fence:*")
	ended := clusterMemory(t, c)
	waitGone()
	after := clusterMemory(t, c)
	t.Logf("FENCE MEMORY redis cluster (3 masters) docs=%d applied in %s fence_keys=%d fence_bytes=%d (%.1f B/doc) index_deleted in %s markers=%d marker_bytes=%d used_memory before=%d fenced=%d (%+d) ended=%d (%+d) after_grace=%d (%+d)",
		docs, took.Round(time.Millisecond), fenceKeys, fenceBytes, float64(fenceBytes)/float64(docs), endTook.Round(time.Millisecond),
		markers, markerBytes, base, full, full-base, ended, ended-base, after, after-base)
	if fenceBytes < int64(docs)*16 {
		t.Fatalf("%d fences in %d bytes: too few to measure anything", docs, fenceBytes)
	}
	if markerBytes > markers*256 {
		t.Errorf("after index_deleted %d keys hold %d bytes: more than markers", markers, markerBytes)
	}
	if lim := int64(margin) + markers*256; ended-base > lim {
		t.Errorf("after index_deleted the masters use %d bytes, %d above before (limit %d: margin and markers)", ended, ended-base, lim)
	}
	if after-base > margin {
		t.Errorf("after the grace the masters use %d bytes, %d above the %d before (margin %d)", after, after-base, base, margin)
	}
}
