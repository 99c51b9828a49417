package deletes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// BenchmarkLocalize measures what finding the ranges that differ costs the
// cluster, in one shard grown to each size of ESCF_BENCH_SIZES (default
// 100,000 and 1,000,000 documents) right after 1 and after 100 deletes at
// random, the feed's counts exact before them. Each iteration runs, in the
// same run on the same shard:
//
//   - new: the descent (descent.go): one filters aggregation of range
//     counts per level of Fanout, a histogram for the last small levels;
//   - old: the histogram at interval K over the whole shard that the scan
//     used before (the descent's histogramOnly mode, which is also what
//     an index without points on _seq_no still gets);
//
// and reports each one's requests and time (es.RequestStats: from sending
// each request to the end of its answer) and their ratio. The shard
// request cache is cleared before each run (a scan follows a refresh,
// which empties it). The cluster is
// the emulator or the real engine ESCF_TEST_ENGINE names. Run with
//
//	ESCF_TEST_ENGINE=opensearch-2 go test -run XXX -bench BenchmarkLocalize -benchtime 5x -timeout 120m ./deletes/
//	ESCF_BENCH_SIZES=100000,1000000,10000000 ESCF_TEST_ENGINE=opensearch-2 go test -run XXX -bench BenchmarkLocalize -benchtime 5x -timeout 240m ./deletes/
func BenchmarkLocalize(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if v := os.Getenv("ESCF_BENCH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1000 {
				b.Fatalf("ESCF_BENCH_SIZES=%q: want sizes >= 1000, comma-separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	ctx := context.Background()
	url := localizeBenchCluster(b)
	client, err := es.New(es.Config{URLs: []string{url}})
	if err != nil {
		b.Fatal(err)
	}
	info, err := client.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	fbf := info.CountsFilterByFilter()
	b.Logf("%s: filter by filter %v", info, fbf)
	hc := &http.Client{Timeout: 10 * time.Minute}
	// send makes one request; a bulk rejected for load (429) is sent again.
	send := func(method, path, body string) error {
		for try := 0; ; try++ {
			req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if (resp.StatusCode == http.StatusTooManyRequests || bytes.Contains(msg, []byte(`"status":429`))) && try < 10 {
				time.Sleep(time.Duration(try+1) * time.Second)
				continue
			}
			if resp.StatusCode >= 300 || bytes.Contains(msg, []byte(`"errors":true`)) {
				return fmt.Errorf("%s %s: %d %.300s", method, path, resp.StatusCode, msg)
			}
			return nil
		}
	}
	do := func(method, path, body string) {
		if err := send(method, path, body); err != nil {
			b.Fatal(err)
		}
	}
	do("PUT", "/loc", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"refresh_interval":"-1"}}`)
	loaded := 0
	var live []int // document numbers not deleted
	rng := rand.New(rand.NewPCG(26, 26))
	for _, size := range sizes {
		// Grow the shard to size documents, two bulk requests at a time.
		t0 := time.Now()
		// The loaders report their first error (b.Fatal may not be called
		// from them) and stop; the feeding loop stops with them.
		var wg sync.WaitGroup
		next := make(chan int)
		failed := make(chan error, 2)
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for start := range next {
					var sb strings.Builder
					for i := start; i < min(start+5000, size); i++ {
						fmt.Fprintf(&sb, "{\"index\":{\"_id\":\"d%09d\"}}\n{\"n\":%d}\n", i, i)
					}
					if err := send("POST", "/loc/_bulk", sb.String()); err != nil {
						failed <- err
						return
					}
				}
			}()
		}
	feed:
		for start := loaded; start < size; start += 5000 {
			select {
			case next <- start:
			case err := <-failed:
				failed <- err
				break feed
			}
		}
		close(next)
		wg.Wait()
		select {
		case err := <-failed:
			b.Fatalf("loading %d documents: %v", size, err)
		default:
		}
		for i := loaded; i < size; i++ {
			live = append(live, i)
		}
		loaded = size
		do("POST", "/loc/_refresh", "")
		b.Logf("loaded %d documents in %s", size, time.Since(t0).Round(time.Second))
		for _, k := range []int{1, 100} {
			b.Run(fmt.Sprintf("docs=%d/deletes=%d", size, k), func(b *testing.B) {
				sh := localizeBenchShard(b, client)
				// The feed's counts: exact, as after a scan.
				counts := map[int64]int64{}
				whole := newDescent(client, sh, "", nil, false, -1)
				whole.histogramOnly = true
				for _, batch := range whole.histogramBatches([]node{n(0, sh.Checkpoint/K+1)}) {
					h, err := client.SeqNoHistogram(ctx, "loc", 0, "", batch, K)
					if err != nil {
						b.Fatal(err)
					}
					for key, c := range h {
						counts[key/K] += c
					}
				}
				// k deletes at random.
				rng.Shuffle(len(live), func(x, y int) { live[x], live[y] = live[y], live[x] })
				var sb strings.Builder
				for _, d := range live[:k] {
					fmt.Fprintf(&sb, "{\"delete\":{\"_id\":\"d%09d\"}}\n", d)
				}
				do("POST", "/loc/_bulk?refresh=true", sb.String())
				live = live[k:]
				sh = localizeBenchShard(b, client) // the deletes' seq nos included
				var newRS, oldRS es.RequestStats
				var differ []int64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, old := range []bool{false, true} {
						rs := &newRS
						if old {
							rs = &oldRS
						}
						// Each run as a scan finds the shard, after a
						// refresh: nothing in the shard request cache.
						if os.Getenv("ESCF_TEST_ENGINE") != "" { // the emulator has no cache
							b.StopTimer()
							do("POST", "/loc/_cache/clear?request=true", "")
							b.StartTimer()
						}
						d := newDescent(client, sh, "", counts, fbf, int64(k))
						if old {
							d.histogramOnly = true // else as the scan decides (OpenSearch: by the missing count)
						}
						got, _, _, err := d.run(es.WithRequestStats(ctx, rs))
						if err != nil {
							b.Fatal(err)
						}
						if differ == nil {
							differ = got
						}
						if !slices.Equal(got, differ) || len(got) == 0 || len(got) > k {
							b.Fatalf("old=%v: ranges %v, the other found %v (%d deletes)", old, got, differ, k)
						}
					}
				}
				b.StopTimer()
				per := func(rs *es.RequestStats) (float64, float64) {
					return float64(rs.Requests()) / float64(b.N), rs.Time().Seconds() * 1000 / float64(b.N)
				}
				nr, nms := per(&newRS)
				or, oms := per(&oldRS)
				b.ReportMetric(nr, "new_requests")
				b.ReportMetric(nms, "new_ms")
				b.ReportMetric(or, "old_requests")
				b.ReportMetric(oms, "old_ms")
				b.ReportMetric(nms/oms, "new/old_ms")
				b.Logf("| %s | %d | %d | %.0f | %.1f | %.0f | %.1f | %.2f |", info, size, k, nr, nms, or, oms, nms/oms)
			})
		}
	}
}

// localizeBenchShard is shard 0 of loc read up to its max seq no.
func localizeBenchShard(b *testing.B, client *es.Client) Shard {
	st, err := client.Stats(context.Background(), []string{"loc"})
	if err != nil {
		b.Fatal(err)
	}
	sc, _ := st["loc"].Shard(0)
	return Shard{Index: "loc", Shard: 0, UUID: st["loc"].UUID, Origin: -1, Checkpoint: sc.MaxSeqNo}
}

// localizeBenchCluster is the emulator, or the real engine ESCF_TEST_ENGINE names.
func localizeBenchCluster(b *testing.B) string {
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
