package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkPool compares a Pool with a no-op handler (8 lanes, decoding
// every entry, batched XACKs) with the raw loop a hand-written consumer
// would run (XREADGROUP COUNT 100, then one XACK of the page), on the same
// real redis-server, each draining the same 20,000 events per iteration.
// The ratio is pool/raw events/s (docs/PERFORMANCE.md).
func BenchmarkPool(b *testing.B) {
	const n = 20_000
	// A pool's last blocking read outlives its Run (it is abandoned, not
	// interrupted); deleting the stream under it makes go-redis log.
	redis.SetLogger(silent{})
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	var rawTime, poolTime time.Duration
	for i := 0; i < b.N; i++ {
		keys := redisx.NewKeys(fmt.Sprintf("bench%d", i))
		addEvents(b, rdb, keys, n, 1000)
		rdb.XGroupCreate(ctx, keys.Events(), "raw", "0")
		t0 := time.Now()
		for done := 0; done < n; {
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "raw", Consumer: "c", Streams: []string{keys.Events(), ">"}, Count: 100}).Result()
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, 0, 100)
			for _, m := range res[0].Messages {
				if _, err := redisx.ParseEvent(m); err != nil {
					b.Fatal(err)
				}
				ids = append(ids, m.ID)
			}
			if err := rdb.XAck(ctx, keys.Events(), "raw", ids...).Err(); err != nil {
				b.Fatal(err)
			}
			done += len(ids)
		}
		rawTime += time.Since(t0)

		p, err := consumer.NewPool(consumer.PoolConfig{Client: rdb, Keys: keys, Group: "pool", Logger: quiet, Block: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		pctx, cancel := context.WithCancel(ctx)
		out := make(chan error, 1)
		t1 := time.Now()
		go func() { out <- p.Run(pctx, func(context.Context, redisx.Event) error { return nil }) }()
		for p.Stats().Acked < n {
			time.Sleep(200 * time.Microsecond)
		}
		poolTime += time.Since(t1)
		cancel()
		if err := <-out; err != nil {
			b.Fatal(err)
		}
		rdb.Del(ctx, keys.Events())
	}
	events := float64(n * b.N)
	b.ReportMetric(events/rawTime.Seconds(), "raw_events/s")
	b.ReportMetric(events/poolTime.Seconds(), "pool_events/s")
	b.ReportMetric(rawTime.Seconds()/poolTime.Seconds(), "ratio")
}

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}
