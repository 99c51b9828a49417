package deletes_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/es"
	"github.com/es-changefeed/es-changefeed/tests/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// randomIDs returns n distinct 20-character ids, like ES's auto ids.
func randomIDs(n int) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j := 0; j < 20; j++ {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		out[i] = b.String()
	}
	return out
}

// BenchmarkDeliveredIDMemory reports the bytes per delivered id in Redis
// (MEMORY USAGE ... SAMPLES 0) for the layout the feed uses, one plain set
// per shard, and for the alternative of ids hashed into 1024 small hashes
// (listpack encoded), with 100k 20-character ids.
func BenchmarkDeliveredIDMemory(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	ids := randomIDs(100_000)
	b.Run("set", func(b *testing.B) {
		var perID float64
		for i := 0; i < b.N; i++ {
			rdb.Del(ctx, "delivered")
			for start := 0; start < len(ids); start += 1000 {
				chunk := make([]any, 0, 1000)
				for _, id := range ids[start:min(start+1000, len(ids))] {
					chunk = append(chunk, id)
				}
				rdb.SAdd(ctx, "delivered", chunk...)
			}
			mem, err := rdb.MemoryUsage(ctx, "delivered", 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			perID = float64(mem) / float64(len(ids))
		}
		b.ReportMetric(perID, "B/id")
	})
	b.Run("1024_listpack_hashes", func(b *testing.B) {
		var perID float64
		for i := 0; i < b.N; i++ {
			keys := make([]string, 1024)
			for j := range keys {
				keys[j] = fmt.Sprintf("bucket:%d", j)
			}
			rdb.Del(ctx, keys...)
			pipe := rdb.Pipeline()
			for _, id := range ids {
				h := fnv.New32a()
				h.Write([]byte(id))
				pipe.HSet(ctx, keys[h.Sum32()%1024], id, "")
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			var total int64
			for _, k := range keys {
				mem, err := rdb.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				total += mem
			}
			perID = float64(total) / float64(len(ids))
		}
		b.ReportMetric(perID, "B/id")
	})
}

// BenchmarkScan times a full delete scan (count proof fails, listing of the
// shard's live ids into Redis, SDIFF, re-check, durability wait, commit) of
// one 200,000-document shard from which 100 delivered documents were
// deleted. The baseline in the same run is one 5,000-id listing page.
func BenchmarkScan(b *testing.B) {
	const docs = 200_000
	c, err := esemu.New(esemu.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	client, err := es.New(es.Config{URLs: []string{c.URL()}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.Info(ctx); err != nil {
		b.Fatal(err)
	}
	put := func(method, path, body string) {
		b.Helper()
		req, _ := newRequest(method, c.URL()+path, body)
		resp, err := httpClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	put("PUT", "/big", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"refresh_interval":"-1"}}`)
	ids := randomIDs(docs)
	for start := 0; start < docs; start += 5000 {
		var sb strings.Builder
		for _, id := range ids[start : start+5000] {
			fmt.Fprintf(&sb, "{\"index\":{\"_id\":%q}}\n{\"n\":1}\n", id)
		}
		put("POST", "/big/_bulk", sb.String())
	}
	put("POST", "/big/_refresh", "")
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	keys := redisx.NewKeys("bench")
	lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Minute})
	if ok, _ := lease.TryAcquire(ctx); !ok {
		b.Fatal("lease")
	}
	store, _ := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	st, err := client.Stats(ctx, []string{"big"})
	if err != nil {
		b.Fatal(err)
	}
	uuid := st["big"].UUID

	b.Run("listing_page_5000", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			n := 0
			_, err := client.ListShard(ctx, "big", 0, "", 5000, es.ListingPIT, func(refs []es.DocRef) error {
				n += len(refs)
				if n >= 5000 {
					return errStop
				}
				return nil
			})
			if err != errStop {
				b.Fatal(err)
			}
		}
	})
	b.Run("full_scan_200k", func(b *testing.B) {
		var listed time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			// Deliver every id, plus 100 that are gone.
			rdb.Del(ctx, keys.Delivered(uuid, 0))
			for start := 0; start < docs; start += 10000 {
				chunk := make([]any, 0, 10000)
				for _, id := range ids[start : start+10000] {
					chunk = append(chunk, id)
				}
				rdb.SAdd(ctx, keys.Delivered(uuid, 0), chunk...)
			}
			for j := 0; j < 100; j++ {
				rdb.SAdd(ctx, keys.Delivered(uuid, 0), fmt.Sprintf("gone-%d", j))
			}
			sc, err := deletes.New(deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store, Interval: time.Nanosecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			sh := deletes.Shard{Index: "big", Target: "big", UUID: uuid, Shard: 0, Checkpoint: docs - 1, Gap: 1, Origin: -1}
			_, _ = sc.Scan(ctx, sh) // a new scanner's first sight of a shard starts its interval
			time.Sleep(time.Millisecond)
			b.StartTimer()
			t0 := time.Now()
			res, err := sc.Scan(ctx, sh)
			listed += time.Since(t0)
			if err != nil || res.Deleted != 100 {
				b.Fatalf("scan: %+v %v", res, err)
			}
		}
		b.ReportMetric(float64(docs)*float64(b.N)/listed.Seconds(), "ids/s")
	})
}

var errStop = fmt.Errorf("stop")
