package deletes_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestDeliveredLayout_Memory measures, with a real redis-server, the bytes
// per delivered id of the feed's layout as its commits write it (delivered
// ranges of redisx.RangeSize seq nos and their counts hash; it fails above
// 40 B/id), of the layout before it (one set per shard, plus the routing
// hash when every id is routed) and of variants of the range hashes (one
// hash per K seq nos of a shard, field id -> seq no offset in the range,
// listpack-encoded under the default hash-max-listpack-entries 128 and
// -value 64; with or without the counts hash). It logs two figures per layout: MEMORY USAGE summed
// over the layout's keys (SAMPLES 0), and the growth of INFO used_memory,
// which also counts the main dictionary's buckets. Run it with
//
//	go test -run TestDeliveredLayout_Memory -v ./deletes/
//
// It is skipped with -short (1,000,000 ids take ~30 s).
func TestDeliveredLayout_Memory(t *testing.T) {
	if testing.Short() {
		t.Skip("memory figures: 1,000,000 ids; run without -short")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := redisx.NewKeys("memfeed")
	const uuid, shard = "tK3bC5uFQ1ycs9wGXgwYQA", 0 // an index uuid is 22 characters

	type layout struct {
		name string
		// density: the share of a range's seq nos that hold a delivered
		// document (1: append-only; 0.5: half were superseded or deleted).
		density float64
		k       int64 // range size; 0: today's set
		routed  bool  // every id has a 10-character routing value
		// absolute stores the seq no itself, not its offset in the range.
		absolute bool
		// counts adds the shard's counts hash: field range -> ids in it.
		counts bool
		// commit writes the feed's own layout, through checkpoint.Store's
		// commits (redisx.RangeSize, counts hash): it must stay within the
		// issue's 40 B per id.
		commit bool
	}
	layouts := []layout{
		{name: "feed: Store.Commit", density: 1, commit: true},
		{name: "feed: Store.Commit, density 0.5", density: 0.5, commit: true},
		{name: "set", density: 1},
		{name: "set+routing", density: 1, routed: true},
		{name: "ranges_K128", density: 1, k: 128},
		{name: "ranges_K128_absolute_seq", density: 1, k: 128, absolute: true},
		{name: "ranges_K64", density: 1, k: 64},
		{name: "ranges_K128_density_0.5", density: 0.5, k: 128},
		{name: "ranges_K128_density_0.1", density: 0.1, k: 128},
		{name: "ranges_K128+routing_in_value", density: 1, k: 128, routed: true},
		{name: "ranges_K128+counts_hash", density: 1, k: 128, counts: true},
		{name: "ranges_K64+counts_hash", density: 1, k: 64, counts: true},
	}
	for _, n := range []int{20_000, 1_000_000} {
		ids := randomIDs(n)
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%d/%s", n, l.name), func(t *testing.T) {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				var written []string
				before := usedMemory(t, rdb)
				if l.commit {
					// A new lease and store: FLUSHALL dropped the last one's.
					lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Hour})
					if ok, err := lease.TryAcquire(ctx); !ok || err != nil {
						t.Fatalf("lease: %v %v", ok, err)
					}
					store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
					if err != nil {
						t.Fatal(err)
					}
					before = usedMemory(t, rdb)
					written = commitLayout(t, store, keys, uuid, shard, ids, l.density)
				} else {
					written = writeLayout(t, rdb, keys, uuid, shard, ids, l.k, l.density, l.routed, l.absolute, l.counts)
				}
				after := usedMemory(t, rdb)
				var usage int64
				for start := 0; start < len(written); start += 10_000 {
					pipe := rdb.Pipeline()
					var cmds []*redis.IntCmd
					for _, key := range written[start:min(start+10_000, len(written))] {
						cmds = append(cmds, pipe.MemoryUsage(ctx, key, 0))
					}
					if _, err := pipe.Exec(ctx); err != nil {
						t.Fatal(err)
					}
					for _, c := range cmds {
						usage += c.Val()
					}
				}
				probe := written[0] // a range hash or today's set, not the counts hash
				if strings.HasSuffix(probe, ":counts") || strings.Contains(probe, ":dlvcount:") {
					probe = written[1]
				}
				enc, err := rdb.ObjectEncoding(ctx, probe).Result()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%-30s ids=%-8d keys=%-6d encoding=%-9s MEMORY USAGE %6.1f B/id, used_memory %6.1f B/id",
					l.name, n, len(written), enc, float64(usage)/float64(n), float64(after-before)/float64(n))
				if (l.k > 0 && l.k <= 128 || l.commit) && enc != "listpack" {
					t.Errorf("a range hash of K=%d is %s-encoded, want listpack", l.k, enc)
				}
				if perID := float64(usage) / float64(n); l.commit && perID > 40 {
					t.Errorf("the feed's layout takes %.1f B per delivered id, want <= 40", perID)
				}
			})
		}
	}
}

