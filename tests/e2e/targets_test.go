package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// resolveNames lists the concrete indices behind an expression now.
func resolveNames(tb testing.TB, c backend, expr string) []string {
	tb.Helper()
	var r struct {
		Indices []struct {
			Name string `json:"name"`
		} `json:"indices"`
		Aliases []struct {
			Indices []string `json:"indices"`
		} `json:"aliases"`
		DataStreams []struct {
			BackingIndices []string `json:"backing_indices"`
		} `json:"data_streams"`
	}
	st, body := httpDo(tb, "GET", c.URL()+"/_resolve/index/"+expr, "")
	if st == 404 {
		return nil
	}
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatal(err)
	}
	set := map[string]bool{}
	for _, ix := range r.Indices {
		set[ix.Name] = true
	}
	for _, a := range r.Aliases {
		for _, n := range a.Indices {
			set[n] = true
		}
	}
	for _, ds := range r.DataStreams {
		for _, n := range ds.BackingIndices {
			set[n] = true
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// docsBehind is the union of the documents of the indices behind expr.
func docsBehind(tb testing.TB, c backend, expr string) map[docKey]doc {
	tb.Helper()
	out := map[docKey]doc{}
	for _, n := range resolveNames(tb, c, expr) {
		for k, d := range clusterDocs(tb, c, n) {
			out[k] = d
		}
	}
	return out
}

// noSeqTwice fails if a (index_uuid, shard, seq_no) upsert is in the stream
// twice: nothing is read twice.
func noSeqTwice(tb testing.TB, evs []redisx.Event) {
	tb.Helper()
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Op != redisx.OpUpsert {
			continue
		}
		k := fmt.Sprintf("%s/%d/%d", e.IndexUUID, e.Shard, e.SeqNo)
		if seen[k] {
			tb.Fatalf("read twice: %s (id %s)", k, e.ID)
		}
		seen[k] = true
	}
}

// waitMirrorExpr waits until the stream replayed equals the documents behind
// expr.
func waitMirrorExpr(tb testing.TB, c backend, f *feed, expr string, timeout time.Duration) []redisx.Event {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var diff string
	for time.Now().Before(deadline) {
		evs := entries(tb, f.rdb, f.keys.Events())
		if diff = diffDocs(docsBehind(tb, c, expr), replay(evs)); diff == "" {
			return evs
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("the stream did not come to mirror %s within %s:\n%s", expr, timeout, diff)
	return nil
}

// TestTargets_PatternWithIndicesComingAndGoing: app-* while indices are
// created (and written) and deleted during the run, one of them re-created
// under the same name.
func TestTargets_PatternWithIndicesComingAndGoing(t *testing.T) {
	c := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	app1, app2, app3, ignored, other := c.Index("app-1"), c.Index("app-2"), c.Index("app-3"), c.Index("app-ignored"), c.Index("other")
	expr := c.Index("app-*") + ",-" + ignored
	createIndex(t, c, app1, 2, 1)
	createIndex(t, c, other, 1, 0) // not matched
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "pattern", []string{expr}, func(*deletes.Config) {}, nil)
	var current atomic.Value
	current.Store(app1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ix := current.Load().(string)
				st, _ := httpDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/w%d-%d", c.URL(), ix, w, rng.IntN(50)), fmt.Sprintf(`{"i":%d}`, i))
				if st < 300 {
					written.Add(1)
				}
			}
		}(w)
	}
	mustDo(t, "PUT", c.URL()+"/"+other+"/_doc/x", `{}`)
	createIndex(t, c, ignored, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+ignored+"/_doc/x", `{}`)
	for _, step := range []func(){
		func() { createIndex(t, c, app2, 1, 0); current.Store(app2) },
		func() { createIndex(t, c, app3, 3, 0); current.Store(app3) },
		func() { mustDo(t, "DELETE", c.URL()+"/"+app1, "") },
		func() {
			mustDo(t, "DELETE", c.URL()+"/"+app2, "")
			createIndex(t, c, app2, 2, 0)
			current.Store(app2)
		},
	} {
		time.Sleep(700 * time.Millisecond)
		step()
	}
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	evs := waitMirrorExpr(t, c, f, expr, 30*time.Second)
	noSeqTwice(t, evs)
	targets := map[string]int{}
	for _, e := range evs {
		targets[e.Index+" via "+e.Target]++
		if e.Index == other || e.Index == ignored {
			t.Fatalf("an index outside the expression was followed: %+v", e)
		}
	}
	t.Logf("%d writes; events by index and target: %v", written.Load(), targets)
	for _, ix := range []string{app1, app3} {
		if targets[ix+" via "+expr] == 0 {
			t.Errorf("no events of %s", ix)
		}
	}
}

