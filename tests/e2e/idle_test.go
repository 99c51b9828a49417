package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// idleRequests follows n idle indices under one pattern (poll interval
// 200 ms) with the given stats window and returns the cluster's requests
// per poll, by kind, over window.
func idleRequests(tb testing.TB, n int, statsWindow time.Duration, window time.Duration) (float64, string) {
	return idleRequestsOf(tb, n, statsWindow, window, func(c testCluster, names []string) []string { return []string{c.Index("idle-*")} })
}

// idleRequestsOf is idleRequests with the targets targets returns for the
// n indices.
func idleRequestsOf(tb testing.TB, n int, statsWindow time.Duration, window time.Duration, targets func(c testCluster, names []string) []string) (float64, string) {
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
	f := startRelay(tb, counted, srv.URL(), fmt.Sprintf("idle-%d", n), targets(c, names), func(cfg *relay.Config) {
		cfg.PollInterval, cfg.StatsWindow = poll, statsWindow
	})
	waitCaughtUp(tb, c, f.store, names, time.Minute)
	time.Sleep(3 * poll)
	total, kinds := requestsDuring(counter, window)
	f.halt()
	return float64(total) / (float64(window) / float64(poll)), kinds
}

// TestRelay_IdleRequestsDoNotGrowWithIndices: 50 idle indices under one
// pattern cost the cluster at most 3 requests per poll (one _stats for all,
// one _resolve/index, a margin for a tick split in two), not one _stats per
// index as each index's own round used to ask.
func TestRelay_IdleRequestsDoNotGrowWithIndices(t *testing.T) {
	perPoll, kinds := idleRequests(t, 50, 0, 2*time.Second)
	t.Logf("50 idle indices: %.1f requests per poll (%s)", perPoll, kinds)
	if perPoll > 3 {
		t.Fatalf("50 idle indices cost %.1f requests per poll (%s); want at most 3", perPoll, kinds)
	}
}

// TestRelay_IdleRequestsDoNotGrowWithExpressions: 20 expressions (single
// names, patterns, two with exclusions, one naming nothing yet) cost at
// most 3 requests per poll when nothing changes: one _resolve/index for the
// expressions that can share one (all but the second exclusion), one for
// that one, one _stats; not one _resolve/index per expression.
func TestRelay_IdleRequestsDoNotGrowWithExpressions(t *testing.T) {
	perPoll, kinds := idleRequestsOf(t, 20, 0, 2*time.Second, func(c testCluster, names []string) []string {
		targets := append([]string(nil), names[:15]...)
		return append(targets, c.Index("idle-001*"), c.Index("idle-*")+",-"+c.Index("idle-0000"),
			c.Index("idle-0*")+",-"+c.Index("idle-0001"), c.Index("not-yet"), c.Index("idle-0019"))
	})
	t.Logf("20 expressions: %.1f requests per poll (%s)", perPoll, kinds)
	if perPoll > 3 {
		t.Fatalf("20 expressions cost %.1f requests per poll (%s); want at most 3", perPoll, kinds)
	}
}

// BenchmarkRelay_IdleRequests: requests per poll for 1, 50 and 1,000 idle
// indices under one pattern, each index asking alone (the relay before
// issue 16: StatsWindow < 0) and with the stats joined, in the same run.
//
//	go test -run '^$' -bench BenchmarkRelay_IdleRequests -benchtime 1x ./tests/e2e/
func BenchmarkRelay_IdleRequests(b *testing.B) {
	for i := 0; i < b.N; i++ {
		for _, n := range []int{1, 50, 1000} {
			alone, ka := idleRequests(b, n, -1, 2*time.Second)
			joined, kj := idleRequests(b, n, 0, 2*time.Second)
			b.ReportMetric(alone, fmt.Sprintf("n=%d_alone_req/poll", n))
			b.ReportMetric(joined, fmt.Sprintf("n=%d_joined_req/poll", n))
			b.Logf("%d indices: alone %.1f/poll (%s); joined %.1f/poll (%s)", n, alone, ka, joined, kj)
		}
	}
}

// TestRelay_BusyRequestsJoined: 10 indices of 4 shards, every shard written
// all the time (poll 1 s). Each poll the indices that moved share one _refresh, and
// the pages are settled by the stats of each index's next round (read
// together with the other indices' when they coincide) instead of a stats
// request per page: per poll at most 2 refreshes (a margin for a tick
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
	f := startRelay(t, counted, srv.URL(), "busy", []string{c.Index("busy-*")}, func(cfg *relay.Config) {
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
	time.Sleep(3 * poll)
	// The window spans at least 6 s and 3 rounds of each index (under
	// load, a round takes longer than the poll interval).
	q0, r0 := counter.RequestCounts(), counterValue(t, reg, "escf_rounds_total")
	start := time.Now()
	r1 := r0
	for deadline := start.Add(90 * time.Second); time.Since(start) < 6*time.Second || r1-r0 < 3*n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%.0f index rounds in 90 s; want 3 per index", r1-r0)
		}
		r1 = counterValue(t, reg, "escf_rounds_total")
	}
	q1 := counter.RequestCounts()
	elapsed := time.Since(start)
	close(stop)
	<-done
	waitCaughtUp(t, c, f.store, names, time.Minute)
	// Per poll interval of the window: a slow round means fewer requests
	// per poll, never more.
	polls := float64(elapsed) / float64(poll)
	perPoll := func(kind string) float64 { return float64(q1[kind]-q0[kind]) / polls }
	refresh, stats, search := perPoll(esemu.KindRefresh), perPoll(esemu.KindStats), perPoll(esemu.KindSearch)
	rounds := r1 - r0 // each index's rounds, on a tick or settling held pages
	t.Logf("%d busy indices of 4 shards, %.0f index rounds in %s, per poll: %.1f refresh, %.1f stats, %.1f searches (pages); %.1f searches per index round",
		n, rounds, elapsed.Round(time.Millisecond), refresh, stats, search, search*polls/rounds)
	if 2*search*polls < rounds { // a round may only settle the pages the one before read
		t.Fatalf("%.0f index rounds and %.0f searches: the indices were not busy (want a page read per two rounds)", rounds, search*polls)
	}
	if refresh > 2 || stats >= search*3/4 {
		t.Fatalf("per poll %.1f refreshes and %.1f stats for %.1f pages of %d busy indices; want at most 2 refreshes and fewer stats than 3/4 of the pages",
			refresh, stats, search, n)
	}
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
