package bootstrap_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// ExampleCopy joins a feed with no gap: the stream position first, then
// the copy through the sink, then the group at that position.
func ExampleCopy() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	source, err := es.New(es.Config{URLs: []string{"http://localhost:9200"}})
	if err != nil {
		log.Fatal(err)
	}
	keys := redisx.NewKeys("orders")
	info, err := rdb.XInfoStream(ctx, keys.Events()).Result()
	if err != nil {
		log.Fatal(err)
	}
	apply := func(ctx context.Context, e redisx.Event) error { // the sink
		fmt.Println(e.Op, e.Index, e.ID, e.SeqNo)
		return nil
	}
	res, err := bootstrap.Copy(ctx, bootstrap.Config{ES: source, Redis: rdb, Feed: "orders", Handler: apply})
	if err != nil {
		log.Fatal(err)
	}
	// Every document copied; the group reads on from the recorded position.
	if err := rdb.XGroupCreateMkStream(ctx, keys.Events(), "mirror", info.LastGeneratedID).Err(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Total(), "documents copied in", res.Duration)
}