// TestTargets_AliasRolledOver: writers write through an alias that rolls
// over 3 times; the feed follows the alias.
func TestTargets_AliasRolledOver(t *testing.T) {
	c := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	alias := c.Index("logs")
	mustDo(t, "PUT", c.URL()+"/"+alias+"-000001", `{"settings":{"number_of_shards":2,"number_of_replicas":1},"aliases":{"`+alias+`":{"is_write_index":true}}}`)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "alias", []string{alias}, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writers := make([]*writer, 3)
	for i := range writers {
		// Through an alias: new ids only (an update through a rolled-over
		// alias writes a second document in the new index).
		writers[i] = &writer{url: c.URL(), index: alias, id: i, rng: rand.New(rand.NewPCG(uint64(i), 8)), routing: map[string]string{}}
		wg.Add(1)
		go func(w *writer) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w.id, w.next)
				w.next++
				mustDo(t, "PUT", c.URL()+"/"+alias+"/_doc/"+id, w.source(id))
			}
		}(writers[i])
	}
	for i := 0; i < 3; i++ {
		time.Sleep(600 * time.Millisecond)
		mustDo(t, "POST", c.URL()+"/"+alias+"/_rollover", "")
	}
	time.Sleep(600 * time.Millisecond)
	close(stop)
	wg.Wait()
	names := resolveNames(t, c, alias)
	if len(names) != 4 {
		t.Fatalf("the alias points to %v, want 4 indices after 3 rollovers", names)
	}
	evs := waitMirrorExpr(t, c, f, alias, 30*time.Second)
	noSeqTwice(t, evs)
	per := map[string]int{}
	for _, e := range evs {
		per[e.Index]++
		if e.Target != alias {
			t.Fatalf("target %q, want the alias", e.Target)
		}
	}
	for _, n := range names {
		if per[n] == 0 {
			t.Errorf("no events from %s", n)
		}
	}
	t.Logf("events per index: %v", per)
}

// TestTargets_DataStreamRolledOver: a data stream written during 3
// rollovers; the feed follows the data stream's backing indices. On the
// emulator once per flavor; on a real cluster once, on its engine (not on
// Elasticsearch 7.17, which has no data streams from Maven Central's jars).
func TestTargets_DataStreamRolledOver(t *testing.T) {
	if realClusterEnv(t) != nil {
		c := esCluster(t, esemu.Config{})
		skipWithoutDataStreams(t, c)
		dataStreamRolledOver(t, c)
		return
	}
	for _, fl := range []esemu.Flavor{esemu.FlavorES9, esemu.FlavorOpenSearch3} {
		t.Run(string(fl), func(t *testing.T) {
			dataStreamRolledOver(t, &emulator{newEmulator(t, esemu.Config{Flavor: fl, Nodes: 2, OutOfOrder: true})})
		})
	}
}

