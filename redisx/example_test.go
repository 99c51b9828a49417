package redisx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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

	pool, err := redisx.NewPool(redisx.PoolConfig{Client: rdb, Keys: keys, Group: "mirror", Consumer: "worker-1", Logger: quiet})
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

// Middleware wraps handlers; Permanent marks errors that retrying cannot
// fix, so the event is dead-lettered at once.
func ExampleChain() {
	logged := func(next redisx.Handler) redisx.Handler {
		return func(ctx context.Context, e redisx.Event) error {
			err := next(ctx, e)
			fmt.Printf("%s %s: permanent=%v\n", e.Op, e.ID, redisx.IsPermanent(err))
			return err
		}
	}
	h := redisx.Chain(func(ctx context.Context, e redisx.Event) error {
		if e.Source == nil {
			return redisx.Permanent(fmt.Errorf("event %s has no source", e.ID))
		}
		return nil
	}, logged)
	_ = h(context.Background(), redisx.Event{Op: redisx.OpUpsert, ID: "a", Source: json.RawMessage(`{}`)})
	_ = h(context.Background(), redisx.Event{Op: redisx.OpUpsert, ID: "b"})
	// Output:
	// upsert a: permanent=false
	// upsert b: permanent=true
}
