package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkDeletes_Freshness measures how soon a delete reaches the stream
// with the relay binary at its defaults plus --deletes, on a real node
// (ESCF_TEST_ENGINE, default opensearch-2): a one-shard index of
// ESCF_BENCH_DOCS documents (default 200,000), read up; then for
// ESCF_BENCH_SECONDS (default 60) a writer updates 50 random documents a
// second and deletes 2, one request each, and records when each was
// acknowledged; the latency of a write is the time from its
// acknowledgement to its stream entry (the entry id's milliseconds, Redis's
// clock on the same machine). The same run repeats with
// --delete-scan-interval 2m, the interval that was the default before issue
// 26, as the baseline (ESCF_BENCH_BASELINE=0 leaves it out). It reports
// p50/p99 of deletes and updates (after ESCF_BENCH_WARMUP seconds,
// default 20, of the same writes not measured), the scans' requests and cluster time per
// second (escf_delete_scan_*), and the ids listed (0). Run with
//
//	go test -run '^$' -bench BenchmarkDeletes_Freshness -benchtime 1x -timeout 60m ./tests/e2e/
func BenchmarkDeletes_Freshness(b *testing.B) {
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = engines.DefaultEngine
	}
	docs := envInt(b, "ESCF_BENCH_DOCS", 200_000)
	seconds := envInt(b, "ESCF_BENCH_SECONDS", 60)
	eng := engines.StartTB(b, engines.Config{Engine: name, Heap: "2g", JavaOpts: []string{"-XX:+UseG1GC"}})
	c := &realCluster{realEnv: &realEnv{url: eng.URL(), client: &http.Client{Timeout: time.Minute}, engine: eng}, prefix: "bench-"}
	ix := c.Index("fresh")
	mustDo(b, "PUT", c.URL()+"/"+ix, `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	for start := 0; start < docs; start += 5000 {
		var sb strings.Builder
		for i := start; i < min(start+5000, docs); i++ {
			fmt.Fprintf(&sb, "{\"index\":{\"_id\":\"d%07d\"}}\n{\"n\":%d,\"title\":\"document %d\"}\n", i, i, i)
		}
		bulk(b, c.URL()+"/"+ix+"/_bulk", sb.String())
	}
	mustDo(b, "POST", c.URL()+"/"+ix+"/_refresh", "")
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	live := make([]int, docs)
	for i := range live {
		live[i] = i
	}
	rng := rand.New(rand.NewPCG(26, 3))
	runs := []struct {
		name  string
		extra []string
	}{{"defaults", nil}}
	if os.Getenv("ESCF_BENCH_BASELINE") != "0" {
		runs = append(runs, struct {
			name  string
			extra []string
		}{"interval 2m (the default before)", []string{"--delete-scan-interval", "2m"}})
	}
	for i, run := range runs {
		b.Run(strings.ReplaceAll(run.name, " ", "_"), func(b *testing.B) {
			feed := fmt.Sprintf("fresh-%d", i)
			addr := closedPort(b)
			args := append([]string{"run"}, c.cliArgs()...)
			args = append(args, "--redis", srv.URL(), "--feed", feed, "--index", ix, "--deletes", "--metrics-addr", addr)
			logTo := os.Getenv("ESCF_BENCH_RELAY_LOG")
			if logTo != "" {
				args = append(args, "--log-level", "debug")
			}
			p := startBinary(b, append(args, run.extra...)...)
			if logTo != "" {
				// The relay's debug log, for a look at what a slow delete
				// waited for (one line per scan: requests, cluster time).
				b.Cleanup(func() {
					if err := os.WriteFile(fmt.Sprintf("%s.%d", logTo, i), []byte(p.out.String()), 0o644); err != nil {
						b.Error(err)
					}
				})
			}
			keys := redisx.NewKeys(feed)
			// Read up: an upsert per document (fewer after the deletes of
			// the runs before).
			var count struct {
				Count int64 `json:"count"`
			}
			if err := json.Unmarshal(mustDo(b, "GET", c.URL()+"/"+ix+"/_count", ""), &count); err != nil {
				b.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Minute)
			for {
				n, _ := rdb.XLen(context.Background(), keys.Events()).Result()
				if n >= count.Count {
					break
				}
				if time.Now().After(deadline) || p.cmd.ProcessState != nil {
					b.Fatalf("the relay read %d of %d documents in 5 minutes:\n%s", n, count.Count, p.out)
				}
				time.Sleep(200 * time.Millisecond)
			}
			// Warm up (the node's JIT, the relay's first scans): writes
			// for ESCF_BENCH_WARMUP seconds (default 20), not measured.
			if w := envInt(b, "ESCF_BENCH_WARMUP", 20); w > 0 {
				// Read after the read-up's entries only (XRANGE of a
				// million entries outlasts the client's read timeout).
				readUp, err := rdb.XInfoStream(context.Background(), keys.Events()).Result()
				if err != nil {
					b.Fatal(err)
				}
				warm := writeMix(b, c.URL()+"/"+ix, &live, rng, time.Duration(w)*time.Second)
				deadline := time.Now().Add(4 * time.Minute)
				for {
					if dl, _ := latencies(b, rdb, keys.Events(), warm, readUp.LastGeneratedID); len(dl) == warm.deletes || time.Now().After(deadline) {
						break
					}
					time.Sleep(time.Second)
				}
			}
			from, err := rdb.XInfoStream(context.Background(), keys.Events()).Result()
			if err != nil {
				b.Fatal(err)
			}
			req0, _ := metricValue(b, addr, "escf_delete_scan_requests_total")
			ms0, _ := metricValue(b, addr, "escf_delete_scan_cluster_seconds_total")
			start := time.Now()
			acked := writeMix(b, c.URL()+"/"+ix, &live, rng, time.Duration(seconds)*time.Second)
			writing := time.Since(start)
			// Wait for every delete (at most the interval and a scan).
			var dl, up []time.Duration
			deadline = time.Now().Add(4 * time.Minute)
			for {
				dl, up = latencies(b, rdb, keys.Events(), acked, from.LastGeneratedID)
				if len(dl) == acked.deletes || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Second)
			}
			elapsed := time.Since(start)
			req1, _ := metricValue(b, addr, "escf_delete_scan_requests_total")
			ms1, _ := metricValue(b, addr, "escf_delete_scan_cluster_seconds_total")
			listed, _ := metricValue(b, addr, "escf_delete_listed_ids_total")
			if len(dl) != acked.deletes {
				b.Errorf("%d of %d deletes reached the stream", len(dl), acked.deletes)
			}
			for _, s := range slowest(rdb, keys.Events(), acked, from.LastGeneratedID, 5) {
				b.Logf("slow delete: %s", s)
			}
			b.ReportMetric(pct(dl, 50).Seconds(), "delete_p50_s")
			b.ReportMetric(pct(dl, 99).Seconds(), "delete_p99_s")
			b.ReportMetric(pct(up, 50).Seconds(), "update_p50_s")
			b.ReportMetric(pct(up, 99).Seconds(), "update_p99_s")
			b.ReportMetric((req1-req0)/elapsed.Seconds(), "scan_requests/s")
			b.ReportMetric((ms1-ms0)*1000/elapsed.Seconds(), "scan_cluster_ms/s")
			b.ReportMetric(listed, "ids_listed")
			b.Logf("| %s | %s | %d docs | %d deletes, %d updates in %s | delete p50 %s p99 %s | update p50 %s p99 %s | scans %.1f requests/s, %.1f cluster ms/s | %v ids listed |",
				eng.Engine(), run.name, docs, acked.deletes, len(acked.updates), writing.Round(time.Second),
				pct(dl, 50).Round(time.Millisecond), pct(dl, 99).Round(time.Millisecond), pct(up, 50).Round(time.Millisecond), pct(up, 99).Round(time.Millisecond),
				(req1-req0)/elapsed.Seconds(), (ms1-ms0)*1000/elapsed.Seconds(), listed)
		})
	}
}

// acks are the writes of writeMix with the time each was acknowledged.
type acks struct {
	deletes int
	deleted map[string]time.Time // id -> ack
	updates map[string][]upAck   // id -> acks in order
}

type upAck struct {
	seqNo int64
	at    time.Time
}

// writeMix updates 50 random live documents a second and deletes 2, one
// request each, for d.
func writeMix(b *testing.B, index string, live *[]int, rng *rand.Rand, d time.Duration) *acks {
	a := &acks{deleted: map[string]time.Time{}, updates: map[string][]upAck{}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		l := *live
		i := rng.IntN(len(l))
		id := fmt.Sprintf("d%07d", l[i])
		if n%25 == 0 {
			*live = slices.Delete(l, i, i+1)
			if st, body := httpDo(b, "DELETE", index+"/_doc/"+id, ""); st != 200 {
				b.Fatalf("delete %s: %d %s", id, st, body)
			}
			a.deleted[id] = time.Now()
			a.deletes++
			continue
		}
		st, body := httpDo(b, "PUT", index+"/_doc/"+id, fmt.Sprintf(`{"n":%d,"title":"updated %d"}`, n, n))
		at := time.Now()
		if st != 200 {
			b.Fatalf("update %s: %d %s", id, st, body)
		}
		var r struct {
			SeqNo int64 `json:"_seq_no"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			b.Fatal(err)
		}
		a.updates[id] = append(a.updates[id], upAck{r.SeqNo, at})
	}
	return a
}

