package checkpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// benchEvents makes n upserts of ~200-byte documents.
func benchEvents(n int) []redisx.Event {
	evs := make([]redisx.Event, n)
	for i := range evs {
		src, _ := json.Marshal(map[string]any{"customer": fmt.Sprintf("customer-%d", i%97), "status": "shipped",
			"amount": float64(i) * 1.25, "note": "a note of moderate length to make the source realistic",
			"tags": []string{"a", "b", "c"}})
		evs[i] = redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: i % 3,
			ID: fmt.Sprintf("order-%08d", i), SeqNo: int64(i), PrimaryTerm: 1, Version: 1, Source: src, Target: "orders"}
	}
	return evs
}

// BenchmarkCommit compares checkpoint.Commit (WATCH lease + GET in one
// round trip, then MULTI, XADD × n, SADD, HSET, EXEC) with raw pipelined
// XADDs of the same entries on the same real redis-server. Each iteration
// does one batch of each, alternating which goes first, timed separately,
// so both see the same machine state; the ratio is commit/raw events/s
// (docs/PERFORMANCE.md).
func BenchmarkCommit(b *testing.B) {
	for _, batch := range []int{100, 500, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			evs := benchEvents(batch)
			// As the relay delivers a shard's pages: each commit records
			// its documents at the next seq nos, in new ranges.
			ids := make([]checkpoint.Doc, batch)
			for i, e := range evs {
				ids[i] = checkpoint.Doc{ID: e.ID}
			}
			var next int64
			st, lease, srv := newStore(b, "bench", time.Minute)
			ctx := context.Background()
			if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
				b.Fatal("acquire", err)
			}
			rdb := srv.Client(b)
			keys := redisx.NewKeys("bench")
			rawStream := "raw:" + keys.Events()
			shard := checkpoint.ShardID{IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 0}
			raw := func() {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, e := range evs {
						p.XAdd(ctx, &redis.XAddArgs{Stream: rawStream, Values: e.Values()})
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			commit := func(i int) {
				for j := range ids {
					ids[j].SeqNo = next
					next++
				}
				err := st.Commit(ctx, checkpoint.Batch{
					Events:      evs,
					Checkpoints: map[checkpoint.ShardID]int64{shard: int64(i)},
					Delivered:   map[checkpoint.ShardID][]checkpoint.Doc{shard: ids},
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			var rawTime, commitTime time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					t0 := time.Now()
					raw()
					t1 := time.Now()
					commit(i)
					rawTime, commitTime = rawTime+t1.Sub(t0), commitTime+time.Since(t1)
				} else {
					t0 := time.Now()
					commit(i)
					t1 := time.Now()
					raw()
					commitTime, rawTime = commitTime+t1.Sub(t0), rawTime+time.Since(t1)
				}
				if i%20 == 19 { // keep both streams and the ranges small, outside the timings
					rdb.Del(ctx, rawStream, keys.Events())
					rk, _ := rdb.Keys(ctx, keys.DeliveredRangePrefix(shard.IndexUUID, shard.Shard)+"*").Result()
					rdb.Del(ctx, append(rk, keys.DeliveredCounts(shard.IndexUUID, shard.Shard))...)
				}
			}
			events := float64(batch * b.N)
			b.ReportMetric(events/rawTime.Seconds(), "raw_events/s")
			b.ReportMetric(events/commitTime.Seconds(), "commit_events/s")
			b.ReportMetric(rawTime.Seconds()/commitTime.Seconds(), "ratio")
		})
	}
}
