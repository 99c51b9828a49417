package deletes_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/engines"
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

// BenchmarkScan times delete scans of one shard of ESCF_BENCH_DOCS
// documents (default 1,000,000) that the feed delivered, after 100 deletes
// spread at random ("deletes_100") or 100 updates and 100 deletes
// ("updates_100_deletes_100"). Each iteration measures, in the same run:
//
//   - new: Scanner.Scan on the delivered ranges (histograms on _seq_no,
//     the seq nos of the ranges that differ, the re-check, the commit);
//   - old: the listing the scanner did before ranges, the part of its
//     scan that grows with the shard: every live id listed (PIT, pages of
//     5,000) into a scratch set in Redis, then SDIFF with the delivered
//     set. (Its stats, count, re-check and commit are left out: they are
//     the new scan's too.)
//
// and reports both, their ratio, and the share of the shard's ids listed
// (old: all; new: 0) and of its seq nos read. The cluster is the emulator,
// or the real engine ESCF_TEST_ENGINE names (tests/engines). Run with
//
//	go test -run XXX -bench BenchmarkScan -benchtime 3x -timeout 60m ./deletes/
//	ESCF_TEST_ENGINE=opensearch-2 go test -run XXX -bench BenchmarkScan -benchtime 3x -timeout 60m ./deletes/
func BenchmarkScan(b *testing.B) {
	docs := 1_000_000
	if v := os.Getenv("ESCF_BENCH_DOCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("ESCF_BENCH_DOCS=%q: want a number of documents >= 1000", v)
		}
		docs = n
	}
	ctx := context.Background()
	url := benchCluster(b)
	client, err := es.New(es.Config{URLs: []string{url}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.Info(ctx); err != nil {
		b.Fatal(err)
	}
	do := func(method, path, body string) {
		b.Helper()
		req, _ := newRequest(method, url+path, body)
		resp, err := httpClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 || bytes.Contains(msg, []byte(`"errors":true`)) {
			b.Fatalf("%s %s: %d %.300s", method, path, resp.StatusCode, msg)
		}
	}
	do("PUT", "/big", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"refresh_interval":"-1"}}`)
	ids := randomIDs(docs)
	for start := 0; start < docs; start += 5000 {
		var sb strings.Builder
		for _, id := range ids[start:min(start+5000, docs)] {
			fmt.Fprintf(&sb, "{\"index\":{\"_id\":%q}}\n{\"n\":1}\n", id)
		}
		do("POST", "/big/_bulk", sb.String())
	}
	do("POST", "/big/_refresh", "")
	rdb := redistest.Start(b).Client(b)
	rng := rand.New(rand.NewPCG(7, 7))
	live := slices.Clone(ids)
	for _, tc := range []struct {
		name    string
		updates int
	}{{"deletes_100", 0}, {"updates_100_deletes_100", 100}} {
		b.Run(tc.name, func(b *testing.B) {
			var newTime, oldTime time.Duration
			var st deletes.Stats
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// A feed that delivered the shard as it is now.
				keys := redisx.NewKeys(fmt.Sprintf("bench-%s-%d", tc.name, i))
				lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Hour})
				if ok, _ := lease.TryAcquire(ctx); !ok {
					b.Fatal("lease")
				}
				rdb.HSet(ctx, keys.Meta(), "created", "bench")
				store, _ := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
				stats, err := client.Stats(ctx, []string{"big"})
				if err != nil {
					b.Fatal(err)
				}
				uuid := stats["big"].UUID
				shardID := checkpoint.ShardID{IndexUUID: uuid, Shard: 0}
				var delivered []any
				if _, err := client.ListShard(ctx, "big", 0, "", 5000, es.ListingPIT, func(refs []es.DocRef) error {
					page := make([]checkpoint.Doc, len(refs))
					for j, r := range refs {
						page[j] = checkpoint.Doc{ID: r.ID, SeqNo: r.SeqNo}
						delivered = append(delivered, r.ID)
					}
					return store.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{shardID: page}})
				}); err != nil {
					b.Fatal(err)
				}
				oldSet := "old-delivered"
				rdb.Del(ctx, oldSet)
				for start := 0; start < len(delivered); start += 10000 {
					rdb.SAdd(ctx, oldSet, delivered[start:min(start+10000, len(delivered))]...)
				}
				// The changes since: updates (the relay reads them at their
				// new seq nos), then deletes, at random.
				rng.Shuffle(len(live), func(x, y int) { live[x], live[y] = live[y], live[x] })
				updated, gone := live[:tc.updates], live[tc.updates:tc.updates+100]
				var sb strings.Builder
				for _, id := range updated {
					fmt.Fprintf(&sb, "{\"index\":{\"_id\":%q}}\n{\"n\":2}\n", id)
				}
				for _, id := range gone {
					fmt.Fprintf(&sb, "{\"delete\":{\"_id\":%q}}\n", id)
				}
				do("POST", "/big/_bulk?refresh=true", sb.String())
				live = live[tc.updates+100:]
				live = append(live, updated...)
				stats, err = client.Stats(ctx, []string{"big"})
				if err != nil {
					b.Fatal(err)
				}
				sc0, _ := stats["big"].Shard(0)
				if len(updated) > 0 {
					res, err := client.Present(ctx, "big", 0, "", updated)
					if err != nil {
						b.Fatal(err)
					}
					var moved []checkpoint.Doc
					for _, r := range res {
						moved = append(moved, checkpoint.Doc{ID: r.ID, SeqNo: r.SeqNo})
					}
					if err := store.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{shardID: moved}}); err != nil {
						b.Fatal(err)
					}
				}
				sc, err := deletes.New(deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store, Interval: time.Nanosecond,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				sh := deletes.Shard{Index: "big", Target: "big", UUID: uuid, Shard: 0, Checkpoint: sc0.MaxSeqNo, Gap: int64(100 + tc.updates), Origin: -1}
				_, _ = sc.Scan(ctx, sh) // a new scanner's first sight of a shard starts its interval
				time.Sleep(time.Millisecond)

				b.StartTimer()
				t0 := time.Now()
				res, err := sc.Scan(ctx, sh)
				newTime += time.Since(t0)
				if err != nil || res.Deleted != 100 {
					b.Fatalf("scan: %+v %v", res, err)
				}
				t0 = time.Now()
				cands := oldListing(b, client, rdb, keys, oldSet)
				oldTime += time.Since(t0)
				b.StopTimer()
				if cands != 100 {
					b.Fatalf("the old listing found %d candidates, want 100", cands)
				}
				s := sc.Stats()
				st.RangesCompared += s.RangesCompared
				st.RangesDiffered += s.RangesDiffered
				st.SeqNosRead += s.SeqNosRead
				st.ListedIDs += s.ListedIDs
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(newTime.Seconds()*1000/n, "new_ms/scan")
			b.ReportMetric(oldTime.Seconds()*1000/n, "old_ms/scan")
			b.ReportMetric(oldTime.Seconds()/newTime.Seconds(), "old/new")
			b.ReportMetric(100*float64(st.ListedIDs)/n/float64(docs), "new_%ids_listed")
			b.ReportMetric(100*float64(st.SeqNosRead)/n/float64(docs), "new_%seqnos_read")
			b.ReportMetric(float64(st.RangesDiffered)/n, "ranges_read")
			b.ReportMetric(float64(st.RangesCompared)/n, "ranges_compared")
		})
	}
}

// oldListing is the listing of the scanner before delivered ranges: every
// live id of the shard into a scratch set, then SDIFF with the delivered
// set. It returns the candidates.
func oldListing(b *testing.B, client *es.Client, rdb *redis.Client, keys redisx.Keys, delivered string) int {
	ctx := context.Background()
	scratch := "old-scratch"
	rdb.Del(ctx, scratch)
	if _, err := client.ListShard(ctx, "big", 0, "", 5000, es.ListingPIT, func(refs []es.DocRef) error {
		ids := make([]any, len(refs))
		for i, r := range refs {
			ids[i] = r.ID
		}
		return rdb.SAdd(ctx, scratch, ids...).Err()
	}); err != nil {
		b.Fatal(err)
	}
	cands, err := rdb.SDiff(ctx, delivered, scratch).Result()
	if err != nil {
		b.Fatal(err)
	}
	return len(cands)
}

// benchCluster is the emulator, or the real engine ESCF_TEST_ENGINE names.
func benchCluster(b *testing.B) string {
	if name := os.Getenv("ESCF_TEST_ENGINE"); name != "" {
		return engines.StartTB(b, engines.Config{Engine: name, Nodes: 1, Heap: "2g"}).URL()
	}
	c, err := esemu.New(esemu.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c.URL()
}
