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

	// One hash per index: "{cache}:fence:example:U1", in the slot of the
	// cache keys "{cache}:…" (see Config.SlotOf for keys without a tag).
	fence, err := idempotency.New(idempotency.Config{Client: client, Prefix: "{cache}:fence:example"})
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
// skipped (and acknowledged); successful events are recorded; an
// index_deleted event drops its index's fences, and the index's late
// events are skipped.
func ExampleMiddleware() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	// Hashes "escf:{orders}:fence:mailer:<index_uuid>".
	fence, err := idempotency.New(idempotency.Config{Client: client, Prefix: redisx.NewKeys("orders").Fence("mailer")})
	if err != nil {
		panic(err)
	}
	send := func(ctx context.Context, e redisx.Event) error {
		if e.Op == redisx.OpIndexDeleted {
			fmt.Printf("mail: index %s deleted\n", e.IndexUUID)
			return nil
		}
		fmt.Printf("mail about %s %s at seq_no %d\n", e.Op, e.ID, e.SeqNo)
		return nil
	}
	h := redisx.Chain(send, idempotency.Middleware(fence))
	ctx := context.Background()
	for _, e := range []redisx.Event{
		{Op: redisx.OpUpsert, IndexUUID: "U1", ID: "42", SeqNo: 1},
		{Op: redisx.OpUpsert, IndexUUID: "U1", ID: "42", SeqNo: 1}, // redelivered
		{Op: redisx.OpDelete, IndexUUID: "U1", ID: "42", SeqNo: 1}, // deleted after that version
		{Op: redisx.OpIndexDeleted, IndexUUID: "U1"},               // the index is gone: its fences go
		{Op: redisx.OpUpsert, IndexUUID: "U1", ID: "43", SeqNo: 0}, // late: skipped
	} {
		if err := h(ctx, e); err != nil {
			panic(err)
		}
	}
	n, _ := client.Exists(ctx, "escf:{orders}:fence:mailer:U1").Result()
	fmt.Println("fence hashes left of U1:", n, "(its marker, expiring after Config.EndGrace)")
	// Output:
	// mail about upsert 42 at seq_no 1
	// mail about delete 42 at seq_no 1
	// mail: index U1 deleted
	// fence hashes left of U1: 1 (its marker, expiring after Config.EndGrace)
}
