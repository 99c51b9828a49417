package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// seed writes n documents to index: every fifth with custom routing.
func seed(tb testing.TB, r *rig, index string, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		r.do(tb, "PUT", docPath(index, i), fmt.Sprintf(`{"n":%d,"v":0}`, i))
	}
}

// docPath is the path of document i of seed's: every fifth has custom
// routing.
func docPath(index string, i int) string {
	path := fmt.Sprintf("/%s/_doc/%d", index, i)
	if i%5 == 0 {
		path += fmt.Sprintf("?routing=r%d", i%4)
	}
	return path
}

func newCopy(r *rig, c *collector, mod func(*bootstrap.Config)) bootstrap.Config {
	cfg := bootstrap.Config{ES: r.es, Redis: r.rdb, Feed: r.feed, Handler: c.handle, Logger: r.log,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// TestCopy_HandsWhatTheRelayWrote: with the relay caught up, the copy hands,
// per index, snapshot_start, every document as the upsert the relay wrote
// for its current version (every field), and snapshot_end with the count;
// the indices come from the feed's records.
func TestCopy_HandsWhatTheRelayWrote(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{emu: esemu.Config{Nodes: 2, OutOfOrder: true}, targets: []string{"orders", "logs-*"}, deletes: true})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":3,"number_of_replicas":1}}`)
	r.do(t, "PUT", "/logs-a", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	r.do(t, "PUT", "/logs-b", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	seed(t, r, "orders", 60)
	seed(t, r, "logs-a", 10)
	seed(t, r, "logs-b", 5)
	for i := 0; i < 60; i += 7 {
		r.do(t, "PUT", docPath("orders", i), fmt.Sprintf(`{"n":%d,"v":1}`, i))
	}
	for _, i := range []int{3, 14, 20} {
		r.do(t, "DELETE", docPath("orders", i), "")
	}
	r.waitCaughtUp(t, "orders", "logs-a", "logs-b")
	stream := r.after(t, "0-0")

	c := &collector{}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) { cfg.PageSize = 7 }))
	if err != nil {
		t.Fatal(err)
	}
	got, want := res.Documents, map[string]int64{"orders": 57, "logs-a": 10, "logs-b": 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("documents copied %v, want %v (result %+v)", got, want, res)
	}
	for name, n := range res.Deferred {
		if n != 0 {
			t.Errorf("%s: %d documents left to the stream, want 0 (the relay had caught up)", name, n)
		}
	}
	evs := c.events()
	// Markers: each index opens before any of its upserts and closes after
	// all of them with their count.
	open := map[string]bool{}
	closed := map[string]bool{}
	seen := map[string]int64{}
	for _, e := range evs {
		switch e.Op {
		case redisx.OpSnapshotStart:
			if open[e.Index] || closed[e.Index] || e.IndexUUID != uuidOf(t, r.es, e.Index) {
				t.Fatalf("snapshot_start %+v: twice, or with the wrong uuid", e)
			}
			open[e.Index] = true
		case redisx.OpSnapshotEnd:
			if !open[e.Index] || closed[e.Index] || e.Counts[e.Index] != seen[e.Index] || len(e.Counts) != 1 {
				t.Fatalf("snapshot_end %+v after %d upserts of %s", e, seen[e.Index], e.Index)
			}
			closed[e.Index] = true
		case redisx.OpUpsert:
			if !open[e.Index] || closed[e.Index] {
				t.Fatalf("upsert %s/%s outside its index's markers", e.Index, e.ID)
			}
			seen[e.Index]++
		default:
			t.Fatalf("unexpected %s event", e.Op)
		}
	}
	if len(closed) != 3 {
		t.Fatalf("snapshot_end for %v, want the 3 indices", closed)
	}
	// Every upsert is the relay's own event for that version.
	last := map[docKey]redisx.Event{}
	for _, e := range stream {
		if e.Op == redisx.OpUpsert {
			e.StreamID = ""
			last[docKey{e.IndexUUID, e.Shard, e.ID}] = e
		}
	}
	for _, e := range evs {
		if e.Op != redisx.OpUpsert {
			continue
		}
		w, ok := last[docKey{e.IndexUUID, e.Shard, e.ID}]
		if !ok || fmt.Sprint(e.Values()) != fmt.Sprint(w.Values()) {
			t.Errorf("copied %v\nthe relay wrote %v", e.Values(), w.Values())
		}
	}
	all := merge(clusterDocs(t, r.url, "orders"), clusterDocs(t, r.url, "logs-a"), clusterDocs(t, r.url, "logs-b"))
	if diff := diffDocs(all, fenced(t, evs)); diff != "" {
		t.Fatalf("the copy is not the cluster:\n%s", diff)
	}
}