// commitLayout delivers ids through the store's commits (1,000 per
// commit, as the relay's pages), id i at seq no i/density, and returns the
// keys written: the counts hash first.
func commitLayout(tb testing.TB, store *checkpoint.Store, keys redisx.Keys, uuid string, shard int, ids []string, density float64) []string {
	tb.Helper()
	id := checkpoint.ShardID{IndexUUID: uuid, Shard: shard}
	order := []string{keys.DeliveredCounts(uuid, shard)}
	last := int64(-1)
	for start := 0; start < len(ids); start += 1000 {
		docs := make([]checkpoint.Doc, 0, 1000)
		for i := start; i < min(start+1000, len(ids)); i++ {
			seq := int64(float64(i) / density)
			docs = append(docs, checkpoint.Doc{ID: ids[i], SeqNo: seq})
			if r := checkpoint.Range(seq); r != last {
				order = append(order, keys.DeliveredRange(uuid, shard, r))
				last = r
			}
		}
		if err := store.Commit(context.Background(), checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{id: docs}}); err != nil {
			tb.Fatal(err)
		}
	}
	return order
}

// writeLayout writes ids in one layout and returns the keys it wrote. Id i
// is at seq no i/density.
func writeLayout(tb testing.TB, rdb *redis.Client, keys redisx.Keys, uuid string, shard int, ids []string, k int64, density float64, routed, absolute, counts bool) []string {
	tb.Helper()
	ctx := context.Background()
	set, routing := keys.Delivered(uuid, shard), keys.Routing(uuid, shard)
	written := map[string]bool{}
	var order []string
	for start := 0; start < len(ids); start += 10_000 {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+10_000, len(ids)); i++ {
			id := ids[i]
			r := "user" + strconv.Itoa(100000+i%900000) // 10 characters
			var key string
			switch {
			case k == 0:
				key = set
				pipe.SAdd(ctx, set, id)
				if routed {
					pipe.HSet(ctx, routing, id, r)
					if !written[routing] {
						written[routing] = true
						order = append(order, routing)
					}
				}
			default:
				seq := int64(float64(i) / density)
				rng := seq / k
				key = set + ":" + strconv.FormatInt(rng, 10)
				var v any = seq - rng*k
				if absolute {
					v = seq
				}
				if routed {
					v = strconv.FormatInt(seq-rng*k, 10) + " " + r
				}
				pipe.HSet(ctx, key, id, v)
				if counts {
					pipe.HIncrBy(ctx, set+":counts", strconv.FormatInt(rng, 10), 1)
					pipe.HIncrBy(ctx, set+":counts", "total", 1)
					if !written[set+":counts"] {
						written[set+":counts"] = true
						order = append(order, set+":counts")
					}
				}
			}
			if !written[key] {
				written[key] = true
				order = append(order, key)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	return order
}

// usedMemory is INFO memory's used_memory.
func usedMemory(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("INFO memory has no used_memory")
	return 0
}