func dataStreamRolledOver(t *testing.T, c testCluster) {
	stream := dataStreamTemplate(t, c, "metrics", 2, 1)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "ds", []string{stream}, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mustDo(t, "POST", c.URL()+"/"+stream+"/_doc", fmt.Sprintf(`{"@timestamp":"2026-11-29T12:00:00Z","w":%d,"i":%d}`, w, i))
			}
		}(w)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(600 * time.Millisecond)
		mustDo(t, "POST", c.URL()+"/"+stream+"/_rollover", "")
	}
	time.Sleep(600 * time.Millisecond)
	close(stop)
	wg.Wait()
	names := resolveNames(t, c, stream)
	if len(names) != 4 {
		t.Fatalf("backing indices %v, want 4 after 3 rollovers", names)
	}
	evs := waitMirrorExpr(t, c, f, stream, 30*time.Second)
	noSeqTwice(t, evs)
	per := map[string]int{}
	for _, e := range evs {
		per[e.Index]++
	}
	for _, n := range names {
		if per[n] == 0 {
			t.Errorf("no events from backing index %s", n)
		}
	}
	t.Logf("events per backing index: %v", per)
}

// TestTargets_FromNow delivers only changes made after the relay started,
// and an index created later from its beginning.
func TestTargets_FromNow(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	old1, old2 := c.Index("old-1"), c.Index("old-2")
	createIndex(t, c, old1, 2, 0)
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/before-%d", c.URL(), old1, i), `{}`)
	}
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "fromnow", []string{c.Index("old-*")}, func(cfg *relay.Config) { cfg.From = relay.FromNow })
	waitCaughtUp(t, c, f.store, []string{old1}, 10*time.Second)
	mustDo(t, "PUT", c.URL()+"/"+old1+"/_doc/after-1", `{}`)
	mustDo(t, "PUT", c.URL()+"/"+old1+"/_doc/before-3", `{"updated":true}`)
	createIndex(t, c, old2, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+old2+"/_doc/fresh", `{}`)
	waitCaughtUp(t, c, f.store, []string{old1}, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		got = got[:0]
		for _, e := range entries(t, f.rdb, f.keys.Events()) {
			got = append(got, e.Index+"/"+e.ID)
		}
		sort.Strings(got)
		if len(got) >= 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := []string{old1 + "/after-1", old1 + "/before-3", old2 + "/fresh"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want only the changes after start %v", got, want)
	}
}

// consumer is a mirror kept by a stream reader, with the snapshot rule:
// at snapshot_end it drops every document the snapshot did not contain.
type consumer struct {
	last     string
	docs     map[docKey]doc
	inSnap   bool
	snapshot map[docKey]bool
}

func (cn *consumer) poll(tb testing.TB, f *feed) {
	tb.Helper()
	msgs, err := f.rdb.XRange(context.Background(), f.keys.Events(), "("+cn.last, "+").Result()
	if cn.last == "" {
		msgs, err = f.rdb.XRange(context.Background(), f.keys.Events(), "-", "+").Result()
	}
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			tb.Fatal(err)
		}
		cn.last = m.ID
		k := docKey{e.IndexUUID, e.Shard, e.ID}
		switch e.Op {
		case redisx.OpSnapshotStart:
			cn.inSnap, cn.snapshot = true, map[docKey]bool{}
		case redisx.OpSnapshotEnd:
			for dk := range cn.docs {
				if !cn.snapshot[dk] {
					delete(cn.docs, dk)
				}
			}
			cn.inSnap = false
		case redisx.OpUpsert:
			if cur, ok := cn.docs[k]; !ok || cur.seq <= e.SeqNo {
				cn.docs[k] = doc{routing: e.Routing, seq: e.SeqNo, source: compact(e.Source)}
			}
			if cn.inSnap {
				cn.snapshot[k] = true
			}
		case redisx.OpDelete:
			delete(cn.docs, k)
		}
	}
}

