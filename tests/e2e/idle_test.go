package e2e

import (
	"fmt"
	"testing"
	"time"

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