// TestCopy_WritesDuringTheCopy: while the copy runs, documents are created,
// updated, deleted and created again, and an index is deleted and created
// again under a new uuid in the middle of its copy; the copy's events and
// then the stream's after the position recorded before it, replayed
// through fences, are exactly the cluster's documents.
func TestCopy_WritesDuringTheCopy(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{emu: esemu.Config{Nodes: 2, OutOfOrder: true}, targets: []string{"orders", "logs-*"}, deletes: true})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":3,"number_of_replicas":1}}`)
	r.do(t, "PUT", "/logs-b", `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`)
	seed(t, r, "orders", 300)
	seed(t, r, "logs-b", 30)
	r.waitCaughtUp(t, "orders", "logs-b")
	oldB := uuidOf(t, r.es, "logs-b")
	pos := r.position(t)

	ctx, stop := context.WithCancel(context.Background())
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // creates, updates, deletes, re-creates, until the copy ends
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			i := rng.IntN(360)
			path := r.url + docPath("orders", i)
			var err error
			if rng.IntN(3) == 0 {
				_, _, err = tryDo("DELETE", path, "")
			} else {
				_, _, err = tryDo("PUT", path, fmt.Sprintf(`{"n":%d,"w":%d}`, i, writes.Load()))
			}
			if err == nil {
				writes.Add(1)
			}
		}
	}()
	var recreated atomic.Bool
	c := &collector{hook: func(e redisx.Event) error {
		time.Sleep(2 * time.Millisecond) // a slow sink: the writes land during the copy
		if e.Op == redisx.OpUpsert && e.Index == "logs-b" && recreated.CompareAndSwap(false, true) {
			// In the middle of logs-b's copy: deleted, created again.
			for _, req := range [][3]string{{"DELETE", "/logs-b", ""}, {"PUT", "/logs-b", `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`}} {
				if st, b, err := tryDo(req[0], r.url+req[1], req[2]); err != nil || st >= 300 {
					return fmt.Errorf("%s %s: %d %s %v", req[0], req[1], st, b, err)
				}
			}
			for i := 0; i < 12; i++ {
				if st, b, err := tryDo("PUT", fmt.Sprintf("%s/logs-b/_doc/new-%d", r.url, i), `{"again":true}`); err != nil || st >= 300 {
					return fmt.Errorf("write new-%d: %d %s %v", i, st, b, err)
				}
			}
		}
		return nil
	}}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) { cfg.PageSize = 10; cfg.Workers = 2 }))
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !recreated.Load() || writes.Load() < 50 {
		t.Fatalf("logs-b re-created %v, %d writes during the copy: the test did not exercise the copy", recreated.Load(), writes.Load())
	}
	t.Logf("copy: %+v; %d writes during it", res, writes.Load())
	newB := uuidOf(t, r.es, "logs-b")
	r.waitCaughtUp(t, "orders", "logs-b")
	want := merge(clusterDocs(t, r.url, "orders"), clusterDocs(t, r.url, "logs-b"))
	// Deletes come with the relay's scans: wait for them, then judge.
	deadline := time.Now().Add(15 * time.Second)
	var diff string
	for time.Now().Before(deadline) {
		got := only(fenced(t, c.events(), r.after(t, pos)), uuidOf(t, r.es, "orders"), oldB, newB)
		if diff = diffDocs(want, got); diff == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("copy + stream after %s is not the cluster:\n%s", pos, diff)
}