// latencies reads the stream after the entry id after ("-": all): for each acknowledged delete found, the time
// from its acknowledgement to its entry; for each acknowledged update,
// to the first upsert of its document at its seq no or later.
func latencies(b *testing.B, rdb *redis.Client, stream string, a *acks, after string) (dels, ups []time.Duration) {
	start := "-"
	if after != "-" {
		start = "(" + after
	}
	msgs, err := rdb.XRange(context.Background(), stream, start, "+").Result()
	if err != nil {
		b.Fatal(err)
	}
	pending := map[string][]upAck{}
	for id, u := range a.updates {
		pending[id] = slices.Clone(u)
	}
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			b.Fatal(err)
		}
		ms, _ := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64)
		at := time.UnixMilli(ms)
		switch e.Op {
		case redisx.OpDelete:
			if t, ok := a.deleted[e.ID]; ok {
				dels = append(dels, at.Sub(t))
			}
		case redisx.OpUpsert:
			p := pending[e.ID]
			for len(p) > 0 && p[0].seqNo <= e.SeqNo {
				ups = append(ups, at.Sub(p[0].at))
				p = p[1:]
			}
			pending[e.ID] = p
		}
	}
	return dels, ups
}

// slowest describes the n deletes that took longest from their
// acknowledgement to their stream entry: the id, both times (UTC) and the
// entry, to find in the relay's log what they waited for.
func slowest(rdb *redis.Client, stream string, a *acks, after string, n int) []string {
	msgs, err := rdb.XRange(context.Background(), stream, "("+after, "+").Result()
	if err != nil {
		return []string{err.Error()}
	}
	type slow struct {
		d    time.Duration
		line string
	}
	var all []slow
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil || e.Op != redisx.OpDelete {
			continue
		}
		if t, ok := a.deleted[e.ID]; ok {
			ms, _ := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64)
			d := time.UnixMilli(ms).Sub(t)
			all = append(all, slow{d, fmt.Sprintf("%s acknowledged %s, entry %s after %s", e.ID, t.UTC().Format("15:04:05.000"), m.ID, d.Round(time.Millisecond))})
		}
	}
	slices.SortFunc(all, func(x, y slow) int { return int(y.d - x.d) })
	var out []string
	for _, s := range all[:min(n, len(all))] {
		out = append(out, s.line)
	}
	return out
}

// pct is the p-th percentile of ds (0 when empty).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// bulk posts an NDJSON bulk body and fails on an item error.
func bulk(b *testing.B, url, body string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Errors bool `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Errors {
		b.Fatalf("bulk: %d %v errors=%v", resp.StatusCode, err, r.Errors)
	}
}
