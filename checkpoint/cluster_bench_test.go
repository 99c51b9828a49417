package checkpoint_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkCommit_Cluster compares checkpoint.Commit on a Redis Cluster
// (3 masters + 3 replicas, redis-cluster:// URL: go-redis's cluster client,
// WATCH with the lease key), without and with WaitReplicas 1 (WAIT 1 after
// EXEC), with Commit on one redis-server (the baseline), in the same run:
// each iteration commits one batch to each, rotating which goes first,
// timed separately. Ratios are events/s against the baseline
// (docs/PERFORMANCE.md).
func BenchmarkCommit_Cluster(b *testing.B) {
	c := redistest.StartCluster(b, redistest.ClusterOptions{Replicas: 1})
	run := 0 // each invocation its own feeds (and leases)
	for _, batch := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			evs := benchEvents(batch)
			ids := make([]checkpoint.Doc, batch)
			for i, e := range evs {
				ids[i] = checkpoint.Doc{ID: e.ID}
			}
			single, lease, _ := newStore(b, "bench", time.Minute)
			if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
				b.Fatal("acquire", err)
			}
			run++
			feed := fmt.Sprintf("bench%d-%d", batch, run)
			cl, crdb := clusterStore(b, c, feed, checkpoint.Config{})
			wt, wrdb := clusterStore(b, c, feed+"w", checkpoint.Config{WaitReplicas: 1})
			shard := checkpoint.ShardID{IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 0}
			stores := []*checkpoint.Store{single, cl, wt}
			times := make([]time.Duration, len(stores))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range stores {
					k := (i + j) % len(stores)
					t0 := time.Now()
					err := stores[k].Commit(ctx, checkpoint.Batch{Events: evs,
						Checkpoints: map[checkpoint.ShardID]int64{shard: int64(i)},
						Delivered:   map[checkpoint.ShardID][]checkpoint.Doc{shard: ids}})
					times[k] += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
				}
				if i%20 == 19 { // keep the streams small, outside the timings
					single.Client().Del(ctx, single.Keys().Events())
					crdb.Del(ctx, cl.Keys().Events())
					wrdb.Del(ctx, wt.Keys().Events())
				}
			}
			events := float64(batch * b.N)
			b.ReportMetric(events/times[0].Seconds(), "single_events/s")
			b.ReportMetric(events/times[1].Seconds(), "cluster_events/s")
			b.ReportMetric(events/times[2].Seconds(), "cluster_wait1_events/s")
			b.ReportMetric(times[0].Seconds()/times[1].Seconds(), "ratio_cluster")
			b.ReportMetric(times[0].Seconds()/times[2].Seconds(), "ratio_wait1")
		})
	}
}
