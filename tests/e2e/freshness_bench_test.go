package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkFreshness_EndToEnd measures how fresh the feed is from a
// write's acknowledgement: to its stream entry (the entry id's
// milliseconds, Redis's clock on this machine) and to a consumer that
// applied it (ESCF_BENCH_SINK: "http", the default, an HTTP sink's
// receiver, the time it received the batch; "bulk", a bulk mirror into
// mirror-<index> on the same node, the time the node answered the _bulk
// holding it, seen by a proxy), with ESCF_BENCH_WORKERS lanes (default
// 512: a batching sink's batch holds about one event per lane),
// p50/p90/p99, with the relay binary at --poll-interval 1s, 250ms and
// 100ms, at 100 and 10,000 writes/s (new documents into a 3-shard index:
// one PUT per write at 100/s, a _bulk of 100 every 10 ms at 10,000/s, the
// acknowledgement being the response's arrival), and what it costs the
// cluster: the relay's requests/s and forced refreshes/s, counted by a
// proxy between the relay and the node. A real node of ESCF_TEST_ENGINE
// (default opensearch-2); ESCF_BENCH_SECONDS (default 20) of measured
// writes after 5 s not measured. Run with
//
//	go test -run '^$' -bench BenchmarkFreshness_EndToEnd -benchtime 1x -timeout 60m ./tests/e2e/
func BenchmarkFreshness_EndToEnd(b *testing.B) {
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = engines.DefaultEngine
	}
	seconds := envInt(b, "ESCF_BENCH_SECONDS", 20)
	eng := engines.StartTB(b, engines.Config{Engine: name, Heap: "2g", JavaOpts: []string{"-XX:+UseG1GC"}})
	c := &realCluster{realEnv: &realEnv{url: eng.URL(), client: &http.Client{Timeout: time.Minute}, engine: eng}, prefix: "bench-"}
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	n := 0
	for _, rate := range []int{100, 10000} {
		for _, poll := range []time.Duration{time.Second, 250 * time.Millisecond, 100 * time.Millisecond} {
			n++
			b.Run(fmt.Sprintf("rate=%d/poll=%s", rate, poll), func(b *testing.B) {
				ix := c.Index(fmt.Sprintf("fresh%d", n))
				mustDo(b, "PUT", c.URL()+"/"+ix, `{"settings":{"number_of_shards":3,"number_of_replicas":0}}`)
				proxy := newCountingProxy(b, c.URL())
				counts := func() (requests, refreshes int64) {
					for kind, k := range proxy.RequestCounts() {
						requests += int64(k)
						if kind == esemu.KindRefresh {
							refreshes += int64(k)
						}
					}
					return requests, refreshes
				}
				feed := fmt.Sprintf("e2e-%d", n)
				var recv *receiver
				sinkArgs := []string{"--sink", "http"}
				switch kind := os.Getenv("ESCF_BENCH_SINK"); kind {
				case "", "http":
					recv = newReceiver(b)
					sinkArgs = append(sinkArgs, "--http-url", recv.url)
				case "bulk":
					recv = newBulkReceiver(b, c.URL())
					sinkArgs = []string{"--sink", "bulk", "--bulk-es", recv.url, "--bulk-index", "mirror-{index}"}
				default:
					b.Fatalf("ESCF_BENCH_SINK=%q: want http or bulk", kind)
				}
				metrics := closedPort(b)
				relayP := startBinary(b, "run", "--es", proxy.URL(), "--redis", srv.URL(), "--feed", feed, "--index", ix,
					"--poll-interval", poll.String(), "--log-level", "warn", "--metrics-addr", metrics)
				// Where the relay's time goes: its requests by kind (mean
				// time from the proxy's view) and its commits.
				type spent struct {
					counts             map[string]int
					took               map[string]time.Duration
					commitSum, commits float64
				}
				spentNow := func() spent {
					s := spent{counts: proxy.RequestCounts(), took: proxy.Took()}
					s.commitSum, _ = metricValue(b, metrics, "escf_commit_duration_seconds_sum")
					s.commits, _ = metricValue(b, metrics, "escf_commit_duration_seconds_count")
					return s
				}
				consumeP := startBinary(b, append([]string{"consume", "--redis", srv.URL(), "--feed", feed, "--group", "fresh",
					"--workers", strconv.Itoa(envInt(b, "ESCF_BENCH_WORKERS", 512)), "--wait-for-feed", "1m", "--log-level", "warn"}, sinkArgs...)...)
				defer relayP.kill()
				defer consumeP.kill()
				write := newRateWriter(b, c.URL()+"/"+ix, rate)
				write.writeFor(5 * time.Second) // warm-up, not measured
				waitEntries(b, rdb, redisx.NewKeys(feed).Events(), int64(write.total()), time.Minute)
				from := write.total()
				req0, ref0 := counts()
				spent0 := spentNow()
				start := time.Now()
				write.writeFor(time.Duration(seconds) * time.Second)
				elapsed := time.Since(start)
				req1, ref1 := counts()
				spent1 := spentNow()
				var where []string
				for _, kind := range []string{esemu.KindStats, esemu.KindRefresh, esemu.KindSearch} {
					if n := spent1.counts[kind] - spent0.counts[kind]; n > 0 {
						where = append(where, fmt.Sprintf("%s %d × %.1f ms", kind, n, float64((spent1.took[kind]-spent0.took[kind]).Microseconds())/1000/float64(n)))
					}
				}
				if n := spent1.commits - spent0.commits; n > 0 {
					where = append(where, fmt.Sprintf("commit %.0f × %.1f ms", n, (spent1.commitSum-spent0.commitSum)*1000/n))
				}
				b.Logf("%s/s, poll %s: the relay's requests and commits while measured: %s", strconv.Itoa(rate), poll, strings.Join(where, ", "))
				acks := write.acks()[from:]
				stream := redisx.NewKeys(feed).Events()
				waitEntries(b, rdb, stream, int64(len(write.acks())), 2*time.Minute)
				recv.waitFor(b, write.acks(), 2*time.Minute)
				toStream, toSink := freshness(b, rdb, stream, recv, acks)
				b.ReportMetric(pct(toStream, 50).Seconds()*1000, "stream_p50_ms")
				b.ReportMetric(pct(toStream, 99).Seconds()*1000, "stream_p99_ms")
				b.ReportMetric(pct(toSink, 50).Seconds()*1000, "sink_p50_ms")
				b.ReportMetric(pct(toSink, 99).Seconds()*1000, "sink_p99_ms")
				b.ReportMetric(float64(req1-req0)/elapsed.Seconds(), "relay_requests/s")
				b.ReportMetric(float64(ref1-ref0)/elapsed.Seconds(), "forced_refreshes/s")
				ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
				b.Logf("| %s | %d/s (%d writes) | %s | %s / %s / %s | %s / %s / %s | %.1f | %.1f |",
					eng.Engine(), rate, len(acks), poll,
					ms(pct(toStream, 50)), ms(pct(toStream, 90)), ms(pct(toStream, 99)),
					ms(pct(toSink, 50)), ms(pct(toSink, 90)), ms(pct(toSink, 99)),
					float64(req1-req0)/elapsed.Seconds(), float64(ref1-ref0)/elapsed.Seconds())
			})
		}
	}
}

