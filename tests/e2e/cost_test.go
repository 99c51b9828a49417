package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// What the relay costs a real cluster (issue #14 item 6), measured on the
// engine of ESCF_TEST_ENGINE: the refreshes it forces on a busy index
// against the index's own scheduled ones, the requests of an idle round,
// and what waiting for the scheduled refresh instead of forcing one would
// add to the latency. The figures go to the log as "COST {json}" lines,
// which make test-engines puts into docs/COMPATIBILITY.md.

// costFigure is one measured cost.
type costFigure struct {
	Engine string  `json:"engine"`
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
}

func recordCost(tb testing.TB, f costFigure) {
	tb.Helper()
	b, _ := json.Marshal(f)
	tb.Logf("COST %s", b)
}

// refreshCounts sums, over the copies of the index's shards, the
// refreshes that opened a new searcher (external_total; total where the
// engine has no such field), per copy.
func refreshCounts(tb testing.TB, c backend, index string) map[string]int64 {
	tb.Helper()
	var r struct {
		Indices map[string]struct {
			Shards map[string][]struct {
				Routing struct {
					Node string `json:"node"`
				} `json:"routing"`
				Refresh struct {
					Total         int64  `json:"total"`
					ExternalTotal *int64 `json:"external_total"`
				} `json:"refresh"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", c.URL()+"/"+index+"/_stats/refresh?level=shards", ""), &r); err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for n, copies := range r.Indices[index].Shards {
		for _, cp := range copies {
			v := cp.Refresh.Total
			if cp.Refresh.ExternalTotal != nil {
				v = *cp.Refresh.ExternalTotal
			}
			out[n+"@"+cp.Routing.Node] = v
		}
	}
	return out
}

func sumCounts(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// TestRealCost_RefreshesAndIdleRequests: a busy index (3 shards, a writer
// bulk-indexing ~1,500 documents/s, searched twice a second) for 10 s
// without the relay, then 10 s with it (through a counting proxy); then the
// index idle, and 20 idle indices more. It fails if the relay forces more
// than one refresh of the index per poll tick (escf_poll_ticks_total).
func TestRealCost_RefreshesAndIdleRequests(t *testing.T) {
	const idleWindow = 6 * time.Second
	if testEngineName() == "" {
		t.Skip("measures a real engine: set ESCF_TEST_ENGINE (make test-engines does)")
	}
	c := esCluster(t, esemu.Config{})
	engine := testEngineName()
	ix := c.Index("busy")
	createIndex(t, c, ix, 3, 0)
	const phase = 10 * time.Second

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var b strings.Builder
			for j := 0; j < 30; j++ {
				fmt.Fprintf(&b, "{\"index\":{\"_index\":%q,\"_id\":\"d%d-%d\"}}\n{\"n\":%d}\n", ix, i, j, j)
			}
			if _, _, err := tryDo("POST", c.URL()+"/_bulk", b.String()); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	// Someone searches the index twice a second: a shard that no search
	// reached for 30 s (index.search.idle.after) skips its scheduled
	// refreshes until one does, and the comparison would be with nothing.
	searching := make(chan struct{})
	go func() {
		for {
			select {
			case <-searching:
				return
			case <-time.After(500 * time.Millisecond):
			}
			_, _, _ = tryDo("POST", c.URL()+"/"+ix+"/_search?size=0", "")
		}
	}()

	// Without the relay: the index's own scheduled refreshes (1 s interval).
	time.Sleep(2 * time.Second)
	r0 := sumCounts(refreshCounts(t, c, ix))
	time.Sleep(phase)
	own := float64(sumCounts(refreshCounts(t, c, ix))-r0) / phase.Minutes()

	// Waiting for the scheduled refresh instead of forcing one (no relay
	// runs yet, so only the index's own refreshes count): from a global
	// checkpoint read, until every copy has opened two new searchers (the
	// second one began after the read, so it holds every op at or below
	// that gcp).
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		base := refreshCounts(t, c, ix)
		for {
			cur := refreshCounts(t, c, ix)
			done := true
			for k, v := range base {
				done = done && cur[k] >= v+2
			}
			if done {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("the index's scheduled refreshes did not run twice in 10 s: %v then %v", base, cur)
			}
			time.Sleep(20 * time.Millisecond)
		}
		waits = append(waits, time.Since(start))
	}
	var forcedTook []time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		mustDo(t, "POST", c.URL()+"/"+ix+"/_refresh", "")
		forcedTook = append(forcedTook, time.Since(start))
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	sort.Slice(forcedTook, func(i, j int) bool { return forcedTook[i] < forcedTook[j] })
	recordCost(t, costFigure{Engine: engine, What: "waiting for two scheduled refreshes after a gcp read (instead of forcing one): median latency", Value: float64(waits[len(waits)/2].Milliseconds()), Unit: "ms",
		Note: fmt.Sprintf("max %s over 5 reads; a forced _refresh took %s median (max %s)", waits[len(waits)-1].Round(time.Millisecond),
			forcedTook[len(forcedTook)/2].Round(time.Millisecond), forcedTook[len(forcedTook)-1].Round(time.Millisecond))})

	close(searching)

	// With the relay (the default poll interval; the default lease TTL, so
	// that a stall does not start its loop again within the count).
	proxy := newCountingProxy(t, c.URL())
	via := &realCluster{realEnv: &realEnv{url: proxy.URL(), client: realClusterEnv(t).client}, prefix: ""}
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	f := startRelayLease(t, via, srv.URL(), "cost", []string{ix}, redisx.DefaultLeaseTTL, nil, func(cfg *relay.Config) {
		cfg.PollInterval, cfg.Metrics = time.Second, reg
	})
	ticks := func() int { return int(counterValue(t, reg, "escf_poll_ticks_total")) }
	waitTicks := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ticks() < n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d poll ticks within 2 minutes, want %d", ticks(), n)
			}
		}
	}
	waitTicks(2) // past the first read
	// 10 poll ticks, delimited by the relay's counter (read before the
	// requests at the start, after them at the end).
	t0 := ticks()
	r1, p1, start := sumCounts(refreshCounts(t, c, ix)), proxy.RequestCounts(), time.Now()
	waitTicks(t0 + 10)
	r2, p2, took := sumCounts(refreshCounts(t, c, ix)), proxy.RequestCounts(), time.Since(start)
	t1 := ticks()
	withRelay := float64(r2-r1) / took.Minutes()
	forcedN := p2[esemu.KindRefresh] - p1[esemu.KindRefresh]
	forced := float64(forcedN) / took.Minutes()
	// At most one forced refresh of the index per poll tick, whatever the
	// write rate (without the limit rounds followed each other at once,
	// each refreshing: 544 a minute at this rate on OpenSearch 2.19), and
	// one for the tick in progress at the start.
	if forcedN > t1-t0+1 {
		t.Errorf("the relay forced %d refreshes of one index in %d poll ticks, want at most one per tick", forcedN, t1-t0)
	}
	recordCost(t, costFigure{Engine: engine, What: "busy index (3 shards, ~1,500 docs/s): shard refreshes per minute without the relay", Value: own, Unit: "refreshes/min"})
	recordCost(t, costFigure{Engine: engine, What: "the same with the relay following it", Value: withRelay, Unit: "refreshes/min",
		Note: fmt.Sprintf("the relay sent %.0f _refresh requests/min (each refreshes the index's 3 shards)", forced)})

	// Idle: the writer stops; once the relay caught up, count its requests.
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	waitCaughtUp(t, c, f.store, []string{ix}, time.Minute)
	idle := func(what string, n int) {
		time.Sleep(2 * time.Second)
		total, kinds, took := requestsDuring(proxy, idleWindow)
		recordCost(t, costFigure{Engine: engine, What: fmt.Sprintf("idle, %s: requests per second (poll interval 1 s)", what), Value: float64(total) / took.Seconds(), Unit: "requests/s",
			Note: fmt.Sprintf("%d followed indices; in %s: %s", n, took.Round(time.Millisecond), kinds)})
	}
	idle("1 index", 1)
	f.halt()
	for i := 0; i < 20; i++ {
		createIndex(t, c, c.Index(fmt.Sprintf("idle-%02d", i)), 1, 0)
	}
	g := startRelay(t, via, srv.URL(), "cost-many", []string{c.Index("idle-*")}, func(cfg *relay.Config) { cfg.PollInterval = time.Second })
	var names []string
	for i := 0; i < 20; i++ {
		names = append(names, c.Index(fmt.Sprintf("idle-%02d", i)))
	}
	waitCaughtUp(t, c, g.store, names, time.Minute)
	idle("20 indices under one pattern", 20)
}
