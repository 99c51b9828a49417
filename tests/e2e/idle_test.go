package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// idleCost is what a relay asked the cluster while its indices were idle,
// over a span of its poll ticks, and the relay's own counts of that span.
type idleCost struct {
	ticks       int            // escf_poll_ticks_total over the span
	resolutions int            // escf_target_resolutions_total over the span
	requests    map[string]int // the cluster's requests over the span, by kind
}

func (c idleCost) String() string {
	var kinds []string
	for k, n := range c.requests {
		if n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d poll ticks, %d resolutions: %s", c.ticks, c.resolutions, strings.Join(kinds, ", "))
}

// other is the number of requests of kinds other than _resolve/index and
// _stats.
func (c idleCost) other() int {
	n := 0
	for k, v := range c.requests {
		if k != esemu.KindResolve && k != esemu.KindStats {
			n += v
		}
	}
	return n
}

// checkIdleCost fails tb unless the span's requests are what idle rounds
// cost, decided per poll tick and per resolution from the relay's own
// counters, whatever the span's length in wall-clock time:
//
//   - at most resolves requests per resolution (each resolution is counted
//     before it asks; one may have begun before the span and ask within
//     it: resolves × (resolutions + 1));
//   - at most 2 _stats per poll tick (one joined for every index whose
//     round began on the tick, and a second one when a round began later
//     than the StatsWindow after the tick's first, which the scheduler of
//     a loaded machine does), and as much for the tick in progress when
//     the span began: 2 × (ticks + 1);
//   - nothing else.
func checkIdleCost(tb testing.TB, what string, c idleCost, resolves int) {
	tb.Helper()
	resolve, stats := c.requests[esemu.KindResolve], c.requests[esemu.KindStats]
	if resolve > resolves*(c.resolutions+1) || stats > 2*(c.ticks+1) || c.other() > 0 {
		tb.Fatalf("%s cost %d _resolve/index for %d resolutions (want at most %d per resolution) and %d _stats for %d poll ticks (want at most 2 per tick) (%s)",
			what, resolve, c.resolutions, resolves, stats, c.ticks, c)
	}
}

// idleRequests follows n idle indices under one pattern (poll interval
// 200 ms) with the given stats window and returns the cluster's requests
// over ticks poll ticks of the relay.
func idleRequests(tb testing.TB, n int, statsWindow time.Duration, ticks int) idleCost {
	return idleRequestsOf(tb, n, statsWindow, ticks, func(c testCluster, names []string) []string { return []string{c.Index("idle-*")} })
}

// idleRequestsOf is idleRequests with the targets targets returns for the
// n indices.
//
// The span is delimited by the relay's counters, not by a wall-clock
// window (which under load holds more or fewer ticks than its length
// says, and cuts rounds and resolutions in two): it begins once the relay
// caught up, every index's loop adopted its index (the first round's
// settings, refresh and count: on a loaded machine that takes several
// ticks for 50 indices), 2 more ticks began and a resolution followed the
// first one (which resolves each expression alone); it ends when ticks
// more ticks began. The counters are read before the requests at its start
// and after them at its end, so every request counted belongs to a tick
// or a resolution counted, or to the one in progress at the start.
func idleRequestsOf(tb testing.TB, n int, statsWindow time.Duration, ticks int, targets func(c testCluster, names []string) []string) idleCost {
	tb.Helper()
	c := esCluster(tb, esemu.Config{})
	counted, counter := relayCounted(tb, c)
	var names []string
	for i := 0; i < n; i++ {
		name := c.Index(fmt.Sprintf("idle-%04d", i))
		createIndex(tb, c, name, 1, 0)
		names = append(names, name)
	}
	mustDo(tb, "PUT", c.URL()+"/"+names[0]+"/_doc/1", `{"n":1}`)
	srv := redistest.Start(tb)
	const poll = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	f := startRelayLease(tb, counted, srv.URL(), fmt.Sprintf("idle-%d", n), targets(c, names), redisx.DefaultLeaseTTL, nil, func(cfg *relay.Config) {
		cfg.PollInterval, cfg.StatsWindow, cfg.Metrics = poll, statsWindow, reg
	})
	waitCaughtUp(tb, c, f.store, names, time.Minute)
	// Every index's loop has adopted its index (its first round's
	// requests: settings, refresh, count) once its series exist.
	for deadline := time.Now().Add(2 * time.Minute); len(seriesIndices(tb, reg, "escf_shard_checkpoint")) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d indices adopted within 2 minutes", len(seriesIndices(tb, reg, "escf_shard_checkpoint")), n)
		}
	}
	counts := func() (int, int) {
		return int(counterValue(tb, reg, "escf_poll_ticks_total")), int(counterValue(tb, reg, "escf_target_resolutions_total"))
	}
	waitCounts := func(what string, done func(ticks, resolutions int) bool) {
		tb.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			t, r := counts()
			if done(t, r) {
				return
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s: not within 2 minutes (%d poll ticks, %d resolutions)", what, t, r)
			}
		}
	}
	adopted, _ := counts()
	waitCounts("2 poll ticks and a second resolution after every index was adopted", func(t, r int) bool { return t >= adopted+2 && r >= 2 })
	t0, r0 := counts()
	q0 := counter.RequestCounts()
	waitCounts(fmt.Sprintf("%d poll ticks", ticks), func(t, _ int) bool { return t >= t0+ticks })
	q1 := counter.RequestCounts()
	t1, r1 := counts()
	f.halt()
	cost := idleCost{ticks: t1 - t0, resolutions: r1 - r0, requests: map[string]int{}}
	for k, v := range q1 {
		if d := v - q0[k]; d > 0 {
			cost.requests[k] = d
		}
	}
	return cost
}