// TestCopy_FailingResponses: a failed, partial or timed-out answer is never
// data: a passing fault makes the shard start again from a new view and the
// copy is whole; a lasting one fails the copy with an error naming the
// shard, and the index gets no snapshot_end.
func TestCopy_FailingResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		listing string
		fault   func(c *esemu.Cluster) error
		during  bool // inject when the first document of shard 0 is handed, not before the copy
		wantErr bool
	}{
		{"a search answers 503 once", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, Status: 503, Count: 1})
		}, false, false},
		{"opening the point in time answers 429 twice", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindPIT, Status: 429, Count: 2})
		}, false, false},
		{"a page times out with half its hits", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, TimedOut: true, Count: 1})
		}, false, false},
		{"a scroll page times out", es.ListingScroll, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindScroll, TimedOut: true, Count: 1})
		}, false, false},
		{"every copy of a shard fails its reads mid-listing", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.FailShardSearches("orders", 0, "any", 2)
		}, true, false},
		{"the connection drops mid-answer", es.ListingScroll, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindScroll, Drop: true, Count: 1})
		}, false, false},
		{"resolving the targets answers 503 once", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindResolve, Status: 503, Count: 1})
		}, false, false},
		{"reading the settings answers 503 twice", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindIndices, Status: 503, Count: 2})
		}, false, false},
		{"searches keep failing", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, Status: 503, Count: 1000})
		}, false, true},
		{"pages keep timing out", es.ListingScroll, func(c *esemu.Cluster) error {
			return c.InjectFault(esemu.Fault{Kind: esemu.KindSearch, TimedOut: true, Count: 1000})
		}, false, true},
		{"a shard keeps failing", es.ListingPIT, func(c *esemu.Cluster) error {
			return c.FailShardSearches("orders", 2, "any", 1000)
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOptions{emu: esemu.Config{Nodes: 2}, targets: []string{"orders"}})
			r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":3,"number_of_replicas":1}}`)
			seed(t, r, "orders", 90)
			r.waitCaughtUp(t, "orders")
			r.stopRelay() // only the copy reads now: the faults are its
			var injected atomic.Bool
			inject := func() error {
				injected.Store(true)
				return tt.fault(r.emu)
			}
			c := &collector{}
			if tt.during {
				c.hook = func(e redisx.Event) error {
					if e.Op == redisx.OpUpsert && e.Shard == 0 && !injected.Load() {
						return inject()
					}
					return nil
				}
			} else if err := inject(); err != nil {
				t.Fatal(err)
			}
			res, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) {
				cfg.PageSize = 10
				cfg.Listing = tt.listing
				cfg.MaxAttempts = 4
				cfg.Workers = 1
			}))
			evs := c.events()
			var ends int
			for _, e := range evs {
				if e.Op == redisx.OpSnapshotEnd {
					ends++
				}
			}
			if tt.wantErr {
				if !errors.Is(err, bootstrap.ErrGaveUp) || !strings.Contains(err.Error(), "orders") {
					t.Fatalf("error %v, want ErrGaveUp naming the index", err)
				}
				if ends != 0 || res.Documents["orders"] != 0 {
					t.Fatalf("a failed copy handed snapshot_end (%d) or counted documents (%v)", ends, res.Documents)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ends != 1 || res.Documents["orders"] != 90 {
				t.Fatalf("snapshot_end %d times, %v documents; want once, 90", ends, res.Documents)
			}
			if diff := diffDocs(clusterDocs(t, r.url, "orders"), fenced(t, evs)); diff != "" {
				t.Fatalf("the copy is not the cluster:\n%s", diff)
			}
			if !injected.Load() {
				t.Fatal("the fault was never injected")
			}
			if pending := r.emu.PendingFaults(); len(pending) > 0 {
				t.Fatalf("faults never hit: %+v (the copy did not go through them)", pending)
			}
		})
	}
}

// TestCopy_HandlerErrorAborts: the handler's error stops the copy at once,
// named with the event it failed on.
func TestCopy_HandlerErrorAborts(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{targets: []string{"orders"}})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	seed(t, r, "orders", 40)
	r.waitCaughtUp(t, "orders")
	sinkDown := errors.New("sink down")
	var n atomic.Int64
	c := &collector{hook: func(e redisx.Event) error {
		if e.Op == redisx.OpUpsert && n.Add(1) == 5 {
			return sinkDown
		}
		return nil
	}}
	_, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) { cfg.PageSize = 10; cfg.Workers = 1 }))
	var he *bootstrap.HandlerError
	if !errors.As(err, &he) || !errors.Is(err, sinkDown) || he.Event.Op != redisx.OpUpsert || !strings.Contains(err.Error(), "orders/") {
		t.Fatalf("error %v, want a HandlerError wrapping the sink's, naming the document", err)
	}
	if got := len(c.events()); got != 1+4 {
		t.Fatalf("%d events handed, want snapshot_start and the 4 upserts before the failure", got)
	}
}

