package sink_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// A bulk sink mirroring the feed "orders" into another cluster, each source
// index into "mirror-<name>". Its handler is what a consumer.Pool runs for
// every event; here one event is applied by hand. (No output: the example
// needs a cluster and the feed's Redis.)
func ExampleNewBulk() {
	target, err := es.New(es.Config{URLs: []string{"https://mirror.example:9200"}, Username: "mirror", Password: "secret"})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	b, err := sink.NewBulk(sink.BulkConfig{
		ES:            target,
		Redis:         rdb,
		Keys:          redisx.NewKeys("orders"),
		IndexTemplate: "mirror-{index}",
		MaxBatch:      1000,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	}()

	h := b.Handler()
	err = h(context.Background(), redisx.Event{
		Op: redisx.OpUpsert, Index: "orders", IndexUUID: "kDZ8xJ3cT0mS1v2Q4w5e6A", Shard: 0,
		ID: "1", SeqNo: 42, PrimaryTerm: 1, Version: 3, Source: []byte(`{"total":12}`),
	})
	switch {
	case err == nil:
		// written, or the mirror already had this version or a newer one
	case redisx.IsPermanent(err):
		log.Printf("dead-letter: %v", err)
	default:
		log.Printf("left pending, retried later: %v", err)
	}
	log.Printf("%+v", b.Stats())
}
