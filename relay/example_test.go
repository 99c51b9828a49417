package relay_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/relay"
)

// A feed of the indices behind orders-* in three partitions, with delete
// detection and safe trimming, until SIGINT.
func ExampleNewFeed() {
	client, err := es.New(es.Config{URLs: []string{"http://localhost:9200"}})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	f, err := relay.NewFeed(relay.FeedConfig{
		ES: client, Redis: rdb, Feed: "orders", Targets: []string{"orders-*"}, Partitions: 3,
		Deletes:   relay.Deletes{Enabled: true},
		Retention: relay.Retention{Trim: true},
		Metrics:   prometheus.NewRegistry(),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := f.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