// TestCopy_WhatIsNotCopied: an index the relay has not adopted is skipped
// (its events all follow the position), a closed index the feed followed
// fails the copy unless SkipClosed, and a closed one it never followed is
// skipped.
func TestCopy_WhatIsNotCopied(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{targets: []string{"logs-*"}})
	for _, name := range []string{"logs-a", "logs-shut"} {
		r.do(t, "PUT", "/"+name, `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
		seed(t, r, name, 3)
	}
	r.waitCaughtUp(t, "logs-a", "logs-shut")
	r.stopRelay()
	r.do(t, "PUT", "/logs-new", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	seed(t, r, "logs-new", 4)
	r.do(t, "PUT", "/logs-never", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	r.do(t, "POST", "/logs-never/_close", "")
	r.do(t, "POST", "/logs-shut/_close", "")

	_, err := bootstrap.Copy(context.Background(), newCopy(r, &collector{}, nil))
	if !errors.Is(err, bootstrap.ErrClosed) || !strings.Contains(err.Error(), "logs-shut") || strings.Contains(err.Error(), "logs-never") {
		t.Fatalf("error %v, want ErrClosed naming logs-shut alone", err)
	}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, &collector{}, func(cfg *bootstrap.Config) { cfg.SkipClosed = true }))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Documents); got != "map[logs-a:3]" {
		t.Errorf("documents %s, want map[logs-a:3]", got)
	}
	for name, want := range map[string]string{"logs-new": "not followed by the relay yet", "logs-never": "never followed", "logs-shut": "closed"} {
		if !strings.Contains(res.Skipped[name], want) {
			t.Errorf("%s skipped for %q, want %q", name, res.Skipped[name], want)
		}
	}
}

// TestCopy_PrimaryFailsOver: the node holding a primary dies in the middle
// of its shard's copy; the shard is read again from a new view on the new
// primary, and the copy is the cluster's documents.
func TestCopy_PrimaryFailsOver(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{emu: esemu.Config{Nodes: 3, NodeLeftDelay: -1}, targets: []string{"orders"}})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":2,"number_of_replicas":2}}`)
	seed(t, r, "orders", 80)
	r.waitCaughtUp(t, "orders")
	var killed atomic.Int32
	killed.Store(-1)
	c := &collector{hook: func(e redisx.Event) error {
		if e.Op == redisx.OpUpsert && e.Shard == 1 && killed.Load() < 0 {
			st, err := r.emu.ShardState("orders", 1)
			if err != nil {
				return err
			}
			for _, cp := range st.Copies {
				if cp.Primary && killed.CompareAndSwap(-1, int32(cp.Node)) {
					if err := r.emu.KillNode(cp.Node); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, c, func(cfg *bootstrap.Config) { cfg.PageSize = 5; cfg.Workers = 1 }))
	if err != nil {
		t.Fatal(err)
	}
	if killed.Load() < 0 {
		t.Fatal("no primary was killed: the test did not exercise a failover")
	}
	if res.Documents["orders"] != 80 {
		t.Fatalf("%v documents copied, want 80", res.Documents)
	}
	if diff := diffDocs(clusterDocs(t, r.url, "orders"), fenced(t, c.events())); diff != "" {
		t.Fatalf("the copy is not the cluster:\n%s", diff)
	}
}

// TestCopy_LeavesToTheStreamWhatTheRelayHasNotRead: a version above the
// relay's checkpoint is not handed (the stream carries it after the
// position); a shard the relay never read is handed nothing.
func TestCopy_LeavesToTheStreamWhatTheRelayHasNotRead(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{targets: []string{"orders"}})
	r.do(t, "PUT", "/orders", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	seed(t, r, "orders", 10)
	r.waitCaughtUp(t, "orders")
	r.stopRelay()
	r.do(t, "PUT", "/orders/_doc/1", `{"n":1,"v":9}`)
	r.do(t, "PUT", "/orders/_doc/new", `{"new":true}`)
	c := &collector{}
	res, err := bootstrap.Copy(context.Background(), newCopy(r, c, nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Documents["orders"] != 9 || res.Deferred["orders"] != 2 {
		t.Fatalf("handed %v, left %v; want 9 handed, 2 left to the stream", res.Documents, res.Deferred)
	}
	for _, e := range c.events() {
		if e.Op == redisx.OpUpsert && (e.ID == "1" || e.ID == "new") {
			t.Fatalf("handed %s at seq_no %d, which the relay has not written", e.ID, e.SeqNo)
		}
	}
}