// TestResync_AfterFlushAll: the feed's Redis is flushed while writers keep
// writing and deleting; run refuses nothing (the stream is gone too) but
// resync rebuilds the consumer's mirror exactly, dropping what was deleted
// meanwhile.
func TestResync_AfterFlushAll(t *testing.T) {
	t.Parallel()
	c := esCluster(t, esemu.Config{Nodes: 2})
	ix := c.Index("orders")
	createIndex(t, c, ix, 2, 1)
	for i := 0; i < 40; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), fmt.Sprintf(`{"v":%d}`, i))
	}
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "resync", []string{ix}, func(*deletes.Config) {}, nil)
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	cn := &consumer{docs: map[docKey]doc{}}
	cn.poll(t, f)
	if diff := diffDocs(clusterDocs(t, c, ix), cn.docs); diff != "" {
		t.Fatalf("consumer mirror before the loss:\n%s", diff)
	}
	f.halt()
	// The state is lost; meanwhile documents change and go.
	srv.Client(t).FlushAll(context.Background())
	for i := 0; i < 40; i += 3 {
		mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), "")
	}
	for i := 1; i < 40; i += 5 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), `{"changed":true}`)
	}
	g := startRelayDeletes(t, c, srv.URL(), "resync", []string{ix}, func(*deletes.Config) {}, func(cfg *relay.Config) { cfg.Snapshot = true })
	waitCaughtUp(t, c, g.store, []string{ix}, 10*time.Second)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/after", `{"after":"resync"}`)
	waitCaughtUp(t, c, g.store, []string{ix}, 10*time.Second)
	cn.poll(t, g)
	if diff := diffDocs(clusterDocs(t, c, ix), cn.docs); diff != "" {
		t.Fatalf("consumer mirror after resync:\n%s", diff)
	}
	var start, end int
	var counts map[string]int64
	for _, e := range entries(t, g.rdb, g.keys.Events()) {
		switch e.Op {
		case redisx.OpSnapshotStart:
			start++
		case redisx.OpSnapshotEnd:
			end++
			counts = e.Counts
		}
	}
	if start != 1 || end != 1 || counts[ix] != 40-14+3 {
		t.Fatalf("snapshot_start %d, snapshot_end %d with counts %v; want 1, 1, orders=29 (14 deleted, 3 of them re-created)", start, end, counts)
	}
}

// TestTargets_ClosedIndexSkippedThenResumed: a closed index is skipped with
// one warning until reopened, then read on from its checkpoint.
func TestTargets_ClosedIndexSkippedThenResumed(t *testing.T) {
	for _, name := range []string{"shut-*", "shut-alias"} {
		t.Run(name, func(t *testing.T) {
			c := esCluster(t, esemu.Config{})
			expr, shut1 := c.Index(name), c.Index("shut-1")
			mustDo(t, "PUT", c.URL()+"/"+shut1, `{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"`+c.Index("shut-alias")+`":{}}}`)
			srv := redistest.Start(t)
			logs := &lockedLog{}
			reg := prometheus.NewRegistry()
			f := startRelay(t, c, srv.URL(), "closed", []string{expr}, func(cfg *relay.Config) {
				cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
				cfg.Metrics = reg
			})
			mustDo(t, "PUT", c.URL()+"/"+shut1+"/_doc/a", `{}`)
			waitCaughtUp(t, c, f.store, []string{shut1}, 10*time.Second)
			mustDo(t, "POST", c.URL()+"/"+shut1+"/_close", "")
			// The relay saw it closed, then resolved the targets 5 times
			// more while it stayed closed (and warned no more).
			waitOutput(t, logs, "index is closed", 30*time.Second)
			resolutions := counterValue(t, reg, "escf_target_resolutions_total")
			for deadline := time.Now().Add(30 * time.Second); counterValue(t, reg, "escf_target_resolutions_total") < resolutions+5; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("5 more resolutions not within 30 s")
				}
			}
			mustDo(t, "POST", c.URL()+"/"+shut1+"/_open", "")
			mustDo(t, "PUT", c.URL()+"/"+shut1+"/_doc/b", `{}`)
			waitCaughtUp(t, c, f.store, []string{shut1}, 10*time.Second)
			evs := entries(t, f.rdb, f.keys.Events())
			if len(evs) != 2 || evs[0].ID != "a" || evs[1].ID != "b" {
				t.Fatalf("events %+v, want a then b (nothing read twice)", evs)
			}
			out := logs.String()
			if n := strings.Count(out, "index is closed"); n != 1 {
				t.Errorf("closed warning logged %d times, want once:\n%s", n, out)
			}
			if !strings.Contains(out, "reopened") {
				t.Errorf("no log of the reopening:\n%s", out)
			}
		})
	}
}

