package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/engines"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkRelay_RealEngine measures the relay reading a real node (the
// engine of ESCF_TEST_ENGINE, default opensearch-2) against the loop a
// hand-written at-least-once relay would run on the same node and Redis
// in the same run (see benchRelayVsLoop). Run with -benchtime 1x -count N.
func BenchmarkRelay_RealEngine(b *testing.B) {
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = engines.DefaultEngine
	}
	// A node as in production: G1 and the optimising compiler.
	eng := engines.StartTB(b, engines.Config{Engine: name, JavaOpts: []string{"-XX:+UseG1GC"}})
	c := &realCluster{realEnv: &realEnv{url: eng.URL(), client: &http.Client{Timeout: time.Minute}, engine: eng}, prefix: "bench-"}
	benchRelayVsLoop(b, c, 1000)
	b.Logf("%s", eng.Engine())
}

// BenchmarkRelay_Emulator is BenchmarkRelay_RealEngine on the emulator,
// run as a process of its own (go run ./internal/esemu/cmd/esemu) so that
// this process's CPU time is the relay's or the loop's alone, at page
// sizes 100, 1,000 and 5,000.
func BenchmarkRelay_Emulator(b *testing.B) {
	for _, page := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("page=%d", page), func(b *testing.B) {
			c := &realCluster{realEnv: &realEnv{url: esemuProcess(b), client: &http.Client{Timeout: time.Minute}}, prefix: "bench-"}
			benchRelayVsLoop(b, c, page)
		})
	}
}

// esemuProcess starts the emulator binary and returns its URL; it is
// stopped when the benchmark ends.
func esemuProcess(tb testing.TB) string {
	tb.Helper()
	esemuBuild.Do(func() {
		dir, err := os.MkdirTemp("", "escf-esemu")
		if err != nil {
			esemuErr = err
			return
		}
		esemuBin = filepath.Join(dir, "esemu")
		cmd := exec.Command("go", "build", "-o", esemuBin, "./internal/esemu/cmd/esemu")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			esemuErr = fmt.Errorf("go build esemu: %v\n%s", err, out)
		}
	})
	if esemuErr != nil {
		tb.Fatal(esemuErr)
	}
	cmd := exec.Command(esemuBin, "--addr", "127.0.0.1:0", "--nodes", "1", "--seed", "1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, u, ok := strings.Cut(sc.Text(), "serving at "); ok {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return strings.TrimSpace(u)
		}
	}
	tb.Fatalf("esemu did not say where it serves: %v", sc.Err())
	return ""
}

var (
	esemuBuild sync.Once
	esemuBin   string
	esemuErr   error
)

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapPeak samples the bytes of live and not yet swept heap objects every
// millisecond until stop is called, which returns the highest sample.
func heapPeak() (stop func() uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done, out := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-out }
}

// loadDocs creates index ix with shards shards and no replica and loads
// docs documents (~110 B sources, ids d0, d1, …) in bulks of 5,000, then
// refreshes it.
func loadDocs(tb testing.TB, c *realCluster, ix string, shards, docs int) {
	tb.Helper()
	createIndex(tb, c, ix, shards, 0)
	for i := 0; i < docs; i += 5000 {
		var body strings.Builder
		for j := i; j < min(i+5000, docs); j++ {
			fmt.Fprintf(&body, "{\"index\":{\"_index\":%q,\"_id\":\"d%d\"}}\n{\"n\":%d,\"customer\":\"customer-%d\",\"note\":\"a note of moderate length to make the source realistic\"}\n", ix, j, j, j%97)
		}
		if out := mustDo(tb, "POST", c.URL()+"/_bulk", body.String()); strings.Contains(string(out), `"errors":true`) {
			tb.Fatalf("bulk: %.500s", out)
		}
	}
	mustDo(tb, "POST", c.URL()+"/"+ix+"/_refresh", "")
}

