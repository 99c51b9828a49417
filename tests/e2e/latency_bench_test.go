package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// delayingProxy forwards requests to target and holds every search (a
// page of the relay) for delay first: the latency of a real cluster's page.
func delayingProxy(tb testing.TB, target string, delay time.Duration) string {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_search") {
			time.Sleep(delay)
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// BenchmarkRelay_PageLatency: an index of 8 shards × 5,000 documents read
// from the beginning with 500-document pages, each search held for 0, 10,
// 20 or 50 ms (a real cluster's page latency): events/s with
// ReadConcurrency 1 (one shard after the other, the relay before issue
// 16) and 8, in the same run, and their ratio.
//
//	go test -run '^$' -bench BenchmarkRelay_PageLatency -benchtime 1x -count 3 ./tests/e2e/
func BenchmarkRelay_PageLatency(b *testing.B) {
	const shards, perShard, page = 8, 5000, 500
	const docs = shards * perShard
	c := esCluster(b, esemu.Config{})
	ix := c.Index("latency")
	createIndex(b, c, ix, shards, 0)
	for i := 0; i < docs; i += 5000 {
		var body strings.Builder
		for j := i; j < i+5000; j++ {
			fmt.Fprintf(&body, "{\"index\":{\"_index\":%q,\"_id\":\"d%d\"}}\n{\"n\":%d,\"note\":\"a note of moderate length to make the source realistic\"}\n", ix, j, j)
		}
		if out := mustDo(b, "POST", c.URL()+"/_bulk", body.String()); strings.Contains(string(out), `"errors":true`) {
			b.Fatalf("bulk: %.500s", out)
		}
	}
	mustDo(b, "POST", c.URL()+"/"+ix+"/_refresh", "")
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	run := func(feed string, delay time.Duration, reads int) time.Duration {
		view := &realCluster{realEnv: &realEnv{url: delayingProxy(b, c.URL(), delay), client: &http.Client{Timeout: time.Minute}}}
		start := time.Now()
		f := startRelay(b, view, srv.URL(), feed, []string{ix}, func(cfg *relay.Config) {
			cfg.BatchSize, cfg.ReadConcurrency = page, reads
		})
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
			if n, _ := rdb.XLen(ctx, f.keys.Events()).Result(); n >= docs {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the relay did not deliver every document in 5 minutes")
			}
		}
		d := time.Since(start)
		f.halt()
		rdb.Del(ctx, f.keys.Events())
		return d
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, delay := range []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
			one := run(fmt.Sprintf("seq-%d-%d", i, delay.Milliseconds()), delay, 1)
			par := run(fmt.Sprintf("par-%d-%d", i, delay.Milliseconds()), delay, 8)
			ms := fmt.Sprintf("%dms", delay.Milliseconds())
			b.ReportMetric(docs/one.Seconds(), ms+"_reads1_events/s")
			b.ReportMetric(docs/par.Seconds(), ms+"_reads8_events/s")
			b.ReportMetric(one.Seconds()/par.Seconds(), ms+"_ratio_8/1")
		}
	}
}