// TestTargets_NothingYetThenSomething: a pattern that matches nothing is a
// warning and a wait, not a crash; the first matching index is followed.
func TestTargets_NothingYetThenSomething(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	later1 := c.Index("later-1")
	srv := redistest.Start(t)
	addr := closedPort(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "later", c.Index("later-*"), "--metrics-addr", addr)...)
	// Resolved twice: it met the empty expression and went on.
	waitResolutions(t, p, addr, 2)
	waitOutput(t, p.out, "matches no index yet", 10*time.Second)
	createIndex(t, c, later1, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+later1+"/_doc/first", `{}`)
	waitCaughtUp(t, c, storeFor(t, srv, "later"), []string{later1}, 10*time.Second)
	evs := entries(t, srv.Client(t), redisx.NewKeys("later").Events())
	if len(evs) != 1 || evs[0].ID != "first" || evs[0].Target != c.Index("later-*") {
		t.Fatalf("events %+v", evs)
	}
}

// TestTargets_SeqNoDisabledRefused: an index with sequence numbers disabled
// (index.disable_sequence_numbers, Elasticsearch 9.5's default for columnar
// indices) is refused with an error naming the index and the setting: at
// startup the relay exits; found later, it is skipped and the other indices
// are still followed. It runs on a real Elasticsearch 9 too.
func TestTargets_SeqNoDisabledRefused(t *testing.T) {
	c := flavorCluster(t, esemu.Config{Flavor: esemu.FlavorES9})
	ts, plain := c.Index("ts-1"), c.Index("plain-1")
	mustDo(t, "PUT", c.URL()+"/"+ts, `{"settings":{"index.disable_sequence_numbers":true,"number_of_shards":1,"number_of_replicas":0}}`)
	createIndex(t, c, plain, 1, 0)
	srv := redistest.Start(t)
	code, out := runBinary(t, 30*time.Second, relayArgs(c, srv.URL(), "tsds", ts)...)
	last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	if code != 1 || !strings.Contains(last, "index "+ts) || !strings.Contains(last, "index.disable_sequence_numbers") {
		t.Fatalf("exit %d, last line %q", code, last)
	}
	// Found by a pattern while running: refused once, the rest followed.
	logs := &lockedLog{}
	reg := prometheus.NewRegistry()
	f := startRelay(t, c, srv.URL(), "mixed", []string{c.Index("plain-*"), c.Index("ts-*")}, func(cfg *relay.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		cfg.Metrics = reg
	})
	mustDo(t, "PUT", c.URL()+"/"+plain+"/_doc/ok", `{}`)
	waitCaughtUp(t, c, f.store, []string{plain}, 10*time.Second)
	// Refused once, and not again by the 3 resolutions that follow (the
	// first of them sees the refused loop ended; a relay that followed the
	// index again would start a loop that refuses it again).
	waitOutput(t, logs, "refusing to follow index", 30*time.Second)
	resolutions := counterValue(t, reg, "escf_target_resolutions_total")
	for deadline := time.Now().Add(30 * time.Second); counterValue(t, reg, "escf_target_resolutions_total") < resolutions+3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 more resolutions not within 30 s")
		}
	}
	if n := strings.Count(logs.String(), "refusing to follow index"); n != 1 || !strings.Contains(logs.String(), "index.disable_sequence_numbers") {
		t.Fatalf("refusal logged %d times:\n%s", n, logs)
	}
}