// TestRelay_IdleRequestsDoNotGrowWithIndices: 50 idle indices under one
// pattern cost the cluster one _resolve/index per resolution and at most
// 2 _stats per poll tick (one for all, and a margin for a tick split in
// two), not one _stats per index as each index's own round used to ask.
func TestRelay_IdleRequestsDoNotGrowWithIndices(t *testing.T) {
	cost := idleRequests(t, 50, 0, 10)
	t.Logf("50 idle indices: %s", cost)
	checkIdleCost(t, "50 idle indices", cost, 1)
}

// TestRelay_IdleRequestsDoNotGrowWithExpressions: 20 expressions (single
// names, patterns, two with exclusions, one naming nothing yet) cost 2
// _resolve/index per resolution when nothing changes: one for the
// expressions that can share one (all but the second exclusion), one for
// that one; not one per expression. Their indices' stats are joined as in
// TestRelay_IdleRequestsDoNotGrowWithIndices.
func TestRelay_IdleRequestsDoNotGrowWithExpressions(t *testing.T) {
	cost := idleRequestsOf(t, 20, 0, 10, func(c testCluster, names []string) []string {
		targets := append([]string(nil), names[:15]...)
		return append(targets, c.Index("idle-001*"), c.Index("idle-*")+",-"+c.Index("idle-0000"),
			c.Index("idle-0*")+",-"+c.Index("idle-0001"), c.Index("not-yet"), c.Index("idle-0019"))
	})
	t.Logf("20 expressions: %s", cost)
	checkIdleCost(t, "20 expressions", cost, 2)
}

// BenchmarkRelay_IdleRequests: requests per poll tick for 1, 50 and 1,000
// idle indices under one pattern, each index asking alone (the relay
// before issue 16: StatsWindow < 0) and with the stats joined, in the same
// run.
//
//	go test -run '^$' -bench BenchmarkRelay_IdleRequests -benchtime 1x ./tests/e2e/
func BenchmarkRelay_IdleRequests(b *testing.B) {
	perTick := func(c idleCost) float64 {
		total := 0
		for _, v := range c.requests {
			total += v
		}
		return float64(total) / float64(c.ticks)
	}
	for i := 0; i < b.N; i++ {
		for _, n := range []int{1, 50, 1000} {
			alone := idleRequests(b, n, -1, 10)
			joined := idleRequests(b, n, 0, 10)
			b.ReportMetric(perTick(alone), fmt.Sprintf("n=%d_alone_req/tick", n))
			b.ReportMetric(perTick(joined), fmt.Sprintf("n=%d_joined_req/tick", n))
			b.Logf("%d indices: alone %.1f/tick (%s); joined %.1f/tick (%s)", n, perTick(alone), alone, perTick(joined), joined)
		}
	}
}

