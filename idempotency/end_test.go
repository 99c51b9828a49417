package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// docUpsert is an upsert of document id in index uuid, on shard id mod 3.
func docUpsert(uuid string, n int, seq int64) redisx.Event {
	e := fenceUpsert("doc-"+strconv.Itoa(n), seq)
	e.IndexUUID, e.Shard = uuid, n%3
	return e
}

// fill records an upsert of docs documents of index uuid, from 8
// goroutines.
func fill(tb testing.TB, f *idempotency.Fence, uuid string, docs int) {
	tb.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := w; n < docs; n += workers {
				if err := f.Record(context.Background(), docUpsert(uuid, n, int64(n))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// keysOf lists the keys of the database that contain s.
func keysOf(tb testing.TB, c *redis.Client, s string) []string {
	tb.Helper()
	var out []string
	for _, k := range c.Keys(context.Background(), "*").Val() {
		if strings.Contains(k, s) {
			out = append(out, k)
		}
	}
	return out
}

func TestFence_EndIndex(t *testing.T) {
	ctx := context.Background()
	eachLayout(t, func(t *testing.T, l layout) {
		c := redistest.Start(t).Client(t)
		cfg := l.cfg(t.Name())
		cfg.EndGrace = 1500 * time.Millisecond
		f := newFenceOn(t, c, cfg)
		const docs = 300
		fill(t, f, "gone", docs)
		fill(t, f, "kept", docs)
		single := cfg.Key != ""

		if err := f.EndIndex(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		// Another process (no memory of the EndIndex) sees the markers.
		other := newFenceOn(t, c, cfg)
		for _, g := range []*idempotency.Fence{f, other} {
			for n := range docs {
				e := docUpsert("gone", n, int64(docs+n)) // newer than anything recorded
				if single && g == other {
					// The single hash keeps no marker: its fields are
					// gone and the index's events pass again.
					if ok, err := g.ShouldApply(ctx, e); err != nil || !ok {
						t.Fatalf("single hash, other process: ShouldApply = %v, %v; want true", ok, err)
					}
					continue
				}
				if ok, err := g.ShouldApply(ctx, e); err != nil || ok {
					t.Fatalf("%s after EndIndex: ShouldApply = %v, %v; want false", idempotency.Identity(e), ok, err)
				}
				if o, ok, err := g.Recorded(ctx, e); err != nil || !ok || o != math.MaxUint64 {
					t.Fatalf("Recorded = %d, %v, %v; want MaxUint64 (ended)", o, ok, err)
				}
				applied, err := g.ApplyRedis(ctx, e, idempotency.Set{Key: "late:" + e.ID, Value: []byte("late")})
				if err != nil || applied {
					t.Fatalf("ApplyRedis after EndIndex: applied %v, %v", applied, err)
				}
				if err := g.Record(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
		}
		if late := keysOf(t, c, "late:"); len(late) > 0 {
			t.Errorf("effects of an ended index ran: %v", late)
		}
		if single {
			if fields := c.HKeys(ctx, cfg.Key).Val(); len(fields) != docs {
				t.Errorf("the single hash has %d fields, want the %d of the kept index", len(fields), docs)
			}
		} else {
			for _, k := range keysOf(t, c, "gone") {
				fields, err := c.HGetAll(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := fields[idempotency.EndedField]; len(fields) != 1 || !ok {
					t.Errorf("%s after EndIndex holds %v, want only the marker", k, fields)
				}
				if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > cfg.EndGrace {
					t.Errorf("%s: PTTL %s, want at most the grace %s", k, ttl, cfg.EndGrace)
				}
			}
		}
		// The other index is untouched.
		for n := range docs {
			e := docUpsert("kept", n, int64(n))
			if o, ok, err := f.Recorded(ctx, e); err != nil || !ok || o != 2*uint64(n) {
				t.Fatalf("kept %s: Recorded = %d, %v, %v; want %d", e.ID, o, ok, err, 2*n)
			}
		}
		// After the grace nothing of the index is left.
		deadline := time.Now().Add(cfg.EndGrace + 5*time.Second)
		for len(keysOf(t, c, "gone")) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if left := keysOf(t, c, "gone"); len(left) > 0 {
			t.Errorf("after the grace: %d keys of the ended index are left, e.g. %s", len(left), left[0])
		}
		t.Run("again", func(t *testing.T) {
			if err := f.EndIndex(ctx, "gone"); err != nil {
				t.Fatalf("a second EndIndex (a redelivered index_deleted): %v", err)
			}
		})
		t.Run("empty uuid", func(t *testing.T) {
			if err := f.EndIndex(ctx, ""); err == nil || !redisx.IsPermanent(err) {
				t.Errorf("err = %v, want a permanent error", err)
			}
		})
	})
}

// TestFence_Legacy: the single hash of earlier versions still fences the
// documents it holds, is never written, and loses an index's fields when
// the index ends.
func TestFence_Legacy(t *testing.T) {
	ctx := context.Background()
	for _, l := range layouts[:3] {
		t.Run(l.name, func(t *testing.T) {
			c := redistest.Start(t).Client(t)
			cfg := l.cfg(t.Name())
			legacy := redisx.NewKeys("fencetest").Fence(t.Name())
			if cfg.Prefix != legacy {
				cfg.Legacy = legacy
			}
			old := newFenceOn(t, c, idempotency.Config{Key: legacy})
			for _, e := range []redisx.Event{docUpsert("u1", 1, 10), docUpsert("u1", 2, 10), docUpsert("u2", 1, 10)} {
				if err := old.Record(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			before := c.HGetAll(ctx, legacy).Val()
			f := newFenceOn(t, c, cfg)
			steps := []struct {
				e    redisx.Event
				want bool
			}{
				{docUpsert("u1", 1, 9), false},  // older than the legacy fence
				{docUpsert("u1", 1, 10), false}, // the same
				{docUpsert("u1", 1, 11), true},  // newer: recorded in the new layout
				{docUpsert("u1", 1, 10), false},
				{docUpsert("u1", 3, 0), true}, // never fenced
			}
			for i, s := range steps {
				ok, err := f.ApplyRedis(ctx, s.e, nil)
				if err != nil || ok != s.want {
					t.Fatalf("step %d (%s seq_no %d): applied %v, %v; want %v", i, idempotency.Identity(s.e), s.e.SeqNo, ok, err, s.want)
				}
			}
			if ok, err := f.ShouldApply(ctx, docUpsert("u1", 2, 10)); err != nil || ok {
				t.Errorf("ShouldApply of a legacy-fenced redelivery = %v, %v; want false", ok, err)
			}
			if after := c.HGetAll(ctx, legacy).Val(); len(after) != len(before) {
				t.Errorf("the legacy hash was written: %v, was %v", after, before)
			}
			if err := f.EndIndex(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
			if got, want := c.HKeys(ctx, legacy).Val(), []string{idempotency.Identity(docUpsert("u2", 1, 0))}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("legacy hash after EndIndex(u1): %v, want %v", got, want)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		c := redistest.Start(t).Client(t)
		c.Set(ctx, "p", "not a hash", 0)
		f := newFenceOn(t, c, idempotency.Config{Prefix: "p", Legacy: "-"})
		if ok, err := f.ApplyRedis(ctx, docUpsert("u1", 1, 1), nil); err != nil || !ok {
			t.Errorf("with Legacy \"-\" the key at Prefix is not read: applied %v, %v", ok, err)
		}
	})
}

// TestFence_RedisCluster: with SlotOf, ApplyRedis works in a real Redis
// Cluster whatever the effect's key, each fence in its key's slot, and
// EndIndex reaches every node.
func TestFence_RedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Client(t)
	ctx := context.Background()
	f := newFenceOn(t, c, idempotency.Config{Prefix: "escf:fence:t", EndGrace: time.Minute,
		SlotOf: func(e redisx.Event) string { return e.ID }})
	ids := append([]string(nil), slotKeys...)
	for n := range 200 {
		ids = append(ids, "doc:"+strconv.Itoa(n))
	}
	for i, id := range ids {
		if id == "" {
			continue
		}
		e := fenceUpsert(id, int64(i))
		for _, eff := range []idempotency.Effect{idempotency.Set{Key: id, Value: []byte("v")}, idempotency.Del{Keys: []string{id}}} {
			if _, err := f.ApplyRedis(ctx, e, eff); err != nil {
				t.Fatalf("ApplyRedis with effect key %q: %v", id, err)
			}
			e.Op, e.SeqNo = redisx.OpDelete, e.SeqNo+1
		}
		key, _ := f.KeyOf(e)
		if got, want := rc.Slot(t, key), rc.Slot(t, id); got != want {
			t.Errorf("the fence of %q is %q in slot %d, not the key's %d", id, key, got, want)
		}
		if ok, err := f.ShouldApply(ctx, fenceUpsert(id, int64(i))); err != nil || ok {
			t.Errorf("%q: ShouldApply of an applied event = %v, %v", id, ok, err)
		}
	}
	if err := f.EndIndex(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fields := 0
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		for _, k := range node.Keys(ctx, "escf:fence:t:*").Val() {
			n := node.HLen(ctx, k).Val()
			mu.Lock()
			fields += int(n) - 1 // the marker
			mu.Unlock()
		}
		return nil
	})
	if err != nil || fields != 0 {
		t.Errorf("after EndIndex the nodes hold %d fences (%v), want 0", fields, err)
	}
	if ok, err := f.ApplyRedis(ctx, fenceUpsert("doc:1", 1000), idempotency.Set{Key: "doc:1", Value: []byte("late")}); err != nil || ok {
		t.Errorf("late event after EndIndex: applied %v, %v", ok, err)
	}
}

// usedMemory is INFO memory's used_memory less mem_clients_normal (the
// test's own connections' buffers, which the server shrinks only after
// they idle for a while), once it has not moved for half a second (UNLINK
// frees off the main thread; the cron shrinks the keyspace's tables in
// steps).
func usedMemory(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	return usedMemoryStable(tb, c, 5)
}

// usedMemoryStable is usedMemory once n reads 100 ms apart agreed.
func usedMemoryStable(tb testing.TB, c *redis.Client, n int) int64 {
	tb.Helper()
	read := func() int64 {
		info, err := c.InfoMap(context.Background(), "memory").Result()
		if err != nil {
			tb.Fatal(err)
		}
		return memoryOf(tb, info["Memory"])
	}
	last, same := read(), 0
	for deadline := time.Now().Add(20 * time.Second); same < n && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if n := read(); n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// memoryOf is used_memory - mem_clients_normal of an INFO memory section.
func memoryOf(tb testing.TB, info map[string]string) int64 {
	tb.Helper()
	used, err := strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		tb.Fatalf("used_memory: %v", err)
	}
	clients, err := strconv.ParseInt(info["mem_clients_normal"], 10, 64)
	if err != nil {
		tb.Fatalf("mem_clients_normal: %v", err)
	}
	return used - clients
}

// keyBytes is the sum of MEMORY USAGE (every element counted) of the keys
// of the database, and their number.
func keyBytes(tb testing.TB, c *redis.Client) (bytes, keys int64) {
	tb.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := c.MemoryUsage(ctx, iter.Val(), 0).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired meanwhile
		}
		if err != nil {
			tb.Fatal(err)
		}
		bytes += n
		keys++
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return bytes, keys
}

// waitNoKeys waits until the database is empty (the markers expired).
func waitNoKeys(tb testing.TB, c *redis.Client, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for c.DBSize(context.Background()).Val() > 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("%d keys still there after %s", c.DBSize(context.Background()).Val(), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFence_EndIndex_Memory fences 100,000 documents of one index in a
// real redis-server and ends the index. The fence keys (MEMORY USAGE) must
// shrink to the markers at once and to nothing after the grace, and
// used_memory (less the clients' buffers) must come back to within 8 KiB
// of what it was before the index was fenced, the markers aside. -short
// fences 10,000. Without EndIndex the fences stay, and the test fails.
func TestFence_EndIndex_Memory(t *testing.T) {
	docs := 100_000
	if testing.Short() {
		docs = 10_000
	}
	const margin = 8 << 10
	ctx := context.Background()
	eachLayout(t, func(t *testing.T, l layout) {
		c := redistest.Start(t).Client(t)
		cfg := l.cfg("mem")
		cfg.EndGrace = 3 * time.Second
		f := newFenceOn(t, c, cfg)
		// Warm up: the scripts in the script cache, MEMORY USAGE run once
		// (its first call leaves about 48 KiB allocated), one index ended
		// and gone.
		fill(t, f, "warmup", 10)
		keyBytes(t, c)
		if err := f.EndIndex(ctx, "warmup"); err != nil {
			t.Fatal(err)
		}
		waitNoKeys(t, c, 10*time.Second)
		base := usedMemory(t, c)

		const uuid = "RaKiYyrYBt8STHHJNxlVog"
		fill(t, f, uuid, docs)
		full := usedMemory(t, c)
		fenceBytes, fenceKeys := keyBytes(t, c)
		if fenceBytes < int64(docs)*16 {
			t.Fatalf("%d fences in %d bytes: too few to measure anything", docs, fenceBytes)
		}
		start := time.Now()
		if err := f.EndIndex(ctx, uuid); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		markerBytes, markers := keyBytes(t, c)
		ended := usedMemoryStable(t, c, 2) // before the markers expire
		waitNoKeys(t, c, 20*time.Second)
		after := usedMemory(t, c)
		t.Logf("FENCE MEMORY layout=%q docs=%d fence_keys=%d fence_bytes=%d (%.1f B/doc) markers=%d marker_bytes=%d EndIndex=%s used_memory before=%d fenced=%d (%+d) ended=%d (%+d) after_grace=%d (%+d)",
			l.name, docs, fenceKeys, fenceBytes, float64(fenceBytes)/float64(docs), markers, markerBytes, took.Round(time.Millisecond),
			base, full, full-base, ended, ended-base, after, after-base)
		if lim := markers * 256; markerBytes > lim {
			t.Errorf("after EndIndex %d keys hold %d bytes, want only markers (at most %d)", markers, markerBytes, lim)
		}
		if after-base > margin {
			t.Errorf("after the grace used_memory is %d, %d bytes above the %d before the index was fenced (margin %d)", after, after-base, base, margin)
		}
		if lim := int64(margin) + markers*256; ended-base > lim {
			t.Errorf("after EndIndex used_memory is %d, %d bytes above before (limit %d: margin and markers)", ended, ended-base, lim)
		}
	})
}

// TestFence_Held: Held lists, in every layout, the documents of one index
// whose last recorded event is an upsert, with its seq no, and no others.
func TestFence_Held(t *testing.T) {
	ctx := context.Background()
	eachLayout(t, func(t *testing.T, l layout) {
		c := redistest.Start(t).Client(t)
		f := newFenceOn(t, c, l.cfg(t.Name()))
		const docs = 250
		fill(t, f, "held", docs)
		fill(t, f, "other", 10)
		want := map[string]int64{}
		for n := range docs {
			want[fmt.Sprintf("%d/doc-%d", n%3, n)] = int64(n)
		}
		for n := 0; n < docs; n += 5 { // every fifth deleted since
			del := docUpsert("held", n, int64(n+1))
			del.Op = redisx.OpDelete
			if err := f.Record(ctx, del); err != nil {
				t.Fatal(err)
			}
			delete(want, fmt.Sprintf("%d/doc-%d", n%3, n))
		}
		got := map[string]int64{}
		pages := 0
		n, err := f.Held(ctx, "held", 64, func(page []idempotency.HeldDoc) error {
			pages++
			if len(page) > 64 {
				t.Errorf("a page of %d, want at most 64", len(page))
			}
			for _, h := range page {
				got[fmt.Sprintf("%d/%s", h.Shard, h.ID)] = h.SeqNo
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(want)) || !maps.Equal(got, want) {
			t.Fatalf("Held listed %d documents (%d distinct) in %d pages; want the %d whose last event is an upsert", n, len(got), pages, len(want))
		}
	})
}