// receiver is an HTTP sink's webhook that records when each document
// first arrived.
type receiver struct {
	url string
	mu  sync.Mutex
	at  map[string]time.Time
}

func newReceiver(b *testing.B) *receiver {
	r := &receiver{at: map[string]time.Time{}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(req.Body)
		var evs []redisx.Event
		if err := json.Unmarshal(body, &evs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, e := range evs {
			if _, ok := r.at[e.ID]; !ok {
				r.at[e.ID] = now
			}
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(s.Close)
	r.url = s.URL
	return r
}

// newBulkReceiver is a proxy to target that records, for each document
// id of a _bulk request, when target answered the first request holding
// it: when a bulk mirror applied it.
func newBulkReceiver(b *testing.B, target string) *receiver {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	r := &receiver{at: map[string]time.Time{}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasSuffix(req.URL.Path, "/_bulk") {
			rp.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		rp.ServeHTTP(w, req)
		now := time.Now()
		var ids []string
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		for i := 0; i < len(lines); i++ {
			var action map[string]struct {
				ID    string `json:"_id"`
				Index string `json:"_index"`
			}
			if json.Unmarshal([]byte(lines[i]), &action) != nil {
				continue
			}
			for op, a := range action {
				if strings.HasPrefix(a.Index, "mirror-") || strings.Contains(req.URL.Path, "/mirror-") {
					ids = append(ids, a.ID) // not the sink's position documents
				}
				if op != "delete" {
					i++ // its source
				}
			}
		}
		r.mu.Lock()
		for _, id := range ids {
			if _, ok := r.at[id]; !ok {
				r.at[id] = now
			}
		}
		r.mu.Unlock()
	}))
	b.Cleanup(s.Close)
	r.url = s.URL
	return r
}

func (r *receiver) waitFor(b *testing.B, acks []ack, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		got := len(r.at)
		r.mu.Unlock()
		if got >= len(acks) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the sink received %d of %d documents in %s", got, len(acks), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ack is a written document and when its write was acknowledged.
type ack struct {
	id string
	at time.Time
}

// newRateWriter writes rate new documents a second into index (one PUT each
// below 1,000/s, else a _bulk of rate/100 every 10 ms), for as long as
// writeFor is told, and keeps when each was acknowledged.
func newRateWriter(b *testing.B, index string, rate int) *rateWriter {
	return &rateWriter{b: b, index: index, rate: rate}
}

type rateWriter struct {
	b     *testing.B
	index string
	rate  int
	mu    sync.Mutex
	all   []ack
}

func (w *rateWriter) total() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.all) }
func (w *rateWriter) acks() []ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ack(nil), w.all...)
}