// TestRun_RefusesLostState: a stream whose state keys are gone makes run
// refuse (and say to resync), instead of silently starting the feed again;
// resync then rebuilds it.
func TestRun_RefusesLostState(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	kept := c.Index("kept")
	createIndex(t, c, kept, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+kept+"/_doc/1", `{}`)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "lost", kept)...)
	waitCaughtUp(t, c, storeFor(t, srv, "lost"), []string{kept}, 10*time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
	keys := redisx.NewKeys("lost")
	all, _ := rdb.Keys(context.Background(), keys.Pattern()).Result()
	for _, k := range all {
		if k != keys.Events() {
			rdb.Del(context.Background(), k)
		}
	}
	code, out := runBinary(t, 30*time.Second, relayArgs(c, srv.URL(), "lost", kept)...)
	last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	if code != 1 || !strings.Contains(last, "state is lost") || !strings.Contains(last, "es-changefeed resync") {
		t.Fatalf("exit %d, last line %q", code, last)
	}
	q := startBinary(t, append([]string{"resync"}, relayArgs(c, srv.URL(), "lost", kept)[1:]...)...)
	waitCaughtUp(t, c, storeFor(t, srv, "lost"), []string{kept}, 10*time.Second)
	_ = q.cmd.Process.Signal(syscall.SIGTERM)
	_ = q.cmd.Wait()
	// run after resync takes the feed and follows it: its lease in Redis,
	// a new document read, the process still running.
	r := startBinary(t, relayArgs(c, srv.URL(), "lost", kept)...)
	waitHolder(t, rdb.Get, keys.Lease(), "", 10*time.Second)
	mustDo(t, "PUT", c.URL()+"/"+kept+"/_doc/2", `{}`)
	waitCaughtUp(t, c, storeFor(t, srv, "lost"), []string{kept}, 10*time.Second)
	if !binaryRunning(r) {
		t.Fatalf("run after resync did not keep running:\n%s", r.out)
	}
	r.kill()
}

// TestRelay_ProgressOfLargeReads: the first read of a large index logs
// documents done / total, rate and ETA; a resync reports its progress to the
// progress callback (the bar on a terminal).
func TestRelay_ProgressOfLargeReads(t *testing.T) {
	t.Parallel()
	c := esCluster(t, esemu.Config{})
	ix := c.Index("large")
	createIndex(t, c, ix, 2, 0)
	for start := 0; start < 12000; start += 2000 {
		var b strings.Builder
		for i := start; i < start+2000; i++ {
			fmt.Fprintf(&b, "{\"index\":{\"_id\":\"%d\"}}\n{\"i\":%d}\n", i, i)
		}
		mustDo(t, "POST", c.URL()+"/"+ix+"/_bulk", b.String())
	}
	srv := redistest.Start(t)
	logs := &lockedLog{}
	f := startRelay(t, c, srv.URL(), "progress", []string{ix}, func(cfg *relay.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		cfg.ProgressInterval = time.Millisecond
	})
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)
	// "done" is logged by the round after the last page: wait for it.
	waitOutput(t, logs, "reading the existing documents of "+ix+": done", 30*time.Second)
	out := logs.String()
	if !strings.Contains(out, `msg="reading the existing documents of `+ix+`" documents=`) || !strings.Contains(out, "total=12000") ||
		!strings.Contains(out, "eta=") || !strings.Contains(out, "reading the existing documents of "+ix+": done") {
		t.Fatalf("no progress log of the first read:\n%s", out)
	}
	f.halt()
	var calls, last, total atomic.Int64
	g := startRelay(t, c, srv.URL(), "progress", []string{ix}, func(cfg *relay.Config) {
		cfg.Snapshot = true
		cfg.SnapshotProgress = func(done, tot int64) { calls.Add(1); last.Store(done); total.Store(tot) }
	})
	waitCaughtUp(t, c, g.store, []string{ix}, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for last.Load() < 12000 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if calls.Load() < 2 || last.Load() != 12000 || total.Load() != 12000 {
		t.Fatalf("snapshot progress: %d calls, last %d of %d; want several, 12000 of 12000", calls.Load(), last.Load(), total.Load())
	}
}

