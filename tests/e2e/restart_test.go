package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// deliveries is an HTTP sink target that counts how often each event
// (identity and seq_no: unique per stream entry without --deletes) arrives.
type deliveries struct {
	mu    sync.Mutex
	count map[string]int
}

func (d *deliveries) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var evs []redisx.Event
	if err == nil {
		err = json.Unmarshal(body, &evs)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	for _, e := range evs {
		d.count[fmt.Sprintf("%s/%d/%s@%d", e.IndexUUID, e.Shard, e.ID, e.SeqNo)]++
	}
	d.mu.Unlock()
}

// totals returns the distinct events and the extra deliveries.
func (d *deliveries) totals() (distinct, repeated int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.count {
		distinct++
		repeated += n - 1
	}
	return distinct, repeated
}

// TestConsume_RollingRestarts: three `consume` processes in one group, a
// writer indexing all along; each consumer is stopped with SIGTERM and
// started again (a new process, a new consumer name), one after the other,
// ten times round. Every graceful stop must leave nothing behind: no entry
// pending in the departed consumer's name (it would wait --min-idle and be
// delivered again by a reclaim), no dead consumer in the group, and no
// event delivered twice. Decided from the group's state (XINFO CONSUMERS at
// each stop and at the end) and from what the sink received.
func TestConsume_RollingRestarts(t *testing.T) {
	const consumers, rounds = 3, 10
	c := esCluster(t, esemu.Config{})
	ix := c.Index("rolling")
	createIndex(t, c, ix, 2, 0)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "rolling", []string{ix}, nil)
	sinkSrv := &deliveries{count: map[string]int{}}
	hs := httptest.NewServer(sinkSrv)
	defer hs.Close()
	ctx := context.Background()

	start := func(i, gen int) *proc {
		return startBinary(t, "consume", "--redis", srv.URL(), "--feed", "rolling", "--group", "g",
			"--consumer", fmt.Sprintf("c%d-%d", i, gen), "--sink", "http", "--http-url", hs.URL,
			"--workers", "4", "--log-level", "warn", "--wait-for-feed", "1m")
	}
	procs := make([]*proc, consumers)
	for i := range procs {
		procs[i] = start(i, 0)
	}

	stopWrites := make(chan struct{})
	var written int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stopWrites:
				written = n
				return
			default:
			}
			_, _, _ = tryDo("PUT", c.URL()+"/"+ix+"/_doc/d"+strconv.Itoa(n%500), fmt.Sprintf(`{"n":%d}`, n))
			time.Sleep(2 * time.Millisecond)
		}
	}()

	abandoned := 0 // entries left pending in the name of a consumer that stopped
	for r := 0; r < rounds; r++ {
		for i := range procs {
			time.Sleep(150 * time.Millisecond)
			name := fmt.Sprintf("c%d-%d", i, r)
			stopGracefully(t, procs[i], name)
			cs, err := f.rdb.XInfoConsumers(ctx, f.keys.Events(), "g").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, cn := range cs {
				if cn.Name == name {
					abandoned += int(cn.Pending)
				}
			}
			procs[i] = start(i, r+1)
		}
	}
	close(stopWrites)
	wg.Wait()
	waitCaughtUp(t, c, f.store, []string{ix}, 20*time.Second)
	added, err := f.rdb.XLen(ctx, f.keys.Events()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Every entry handled: the group has read all and holds nothing.
	deadline := time.Now().Add(90 * time.Second) // past --min-idle: a reclaim delivers what was abandoned
	for {
		distinct, _ := sinkSrv.totals()
		p, err := f.rdb.XPending(ctx, f.keys.Events(), "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		if int64(distinct) == added && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries delivered, %d pending, after 90s", distinct, added, p.Count)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range procs {
		stopGracefully(t, p, "consume")
	}
	cs, err := f.rdb.XInfoConsumers(ctx, f.keys.Events(), "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	distinct, repeated := sinkSrv.totals()
	t.Logf("%d writes, %d entries, %d restarts: %d entries abandoned in departed consumers, %d events delivered twice, %d consumers left in the group",
		written, added, consumers*rounds, abandoned, repeated, len(cs))
	record(t, figure{Scenario: fmt.Sprintf("%d consumers restarted one by one ×%d (SIGTERM) under load", consumers, rounds),
		Faults: consumers * rounds, Entries: int(added), Duplicated: repeated,
		Note: fmt.Sprintf("%d entries left pending by departed consumers; %d consumers left in the group after all stopped", abandoned, len(cs))})
	if abandoned != 0 || repeated != 0 || len(cs) != 0 || distinct != int(added) {
		t.Fatalf("graceful restarts left %d entries pending in departed consumers, %d events delivered twice, %d consumers in the group (want 0, 0, 0)",
			abandoned, repeated, len(cs))
	}
}