// benchRelayVsLoop loads 100,000 documents (~110 B sources) in 4 shards
// and, per iteration, reads them all into a fresh stream twice: with the
// loop a hand-written at-least-once relay would run (per shard, search by
// _seq_no with search_after in pages, decode the hits with encoding/json,
// pipeline one XADD per hit with the same fields; no refresh, no settle
// check, no transaction, no checkpoint, no delivered ids), then with the
// relay (in-process, from its start: lease, resolve, settings, refresh,
// the pages and their commits). It reports events/s and this process's
// CPU per event of each (the cluster and Redis are other processes), and
// the relay's peak heap.
func benchRelayVsLoop(b *testing.B, c *realCluster, page int) {
	const docs, shards = 100000, 4
	ix := c.Index("docs")
	loadDocs(b, c, ix, shards, docs)
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
				req, _ := http.NewRequest("POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", c.URL(), ix, n), strings.NewReader(q))
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
	relayRun := func(name string) time.Duration {
		start := time.Now()
		var f *feed
		// Labelled for go test -cpuprofile: pprof -tagfocus run=relay
		// shows the relay alone (its goroutines inherit the label).
		pprof.Do(ctx, pprof.Labels("run", "relay"), func(context.Context) {
			f = startRelay(b, c, srv.URL(), name, []string{ix}, func(cfg *relay.Config) { cfg.BatchSize = page })
		})
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
	perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / docs }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime()
		base := loop(fmt.Sprintf("loop-%d", i))
		c1 := cpuTime()
		peak := heapPeak()
		rel := relayRun(fmt.Sprintf("relay-%d", i))
		heap := peak()
		c2 := cpuTime()
		b.ReportMetric(docs/base.Seconds(), "loop_events/s")
		b.ReportMetric(docs/rel.Seconds(), "relay_events/s")
		b.ReportMetric(base.Seconds()/rel.Seconds(), "ratio_relay/loop")
		b.ReportMetric(perEvent(c1-c0), "loop_cpu_µs/event")
		b.ReportMetric(perEvent(c2-c1), "relay_cpu_µs/event")
		b.ReportMetric(float64(c2-c1)/float64(c1-c0), "cpu_ratio_relay/loop")
		b.ReportMetric(float64(heap)/(1<<20), "relay_peak_heap_MB")
		rdb.Del(ctx, fmt.Sprintf("loop-%d", i))
	}
	b.Logf("%d documents in %d shards, pages of %d", docs, shards, page)
}

// BenchmarkRelay_ShardRead_RealEngine measures how fast the relay reads
// shards from their beginning against a plain reader of the same shards,
// in the same run, on a real node (the engine of ESCF_TEST_ENGINE,
// default opensearch-2): see benchShardRead. Run with -benchtime 3x.
func BenchmarkRelay_ShardRead_RealEngine(b *testing.B) {
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = engines.DefaultEngine
	}
	eng := engines.StartTB(b, engines.Config{Engine: name, JavaOpts: []string{"-XX:+UseG1GC"}})
	c := &realCluster{realEnv: &realEnv{url: eng.URL(), client: &http.Client{Timeout: time.Minute}, engine: eng}, prefix: "bench-"}
	benchShardRead(b, c)
	b.Logf("%s", eng.Engine())
}

// BenchmarkRelay_ShardRead_Emulator is BenchmarkRelay_ShardRead_RealEngine
// on the emulator, run as a process of its own.
func BenchmarkRelay_ShardRead_Emulator(b *testing.B) {
	c := &realCluster{realEnv: &realEnv{url: esemuProcess(b), client: &http.Client{Timeout: time.Minute}}, prefix: "bench-"}
	benchShardRead(b, c)
}