// TestRelay_BusyRequestsJoined: 10 indices of 4 shards, every shard written
// all the time (poll 1 s). Each poll the indices that moved share one _refresh, and
// the pages are settled by the stats of each index's next round (read
// together with the other indices' when they coincide) instead of a stats
// request per page: per poll tick at most 2 refreshes (a margin for a tick
// split in two) and fewer stats than three quarters of the pages — about
// two per busy index whatever its shard count: one right after its reads,
// one more when the gcp was not yet there (before issue 16: 20 refreshes
// and 50 stats per poll, one per index and one per page).
func TestRelay_BusyRequestsJoined(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	counted, counter := relayCounted(t, c)
	const n = 10
	var names []string
	for i := 0; i < n; i++ {
		name := c.Index(fmt.Sprintf("busy-%02d", i))
		createIndex(t, c, name, 4, 0)
		names = append(names, name)
	}
	srv := redistest.Start(t)
	const poll = time.Second // the default; under load (-race, a JVM on 2 cores) shorter ticks are not kept
	reg := prometheus.NewRegistry()
	// The default lease TTL: a relay that loses its lease to a stall starts
	// its loops again, which is not the steady state counted here.
	f := startRelayLease(t, counted, srv.URL(), "busy", []string{c.Index("busy-*")}, redisx.DefaultLeaseTTL, nil, func(cfg *relay.Config) {
		cfg.PollInterval, cfg.Metrics = poll, reg
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var body strings.Builder
			for _, name := range names {
				for k := 0; k < 12; k++ { // ids over every shard
					fmt.Fprintf(&body, "{\"index\":{\"_index\":%q,\"_id\":\"d%d-%d\"}}\n{\"i\":%d}\n", name, i%50, k, i)
				}
			}
			mustDo(t, "POST", c.URL()+"/_bulk", body.String())
		}
	}()
	counts := func() (ticks, rounds int) {
		return int(counterValue(t, reg, "escf_poll_ticks_total")), int(counterValue(t, reg, "escf_rounds_total"))
	}
	waitCounts := func(what string, ok func(ticks, rounds int) bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			ticks, rounds := counts()
			if ok(ticks, rounds) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 2 minutes (%d poll ticks, %d index rounds)", what, ticks, rounds)
			}
		}
	}
	// Past the first reads: every index adopted, 3 ticks more.
	waitCounts("every index followed", func(int, int) bool { return len(seriesIndices(t, reg, "escf_shard_checkpoint")) == n })
	start, _ := counts()
	waitCounts("3 poll ticks", func(ticks, _ int) bool { return ticks >= start+3 })
	// The span: 6 poll ticks and 3 rounds of each index (under load a round
	// takes longer than the poll interval), delimited by the relay's
	// counters (read before the requests at the start, after them at the
	// end): every request counted belongs to a tick counted, or to the one
	// in progress at the start.
	t0, r0 := counts()
	q0 := counter.RequestCounts()
	waitCounts("6 poll ticks and 3 rounds of each index", func(ticks, rounds int) bool { return ticks >= t0+6 && rounds >= r0+3*n })
	q1 := counter.RequestCounts()
	t1, r1 := counts()
	close(stop)
	<-done
	waitCaughtUp(t, c, f.store, names, time.Minute)
	ticks, rounds := t1-t0, r1-r0 // rounds: each index's, on a tick or settling held pages
	refresh, stats, search := q1[esemu.KindRefresh]-q0[esemu.KindRefresh], q1[esemu.KindStats]-q0[esemu.KindStats], q1[esemu.KindSearch]-q0[esemu.KindSearch]
	perTick := func(v int) float64 { return float64(v) / float64(ticks) }
	t.Logf("%d busy indices of 4 shards, %d index rounds on %d poll ticks; per tick: %.1f refresh, %.1f stats, %.1f searches (pages); %.1f searches per index round",
		n, rounds, ticks, perTick(refresh), perTick(stats), perTick(search), float64(search)/float64(rounds))
	if 2*search < rounds { // a round may only settle the pages the one before read
		t.Fatalf("%d index rounds and %d searches: the indices were not busy (want a page read per two rounds)", rounds, search)
	}
	// Refreshes are forced by rounds that begin on a tick, joined per
	// stats batch: at most 2 a tick (a second batch when a round began
	// late), and as many for the tick in progress at the start.
	if refresh > 2*(ticks+1) || 4*stats >= 3*search {
		t.Fatalf("%d refreshes for %d poll ticks and %d stats for %d pages of %d busy indices; want at most 2 refreshes per tick and fewer stats than 3/4 of the pages",
			refresh, ticks, stats, search, n)
	}
}

// seriesIndices are the values of the index label of the series of name
// in g.
func seriesIndices(tb testing.TB, g prometheus.Gatherer, name string) map[string]bool {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "index" {
						out[l.GetValue()] = true
					}
				}
			}
		}
	}
	return out
}

// counterValue is the value of the counter name (summed over its label
// sets) in g, 0 when it has no series yet.
func counterValue(tb testing.TB, g prometheus.Gatherer, name string) float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}
