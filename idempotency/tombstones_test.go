package idempotency_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func TestTombstones_DeleteHidesOlderUpserts(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	ts, err := idempotency.NewTombstones(idempotency.TombstonesConfig{Client: rdb, Prefix: redisx.NewKeys("tomb").Fence("bulk:deletes")})
	if err != nil {
		t.Fatal(err)
	}
	deleted := func(e redisx.Event) bool {
		t.Helper()
		d, err := ts.Deleted(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if deleted(fenceUpsert("a", 5)) {
		t.Fatal("an upsert of a document never deleted is reported deleted")
	}
	if err := ts.Record(ctx, fenceDelete("a", 8)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		e    redisx.Event
		want bool
	}{
		{"older upsert", fenceUpsert("a", 5), true},
		{"upsert at the delete's seq no (orders before it)", fenceUpsert("a", 8), true},
		{"the delete again", fenceDelete("a", 8), false},
		{"newer upsert (the document re-created)", fenceUpsert("a", 9), false},
		{"another document", fenceUpsert("b", 5), false},
		{"another shard", func() redisx.Event { e := fenceUpsert("a", 5); e.Shard = 1; return e }(), false},
		{"another index", func() redisx.Event { e := fenceUpsert("a", 5); e.IndexUUID = "v"; return e }(), false},
		{"not a document event", redisx.Event{Op: redisx.OpIndexDeleted, IndexUUID: "u"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deleted(tt.e); got != tt.want {
				t.Errorf("Deleted = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("an older delete does not lower a newer one", func(t *testing.T) {
		if err := ts.Record(ctx, fenceDelete("a", 3)); err != nil {
			t.Fatal(err)
		}
		if !deleted(fenceUpsert("a", 7)) {
			t.Error("the upsert at 7 passes after a delete at 3 was recorded over the one at 8")
		}
	})
	t.Run("upserts are not recorded", func(t *testing.T) {
		if err := ts.Record(ctx, fenceUpsert("c", 100)); err != nil {
			t.Fatal(err)
		}
		if deleted(fenceUpsert("c", 1)) {
			t.Error("an upsert was recorded as a delete")
		}
	})
	t.Run("ids with separators, big seq nos", func(t *testing.T) {
		e := fenceDelete("x/y:z {w}", 1<<62)
		if err := ts.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
		older, newer := fenceUpsert("x/y:z {w}", 1<<62-1), fenceUpsert("x/y:z {w}", 1<<62+1)
		if !deleted(older) || deleted(newer) {
			t.Errorf("Deleted(older) = %v, Deleted(newer) = %v; want true, false", deleted(older), deleted(newer))
		}
	})
	t.Run("a negative seq no is permanent", func(t *testing.T) {
		if _, err := ts.Deleted(ctx, fenceUpsert("a", -1)); !redisx.IsPermanent(err) {
			t.Errorf("Deleted: %v", err)
		}
		if err := ts.Record(ctx, fenceDelete("a", -1)); !redisx.IsPermanent(err) {
			t.Errorf("Record: %v", err)
		}
	})
}

// TestTombstones_Expire: a tombstone lasts Keep (and at most a 24th of it
// more), then its hash expires: the memory returns by itself, and the
// delete no longer hides older upserts.
func TestTombstones_Expire(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	const keep = 1200 * time.Millisecond // buckets of 50ms
	ts, err := idempotency.NewTombstones(idempotency.TombstonesConfig{Client: rdb, Prefix: "escf:{t}:fence:bulk:deletes", Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Record(ctx, fenceDelete("a", 8)); err != nil {
		t.Fatal(err)
	}
	recorded := time.Now()
	keys, err := rdb.Keys(ctx, "escf:{t}:fence:bulk:deletes:u:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v: want one bucket", keys, err)
	}
	ttl, err := rdb.PTTL(ctx, keys[0]).Result()
	if err != nil || ttl < keep-100*time.Millisecond || ttl > keep+keep/24+100*time.Millisecond {
		t.Fatalf("bucket %s expires in %s (%v); want Keep %s to Keep + a 24th", keys[0], ttl, err, keep)
	}
	for time.Since(recorded) < keep-200*time.Millisecond {
		if d, err := ts.Deleted(ctx, fenceUpsert("a", 5)); err != nil || !d {
			t.Fatalf("%s after the delete: Deleted = %v, %v; want true within Keep", time.Since(recorded), d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline := recorded.Add(keep + keep/24 + time.Second)
	for {
		n, err := rdb.Exists(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bucket %s still there %s after the delete", keys[0], time.Since(recorded))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := ts.Deleted(ctx, fenceUpsert("a", 5)); err != nil || d {
		t.Fatalf("after Keep: Deleted = %v, %v; want false", d, err)
	}
}

// TestTombstones_Memory measures what a tombstone costs in Redis: 100,000
// deletes of 20-character ids in one bucket (the figure docs/CONSUMING.md
// gives).
func TestTombstones_Memory(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	ts, err := idempotency.NewTombstones(idempotency.TombstonesConfig{Client: rdb, Prefix: "escf:{m}:fence:bulk:deletes"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if err := ts.Record(ctx, fenceDelete(fmt.Sprintf("doc-%016d", i), int64(1_000_000+i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "escf:{m}:fence:bulk:deletes:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, k := range keys {
		b, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		bytes += b
	}
	per := float64(bytes) / n
	t.Logf("%d tombstones of 20-character ids in %s: %d bytes, %.0f B each", n, strings.Join(keys, ", "), bytes, per)
	if per > 200 {
		t.Errorf("%.0f B per tombstone; docs/CONSUMING.md says about 80", per)
	}
}