// benchShardRead loads 200,000 documents (~110 B sources) into an index of
// one shard and into one of 4 shards, then, per iteration of its
// sub-benchmarks shards=1 and shards=4, reads the index from its beginning
// three times: with the plain reader, with the relay (in-process, at its
// defaults: pages of 1,000, 8 shards at once; from its start: lease,
// resolve, settings, refresh, then the pages, their settle checks and
// commits, into a fresh stream), and with the plain reader again. The
// plain reader is what a search alone can deliver: per shard, the relay's
// own requests (es.Client.ReadPage: sort by _seq_no, search_after, pages
// of 1,000, the hits decoded) one after the other, and nothing else (no
// refresh, no settle check, no Redis); with 4 shards it reads them
// concurrently, one reader per shard. It logs each iteration's rates and
// reports, over the iterations, the documents/s of each and the relay's
// against the plain reads' (each iteration's two plain reads averaged).
func benchShardRead(b *testing.B, c *realCluster) {
	const docs, page = 200000, 1000
	type index struct {
		name string
		gcps []int64
	}
	indices := map[int]index{}
	for _, shards := range []int{1, 4} {
		ix := c.Index(fmt.Sprintf("shardread-%d", shards))
		loadDocs(b, c, ix, shards, docs)
		var gcps []int64
		for _, sh := range inspect(c).shards(b, ix) {
			gcps = append(gcps, sh.gcp)
		}
		indices[shards] = index{ix, gcps}
	}
	client, err := es.New(inspect(c).esConfig())
	if err != nil {
		b.Fatal(err)
	}
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	// What each read costs the machine's 2 cores: the node's, Redis's and
	// this process's (the relay or the plain reader) CPU time.
	cpus := processCPUs{redis: redisPID(b, rdb)}
	if c.engine != nil {
		cpus.node = c.engine.PID(0)
	}
	// plain reads every shard of ix, each from its beginning to its gcp.
	plain := func(b *testing.B, ix index) time.Duration {
		start := time.Now()
		counts := make([]int, len(ix.gcps))
		errs := make([]error, len(ix.gcps))
		var wg sync.WaitGroup
		for n, gcp := range ix.gcps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var pg es.Page
				for after := int64(-1); after < gcp; {
					if err := client.ReadPage(ctx, es.ShardPage{Index: ix.name, Shard: n, After: after, UpTo: gcp, Size: page}, &pg); err != nil {
						errs[n] = err
						return
					}
					counts[n] += len(pg.Hits)
					if len(pg.Hits) < page {
						break
					}
					after = pg.Hits[len(pg.Hits)-1].SeqNo
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		total := 0
		for n := range counts {
			if errs[n] != nil {
				b.Fatal(errs[n])
			}
			total += counts[n]
		}
		if total != docs {
			b.Fatalf("the plain reader read %d documents, want %d", total, docs)
		}
		return d
	}
	for _, shards := range []int{1, 4} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			ix := indices[shards]
			plain(b, ix) // warm the node's caches and code for both
			b.ResetTimer()
			var plains, relays time.Duration // sums over the iterations
			for i := 0; i < b.N; i++ {
				cpu0 := cpus.now(b)
				before := plain(b, ix)
				cpu1 := cpus.now(b)
				start := time.Now()
				f := startRelayLease(b, c, srv.URL(), fmt.Sprintf("shardread-%d-%d", shards, i), []string{ix.name}, 30*time.Second, nil,
					func(cfg *relay.Config) {
						cfg.BatchSize, cfg.PollInterval = relay.DefaultBatchSize, relay.DefaultPollInterval
						cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
					})
				for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
					if n, _ := rdb.XLen(ctx, f.keys.Events()).Result(); n >= docs {
						break
					}
					if time.Now().After(deadline) {
						b.Fatal("the relay did not deliver every document in 5 minutes")
					}
				}
				rel := time.Since(start)
				cpu2 := cpus.now(b)
				f.halt()
				after := plain(b, ix)
				b.Logf("iteration %d: CPU seconds for the %d documents: plain %s; relay %s", i, docs, cpu1.sub(cpu0), cpu2.sub(cpu1))
				base := (before + after) / 2
				plains, relays = plains+base, relays+rel
				b.Logf("iteration %d: plain %.0f and %.0f docs/s, relay %.0f docs/s, ratio %.2f", i,
					docs/before.Seconds(), docs/after.Seconds(), docs/rel.Seconds(), base.Seconds()/rel.Seconds())
				if err := rdb.FlushDB(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(n*docs/plains.Seconds(), "plain_docs/s")
			b.ReportMetric(n*docs/relays.Seconds(), "relay_docs/s")
			b.ReportMetric(plains.Seconds()/relays.Seconds(), "ratio_relay/plain")
		})
	}
	b.Logf("%d documents in 1 and in 4 shards, pages of %d", docs, page)
}

// processCPUs reads the CPU time (user + system) of the node, Redis and
// this process, from /proc (Linux).
type processCPUs struct{ node, redis int }

// cpuSample is one reading of processCPUs.
type cpuSample struct{ node, redis, self time.Duration }

func (p processCPUs) now(tb testing.TB) cpuSample {
	return cpuSample{node: procCPU(tb, p.node), redis: procCPU(tb, p.redis), self: procCPU(tb, os.Getpid())}
}

// sub is the CPU spent between two samples, as "node X + Redis Y +
// reader Z = T" (seconds).
func (s cpuSample) sub(from cpuSample) string {
	n, r, me := s.node-from.node, s.redis-from.redis, s.self-from.self
	return fmt.Sprintf("node %.2f + Redis %.2f + reader %.2f = %.2f", n.Seconds(), r.Seconds(), me.Seconds(), (n + r + me).Seconds())
}

// procCPU is process pid's CPU time so far (0 for pid 0).
func procCPU(tb testing.TB, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// redisPID is the process id redis-server reports.
func redisPID(tb testing.TB, rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	tb.Fatal("INFO server names no process_id")
	return 0
}