// TestRelay_StateLostWhileRunning: Redis loses everything (a restart
// without persistence) under a running relay: it stops with an error that
// says to resync, instead of silently restarting the feed.
func TestRelay_StateLostWhileRunning(t *testing.T) {
	t.Parallel()
	c := esCluster(t, esemu.Config{})
	ix := c.Index("volatile")
	createIndex(t, c, ix, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/1", `{}`)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "volatile", []string{ix}, nil)
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	srv.Client(t).FlushAll(context.Background())
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/2", `{}`)
	select {
	case err := <-f.done:
		if !errors.Is(err, checkpoint.ErrStateLost) || !strings.Contains(err.Error(), "resync") {
			t.Fatalf("relay stopped with %v, want ErrStateLost telling to resync", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the relay kept running after its state vanished")
	}
}

// TestTargets_SeveralExpressions: four expressions (a pattern with an
// exclusion, an alias that rolls over, a name that exists only later, a
// second pattern with an exclusion) while indices are created, rolled over
// and deleted. The relay asks once for all of them when nothing changed
// (issue 16), so this checks that every change is still seen: the stream
// mirrors what the four expressions name, each event carries the first
// expression naming its index, excluded indices are never read.
func TestTargets_SeveralExpressions(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	app1, app2, ignored := c.Index("app-1"), c.Index("app-2"), c.Index("app-ignored")
	alias, later, x1, x2, xskip := c.Index("logs"), c.Index("later"), c.Index("x-1"), c.Index("x-2"), c.Index("x-skip")
	exprs := []string{c.Index("app-*") + ",-" + ignored, alias, later, c.Index("x-*") + ",-" + xskip}
	createIndex(t, c, app1, 2, 0)
	createIndex(t, c, x1, 1, 0)
	mustDo(t, "PUT", c.URL()+"/"+alias+"-000001", `{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"`+alias+`":{"is_write_index":true}}}`)
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "several", exprs, func(*deletes.Config) {}, func(cfg *relay.Config) { cfg.PollInterval = 200 * time.Millisecond })
	put := func(ix string, n int) {
		for i := 0; i < n; i++ {
			mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), ix, i), fmt.Sprintf(`{"i":%d}`, i))
		}
	}
	put(app1, 5)
	put(alias, 3)
	put(x1, 2)
	for _, step := range []func(){
		func() { createIndex(t, c, app2, 1, 0); put(app2, 4) },
		func() { mustDo(t, "POST", c.URL()+"/"+alias+"/_rollover", ""); put(alias, 3) },
		func() { createIndex(t, c, later, 1, 0); put(later, 2) },
		func() {
			createIndex(t, c, xskip, 1, 0)
			put(xskip, 2)
			createIndex(t, c, ignored, 1, 0)
			put(ignored, 2)
		},
		func() { createIndex(t, c, x2, 1, 0); put(x2, 2) },
		func() { mustDo(t, "DELETE", c.URL()+"/"+app1, "") },
	} {
		time.Sleep(500 * time.Millisecond)
		step()
	}
	deadline := time.Now().Add(30 * time.Second)
	var evs []redisx.Event
	var diff string
	for time.Now().Before(deadline) {
		want := map[docKey]doc{}
		for _, e := range exprs {
			for k, d := range docsBehind(t, c, e) {
				want[k] = d
			}
		}
		evs = entries(t, f.rdb, f.keys.Events())
		if diff = diffDocs(want, replay(evs)); diff == "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("the stream does not mirror the four expressions:\n%s", diff)
	}
	noSeqTwice(t, evs)
	got := map[string]string{}
	for _, e := range evs {
		if e.Op != redisx.OpUpsert {
			continue
		}
		if e.Index == ignored || e.Index == xskip {
			t.Fatalf("an excluded index was followed: %+v", e)
		}
		if prev, ok := got[e.Index]; ok && prev != e.Target {
			t.Fatalf("index %s has events with targets %q and %q", e.Index, prev, e.Target)
		}
		got[e.Index] = e.Target
	}
	want := map[string]string{app1: exprs[0], app2: exprs[0], alias + "-000001": alias, later: later, x1: exprs[3], x2: exprs[3]}
	for _, n := range resolveNames(t, c, alias) {
		want[n] = alias
	}
	for ix, target := range want {
		if got[ix] != target {
			t.Errorf("events of %s carry target %q, want %q", ix, got[ix], target)
		}
	}
	deleted := false
	for _, e := range evs {
		deleted = deleted || (e.Index == app1 && e.Op != redisx.OpUpsert)
	}
	if !deleted {
		t.Errorf("the deleted index %s has no delete or index_deleted event", app1)
	}
}
