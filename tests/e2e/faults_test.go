package e2e

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// lockedLog collects log output for assertions.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRelay_TransientESFaults: 429s, 503s, dropped connections, timed-out
// pages and failing shard copies while the relay reads: each is retried,
// logged once per change of error, never advances a checkpoint, and the
// stream still mirrors the index exactly.
func TestRelay_TransientESFaults(t *testing.T) {
	c := cluster(t, esemu.Config{Nodes: 2})
	createIndex(t, c, "faulty", 2, 1)
	srv := redistest.Start(t)
	logs := &lockedLog{}
	f := startRelay(t, c, srv.URL(), "faulty", []string{"faulty"}, func(cfg *relay.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	put := func(from, to int) {
		for i := from; i < to; i++ {
			mustDo(t, "PUT", fmt.Sprintf("%s/faulty/_doc/d%d", c.URL(), i), fmt.Sprintf(`{"i":%d}`, i))
		}
	}
	put(0, 30)
	waitCaughtUp(t, c, f.store, []string{"faulty"}, 10*time.Second)

	faults := []esemu.Fault{
		{Kind: esemu.KindSearch, Status: 429, Count: 6},
		{Kind: esemu.KindStats, Status: 503, Count: 4},
		{Kind: esemu.KindRefresh, Drop: true, Count: 2},
		{Kind: esemu.KindSearch, TimedOut: true, Count: 3},
		{Kind: esemu.KindSearch, Delay: 300 * time.Millisecond, Count: 2},
	}
	for i, fl := range faults {
		if err := c.InjectFault(fl); err != nil {
			t.Fatal(err)
		}
		put(30+20*i, 50+20*i)
		waitCaughtUp(t, c, f.store, []string{"faulty"}, 20*time.Second)
		if left := c.PendingFaults(); len(left) != 0 {
			t.Fatalf("fault %d not consumed: %+v", i, left)
		}
	}
	// Failing shard copies: a page from a failed shard must not be used as
	// data (a one-shard search whose copy fails is a search_phase error).
	if err := c.FailShardSearches("faulty", 0, esemu.CopyAny, 5); err != nil {
		t.Fatal(err)
	}
	put(200, 240)
	waitCaughtUp(t, c, f.store, []string{"faulty"}, 20*time.Second)

	evs := entries(t, f.rdb, f.keys.Events())
	if diff := diffDocs(clusterDocs(t, c, "faulty"), replay(evs)); diff != "" {
		t.Fatalf("stream differs from the index after faults:\n%s", diff)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		k := fmt.Sprintf("%d/%d", e.Shard, e.SeqNo)
		if seen[k] {
			t.Fatalf("duplicate entry %s after retries", k)
		}
		seen[k] = true
	}
	out := logs.String()
	for _, want := range []string{"HTTP 429 es_rejected_execution_exception", "HTTP 503", "timed out", "node_disconnected_exception", "recovered"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs do not mention %q:\n%s", want, out)
		}
	}
	// Six consecutive 429s are one state: logged once, not six times.
	if n := strings.Count(out, "es_rejected_execution_exception"); n != 1 {
		t.Errorf("the 429 state was logged %d times, want once:\n%s", n, out)
	}
	hits := c.FaultHits()
	t.Logf("faults applied: %v; %d entries, 0 duplicates", hits, len(evs))
}
