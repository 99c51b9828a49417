package sink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// exampleEvent is the upsert of the seed line.
var exampleEvent = redisx.Event{Op: redisx.OpUpsert, Index: "escf-cli", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 1, ID: "1",
	SeqNo: 2, PrimaryTerm: 1, Version: 2, Source: json.RawMessage(`{"title": "edited"}`)}

// One JSON line per event on stdout. In a consumer, pass s.Handler() to a
// consumer.Pool instead of calling it.
func ExampleNewStdout() {
	s, err := sink.NewStdout(sink.StdoutConfig{})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())
	if err := s.Handler()(context.Background(), exampleEvent); err != nil {
		panic(err)
	}
	// Output:
	// {"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title":"edited"}}
}

// JSON lines appended to a file, fsynced before the handler returns and
// rotated at 100 MiB (events.jsonl.1 ... events.jsonl.5).
func ExampleNewFile() {
	dir, err := os.MkdirTemp("", "escf-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.jsonl")

	s, err := sink.NewFile(sink.FileConfig{Path: path})
	if err != nil {
		panic(err)
	}
	del := redisx.Event{Op: redisx.OpDelete, Index: "escf-cli", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 1, ID: "1", SeqNo: 2}
	for _, e := range []redisx.Event{exampleEvent, del} {
		if err := s.Handler()(context.Background(), e); err != nil {
			panic(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output:
	// {"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title":"edited"}}
	// {"op":"delete","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2}
}

// Batches of events POSTed to a webhook; the receiver deduplicates by the
// Idempotency-Key header (or by each event's fields).
func ExampleNewHTTP() {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s\n%s\n", r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key")[:12], body)
	}))
	defer hook.Close()

	s, err := sink.NewHTTP(sink.HTTPConfig{URL: hook.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())
	if err := s.Handler()(context.Background(), exampleEvent); err != nil {
		panic(err) // 5xx, 429, timeouts: retried; other 4xx: redisx.IsPermanent(err)
	}
	// Output:
	// Bearer s3cret bd7e97843bfd
	// [{"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title":"edited"}}]
}

// A cache kept in step with an index: each upsert sets the document's key
// to its source, each delete removes it; a late, older event changes
// nothing.
func ExampleNewRedis() {
	mr, err := miniredis.Run() // the cache's Redis; an embedded one for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	cache := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer cache.Close()

	s, err := sink.NewRedis(sink.RedisConfig{Client: cache, Mode: sink.RedisSet, Key: "cache:{index}:{id}"})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	older := exampleEvent
	older.SeqNo, older.Source = 1, json.RawMessage(`{"title":"draft"}`)
	for _, e := range []redisx.Event{exampleEvent, older} {
		if err := s.Handler()(ctx, e); err != nil {
			panic(err)
		}
	}
	fmt.Println(cache.Get(ctx, "cache:escf-cli:1").Val())
	// Output:
	// {"title": "edited"}
}

func ExampleParseKeyTemplate() {
	tpl, err := sink.ParseKeyTemplate("cache:{{c}}:{index}:{id}") // {{c}}: a literal hash tag for Redis Cluster
	if err != nil {
		panic(err)
	}
	fmt.Println(tpl.Key(exampleEvent))
	_, err = sink.ParseKeyTemplate("cache:{idx}:{id}")
	fmt.Println(err)
	// Output:
	// cache:{c}:escf-cli:1
	// bad key template "cache:{idx}:{id}": unknown placeholder "{idx}" (known: {index}, {index_uuid}, {shard}, {id}, {routing})
}
