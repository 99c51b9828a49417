package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkRelay_RealEngine measures the relay reading a real node (the
// engine of ESCF_TEST_ENGINE, default opensearch-2) against the loop a
// hand-written at-least-once relay would run on the same node and Redis
// in the same run: per shard, search by _seq_no with search_after in pages
// of 1,000, decode the hits, pipeline one XADD per hit with the same
// fields; no refresh, no transaction, no checkpoint, no delivered ids. The
// node holds 100,000 documents (~110 B sources) in 4 shards; each run
// reads them all into a fresh stream. Run with -benchtime 1x -count N.
func BenchmarkRelay_RealEngine(b *testing.B) {
	const docs, shards, page = 100000, 4, 1000
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = engines.DefaultEngine
	}
	// A node as in production: G1 and the optimising compiler.
	eng := engines.StartTB(b, engines.Config{Engine: name, JavaOpts: []string{"-XX:+UseG1GC"}})
	c := &realCluster{realEnv: &realEnv{url: eng.URL(), client: &http.Client{Timeout: time.Minute}, engine: eng}, prefix: "bench-"}
	ix := c.Index("docs")
	createIndex(b, c, ix, shards, 0)
	for i := 0; i < docs; i += 5000 {
		var body strings.Builder
		for j := i; j < i+5000; j++ {
			fmt.Fprintf(&body, "{\"index\":{\"_index\":%q,\"_id\":\"d%d\"}}\n{\"n\":%d,\"customer\":\"customer-%d\",\"note\":\"a note of moderate length to make the source realistic\"}\n", ix, j, j, j%97)
		}
		if out := mustDo(b, "POST", eng.URL()+"/_bulk", body.String()); strings.Contains(string(out), `"errors":true`) {
			b.Fatalf("bulk: %.500s", out)
		}
	}
	mustDo(b, "POST", eng.URL()+"/"+ix+"/_refresh", "")
	uuid := indexUUID(b, c, ix)
	gcps := inspect(c).shards(b, ix)
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()

	loop := func(stream string) time.Duration {
		start := time.Now()
		hc := &http.Client{Timeout: time.Minute}
		for n := 0; n < shards; n++ {
			after := int64(-1)
			for {
				q := fmt.Sprintf(`{"size":%d,"sort":[{"_seq_no":"asc"}],"seq_no_primary_term":true,"version":true,"track_total_hits":false,`+
					`"query":{"range":{"_seq_no":{"gt":%d,"lte":%d}}}}`, page, after, gcps[n].gcp)
				req, _ := http.NewRequest("POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", eng.URL(), ix, n), strings.NewReader(q))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				raw, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
				var r struct {
					Shards struct {
						Failed int `json:"failed"`
					} `json:"_shards"`
					Hits struct {
						Hits []struct {
							ID      string          `json:"_id"`
							SeqNo   int64           `json:"_seq_no"`
							Term    int64           `json:"_primary_term"`
							Version int64           `json:"_version"`
							Source  json.RawMessage `json:"_source"`
						} `json:"hits"`
					} `json:"hits"`
				}
				if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&r); err != nil || r.Shards.Failed != 0 {
					b.Fatalf("search shard %d: %v %.300s", n, err, raw)
				}
				if len(r.Hits.Hits) == 0 {
					break
				}
				pipe := rdb.Pipeline()
				for _, h := range r.Hits.Hits {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"op", "upsert", "index", ix, "index_uuid", uuid,
						"shard", strconv.Itoa(n), "id", h.ID, "seq_no", strconv.FormatInt(h.SeqNo, 10),
						"primary_term", strconv.FormatInt(h.Term, 10), "version", strconv.FormatInt(h.Version, 10), "source", string(h.Source)}})
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				after = r.Hits.Hits[len(r.Hits.Hits)-1].SeqNo
			}
		}
		d := time.Since(start)
		if got, _ := rdb.XLen(ctx, stream).Result(); got != docs {
			b.Fatalf("the loop wrote %d entries, want %d", got, docs)
		}
		return d
	}
	relayRun := func(feed string) time.Duration {
		start := time.Now()
		f := startRelay(b, c, srv.URL(), feed, []string{ix}, func(cfg *relay.Config) { cfg.BatchSize = page })
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if n, _ := rdb.XLen(ctx, f.keys.Events()).Result(); n >= docs {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the relay did not deliver every document in 5 minutes")
			}
		}
		d := time.Since(start)
		f.halt()
		return d
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		base := loop(fmt.Sprintf("loop-%d", i))
		rel := relayRun(fmt.Sprintf("relay-%d", i))
		b.ReportMetric(docs/base.Seconds(), "loop_events/s")
		b.ReportMetric(docs/rel.Seconds(), "relay_events/s")
		b.ReportMetric(base.Seconds()/rel.Seconds(), "ratio_relay/loop")
		rdb.Del(ctx, fmt.Sprintf("loop-%d", i))
	}
	b.Logf("%s: %d documents in %d shards", eng.Engine(), docs, shards)
}
