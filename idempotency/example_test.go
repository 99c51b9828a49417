package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// A cache writer that applies each version of a document at most once and
// never an older one over a newer one, even when events arrive reordered.
func ExampleFence_ApplyRedis() {
	mr, err := miniredis.Run() // any Redis; an embedded one for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	fence, err := idempotency.New(idempotency.Config{Client: client, Key: "{cache}:fence:example"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	events := []redisx.Event{
		{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", ID: "42", SeqNo: 8, Source: json.RawMessage(`{"total":30}`)},
		{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", ID: "42", SeqNo: 3, Source: json.RawMessage(`{"total":10}`)}, // older, late
		{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", ID: "42", SeqNo: 8, Source: json.RawMessage(`{"total":30}`)}, // redelivered
	}
	for _, e := range events {
		applied, err := fence.ApplyRedis(ctx, e, idempotency.Set{Key: "{cache}:orders:42", Value: e.Source})
		if err != nil {
			panic(err)
		}
		fmt.Printf("seq_no %d applied: %v\n", e.SeqNo, applied)
	}
	v, _ := client.Get(ctx, "{cache}:orders:42").Result()
	fmt.Println("cache:", v)
	// Output:
	// seq_no 8 applied: true
	// seq_no 3 applied: false
	// seq_no 8 applied: false
	// cache: {"total":30}
}

// Middleware fences any handler: redeliveries and older versions are
// skipped (and acknowledged); successful events are recorded.
func ExampleMiddleware() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	fence, err := idempotency.New(idempotency.Config{Client: client, Key: redisx.NewKeys("orders").Fence("mailer")})
	if err != nil {
		panic(err)
	}
	send := func(ctx context.Context, e redisx.Event) error {
		fmt.Printf("mail about %s %s at seq_no %d\n", e.Op, e.ID, e.SeqNo)
		return nil
	}
	h := redisx.Chain(send, idempotency.Middleware(fence))
	ctx := context.Background()
	for _, e := range []redisx.Event{
		{Op: redisx.OpUpsert, IndexUUID: "U1", ID: "42", SeqNo: 1},
		{Op: redisx.OpUpsert, IndexUUID: "U1", ID: "42", SeqNo: 1}, // redelivered
		{Op: redisx.OpDelete, IndexUUID: "U1", ID: "42", SeqNo: 1}, // deleted after that version
	} {
		if err := h(ctx, e); err != nil {
			panic(err)
		}
	}
	// Output:
	// mail about upsert 42 at seq_no 1
	// mail about delete 42 at seq_no 1
}
