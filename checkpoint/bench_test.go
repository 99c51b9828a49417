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

// BenchmarkCommit compares checkpoint.Commit (WATCH lease, GET, MULTI, XADD
// × n, SADD, HSET, EXEC) with raw pipelined XADDs of the same entries, on a
// real redis-server, at several batch sizes. Report: events/s of each and
// their ratio (docs/PERFORMANCE.md).
func BenchmarkCommit(b *testing.B) {
	for _, batch := range []int{100, 500, 1000} {
		evs := benchEvents(batch)
		ids := make([]string, batch)
		for i, e := range evs {
			ids[i] = e.ID
		}
		b.Run(fmt.Sprintf("raw_pipelined_xadd/batch=%d", batch), func(b *testing.B) {
			st, _, srv := newStore(b, "bench", time.Minute)
			_ = st
			rdb := srv.Client(b)
			ctx := context.Background()
			stream := redisx.NewKeys("bench").Events()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, e := range evs {
						p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: e.Values()})
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if i%20 == 19 {
					b.StopTimer()
					rdb.Del(ctx, stream)
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("checkpoint_commit/batch=%d", batch), func(b *testing.B) {
			st, lease, srv := newStore(b, "bench", time.Minute)
			ctx := context.Background()
			if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
				b.Fatal("acquire", err)
			}
			rdb := srv.Client(b)
			keys := redisx.NewKeys("bench")
			shard := checkpoint.ShardID{IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 0}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				err := st.Commit(ctx, checkpoint.Batch{
					Events:      evs,
					Checkpoints: map[checkpoint.ShardID]int64{shard: int64(i)},
					Delivered:   map[checkpoint.ShardID][]string{shard: ids},
				})
				if err != nil {
					b.Fatal(err)
				}
				if i%20 == 19 {
					b.StopTimer()
					rdb.Del(ctx, keys.Events())
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
