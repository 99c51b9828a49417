package esemu_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// The benchmarks show the emulator is never the bottleneck of a feed test:
// _bulk throughput (docs/s) and the latency of one 1,000-hit search page
// the way the relay reads a shard. Each top-level benchmark also measures a
// baseline on the same server in the same run, a raw HTTP round trip of
// GET /, and reports every result as a multiple of it ("x_GET/" metric).
//
//	go test -run '^$' -bench . -benchmem -count 5 ./internal/esemu/

const benchIndex = "bench"

// benchClient is a keep-alive HTTP client for one emulated cluster.
type benchClient struct {
	base string
	hc   *http.Client
}

func benchStart(b *testing.B) (*esemu.Cluster, *benchClient) {
	b.Helper()
	c, err := esemu.New(esemu.Config{Seed: 1})
	if err != nil {
		b.Fatalf("esemu.New: %v", err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	cl := &benchClient{base: c.URL(), hc: &http.Client{Transport: tr, Timeout: time.Minute}}
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := c.Close(); err != nil {
			b.Errorf("close emulator: %v", err)
		}
	})
	return c, cl
}

// do sends one request, reads the whole answer and fails on a non-2xx.
func (c *benchClient) do(tb testing.TB, method, path, ctype string, body []byte) []byte {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("%s %s: HTTP %d: %.300s", method, path, resp.StatusCode, out)
	}
	return out
}

func (c *benchClient) createIndex(tb testing.TB, shards int) {
	tb.Helper()
	body := fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":0}}`, shards)
	c.do(tb, "PUT", "/"+benchIndex, "application/json", []byte(body))
}

// benchBulkBody is an NDJSON _bulk body indexing docs ids first..first+n-1,
// each a small document (~60 bytes of source).
func benchBulkBody(first, n int) []byte {
	var buf bytes.Buffer
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&buf, "{\"index\":{\"_id\":\"%d\"}}\n{\"title\":\"document %d\",\"n\":%d,\"tag\":\"t%d\"}\n", i, i, i, i%10)
	}
	return buf.Bytes()
}

// benchBaseline is the mean time of a GET / round trip on the server.
func benchBaseline(b *testing.B, cl *benchClient) time.Duration {
	b.Helper()
	for i := 0; i < 200; i++ { // warm the connection and the handler
		cl.do(b, "GET", "/", "", nil)
	}
	const n = 2000
	start := time.Now()
	for i := 0; i < n; i++ {
		cl.do(b, "GET", "/", "", nil)
	}
	return time.Since(start) / n
}

func benchReportRatio(b *testing.B, base time.Duration) {
	b.Helper()
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/float64(base.Nanoseconds()), "x_GET/")
}

// BenchmarkEmulatorBulk indexes batches of 1,000 small docs through _bulk.
// Ids cycle over 200,000, so a long run mixes creates and updates.
func BenchmarkEmulatorBulk(b *testing.B) {
	for _, shards := range []int{1, 3} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			_, cl := benchStart(b)
			cl.createIndex(b, shards)
			base := benchBaseline(b, cl)
			const batch, keys = 1000, 200_000
			bodies := make([][]byte, keys/batch)
			for i := range bodies {
				bodies[i] = benchBulkBody(i*batch, batch)
			}
			b.Run("GET_root", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					cl.do(b, "GET", "/", "", nil)
				}
			})
			b.Run("bulk_1000", func(b *testing.B) {
				b.SetBytes(int64(len(bodies[0])))
				for i := 0; i < b.N; i++ {
					out := cl.do(b, "POST", "/"+benchIndex+"/_bulk", "application/x-ndjson", bodies[i%len(bodies)])
					if i == 0 && bytes.Contains(out[:min(len(out), 40)], []byte(`"errors":true`)) {
						b.Fatalf("bulk item errors: %.300s", out)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "docs/s")
				benchReportRatio(b, base)
			})
		})
	}
}

// BenchmarkEmulatorSearchPage reads one page of 1,000 hits the way the relay
// reads a shard: preference=_shards:0, range _seq_no (cp, gcp], sort _seq_no,
// search_after, seq_no_primary_term, version, track_total_hits false, over
// an index of 100,000 docs.
func BenchmarkEmulatorSearchPage(b *testing.B) {
	const docs, page = 100_000, 1000
	for _, shards := range []int{1, 3} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			c, cl := benchStart(b)
			cl.createIndex(b, shards)
			for i := 0; i < docs; i += 1000 {
				cl.do(b, "POST", "/"+benchIndex+"/_bulk", "application/x-ndjson", benchBulkBody(i, 1000))
			}
			cl.do(b, "POST", "/"+benchIndex+"/_refresh", "", nil)
			st, err := c.ShardState(benchIndex, 0)
			if err != nil {
				b.Fatal(err)
			}
			gcp := st.GlobalCheckpoint
			if gcp < page*2 {
				b.Fatalf("shard 0 has gcp %d, want far more than a page", gcp)
			}
			base := benchBaseline(b, cl)
			rng := rand.New(rand.NewSource(1))
			path := "/" + benchIndex + "/_search?preference=_shards:0"
			bodyFor := func(after int64) []byte {
				body, _ := json.Marshal(map[string]any{
					"query":               map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": -1, "lte": gcp}}},
					"sort":                []any{map[string]any{"_seq_no": "asc"}},
					"search_after":        []any{after},
					"seq_no_primary_term": true,
					"version":             true,
					"track_total_hits":    false,
					"size":                page,
				})
				return body
			}
			// a full page is the relay's common case: start anywhere that leaves one
			bodies := make([][]byte, 64)
			for i := range bodies {
				bodies[i] = bodyFor(rng.Int63n(gcp-page) - 1)
			}
			var probe struct {
				Shards struct{ Failed int } `json:"_shards"`
				Hits   struct {
					Hits []json.RawMessage `json:"hits"`
				} `json:"hits"`
			}
			if err := json.Unmarshal(cl.do(b, "POST", path, "application/json", bodies[0]), &probe); err != nil {
				b.Fatal(err)
			}
			if len(probe.Hits.Hits) != page || probe.Shards.Failed != 0 {
				b.Fatalf("probe page: %d hits, %d failed shards, want %d and 0", len(probe.Hits.Hits), probe.Shards.Failed, page)
			}
			b.Run("GET_root", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					cl.do(b, "GET", "/", "", nil)
				}
			})
			b.Run("page_1000", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					cl.do(b, "POST", path, "application/json", bodies[i%len(bodies)])
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
				benchReportRatio(b, base)
			})
			b.Run("stats_get_shards", func(b *testing.B) {
				// the relay's other per-round call: checkpoints of every shard
				for i := 0; i < b.N; i++ {
					cl.do(b, "GET", "/"+benchIndex+"/_stats/get?level=shards", "", nil)
				}
				benchReportRatio(b, base)
			})
		})
	}
}