func (w *rateWriter) writeFor(d time.Duration) {
	per, every := 1, time.Second/time.Duration(w.rate)
	if w.rate >= 1000 {
		per, every = w.rate/100, 10*time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		<-tick.C
		next := w.total()
		ids := make([]string, per)
		var body strings.Builder
		for i := range ids {
			ids[i] = fmt.Sprintf("w%08d", next+i)
			if per > 1 {
				fmt.Fprintf(&body, "{\"index\":{\"_id\":%q}}\n{\"n\":%d,\"note\":\"a note of moderate length\"}\n", ids[i], next+i)
			}
		}
		var st int
		var out []byte
		if per == 1 {
			st, out = httpDo(w.b, "PUT", w.index+"/_doc/"+ids[0], fmt.Sprintf(`{"n":%d,"note":"a note of moderate length"}`, next))
		} else {
			st, out = httpDo(w.b, "POST", w.index+"/_bulk", body.String())
		}
		at := time.Now()
		if st >= 300 || strings.Contains(string(out), `"errors":true`) {
			w.b.Fatalf("write: HTTP %d %.300s", st, out)
		}
		w.mu.Lock()
		for _, id := range ids {
			w.all = append(w.all, ack{id, at})
		}
		w.mu.Unlock()
	}
}

// freshness is, for each acknowledged write, the time to its stream
// entry and to the receiver.
func freshness(b *testing.B, rdb *redis.Client, stream string, r *receiver, acks []ack) (toStream, toSink []time.Duration) {
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		b.Fatal(err)
	}
	entry := map[string]time.Time{}
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, seen := entry[e.ID]; e.Op != redisx.OpUpsert || seen {
			continue
		}
		ms, _ := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64)
		entry[e.ID] = time.UnixMilli(ms)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range acks {
		t, ok := entry[a.id]
		if !ok {
			b.Fatalf("%s was acknowledged and is not in the stream", a.id)
		}
		toStream = append(toStream, t.Sub(a.at))
		toSink = append(toSink, r.at[a.id].Sub(a.at))
	}
	return toStream, toSink
}
