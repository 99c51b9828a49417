package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// A worker pool applying a feed's events: the handler returns nil to have
// an event acknowledged. (miniredis stands in for Redis here; use
// redisx.NewClient("redis://…") in real code.)
func ExamplePool() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	keys := redisx.NewKeys("orders")
	for i, status := range []string{"new", "paid", "shipped"} {
		e := redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U", Shard: 0, ID: "order-1",
			SeqNo: int64(i), PrimaryTerm: 1, Version: int64(i + 1), Source: json.RawMessage(`{"status":"` + status + `"}`)}
		rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Events(), Values: e.Values()})
	}

	pool, err := consumer.NewPool(consumer.PoolConfig{Client: rdb, Keys: keys, Group: "mirror", Consumer: "worker-1", Logger: quiet})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var n atomic.Int64
	err = pool.Run(ctx, func(ctx context.Context, e redisx.Event) error {
		fmt.Printf("%s %s seq %d: %s\n", e.Op, e.ID, e.SeqNo, e.Source)
		if n.Add(1) == 3 {
			stop() // a real consumer runs until SIGTERM
		}
		return nil
	})
	fmt.Println("stopped:", err)
	// Output:
	// upsert order-1 seq 0: {"status":"new"}
	// upsert order-1 seq 1: {"status":"paid"}
	// upsert order-1 seq 2: {"status":"shipped"}
	// stopped: <nil>
}
