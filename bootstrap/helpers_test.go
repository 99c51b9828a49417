package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// rig is a source cluster (an emulator), a real redis-server and a relay
// following targets into a feed, in-process.
type rig struct {
	emu   *esemu.Cluster
	url   string
	es    *es.Client
	rdb   *redis.Client
	feed  string
	keys  redisx.Keys
	store *checkpoint.Store
	log   *slog.Logger

	stopRelay func()
}

type rigOptions struct {
	emu     esemu.Config
	targets []string
	deletes bool
}

func newRig(tb testing.TB, o rigOptions) *rig {
	tb.Helper()
	emu, err := esemu.New(o.emu)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { emu.Close() })
	srv := redistest.Start(tb)
	r := &rig{emu: emu, url: emu.URL(), rdb: srv.Client(tb), feed: "boot", keys: redisx.NewKeys("boot"),
		log: slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if r.es, err = es.New(es.Config{URLs: []string{r.url}}); err != nil {
		tb.Fatal(err)
	}
	if _, err := r.es.Info(context.Background()); err != nil {
		tb.Fatal(err)
	}
	r.startRelay(tb, o.targets, o.deletes)
	return r
}

// startRelay runs the relay until the test ends or stopRelay.
func (r *rig) startRelay(tb testing.TB, targets []string, withDeletes bool) {
	tb.Helper()
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: r.rdb, Key: r.keys.Lease(), TTL: time.Second, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	if r.store, err = checkpoint.New(checkpoint.Config{Client: r.rdb, Keys: r.keys, Lease: lease}); err != nil {
		tb.Fatal(err)
	}
	cfg := relay.Config{ES: r.es, Store: r.store, Lease: lease, Targets: targets, PollInterval: 50 * time.Millisecond,
		BatchSize: 100, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: r.log}
	if withDeletes {
		sc, err := deletes.New(deletes.Config{ES: r.es, Client: r.rdb, Keys: r.keys, Store: r.store, Interval: 100 * time.Millisecond,
			DurableWait: 5 * time.Second, Logger: r.log})
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Deletes = sc
	}
	rl, err := relay.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := rl.Run(ctx); err != nil {
			r.log.Error("relay stopped", "error", err)
		}
	}()
	var once sync.Once
	r.stopRelay = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
		})
	}
	tb.Cleanup(r.stopRelay)
}

// position is the stream's last entry id now ("0-0" for an empty stream):
// what consume --bootstrap records before the copy.
func (r *rig) position(tb testing.TB) string {
	tb.Helper()
	msgs, err := r.rdb.XRevRangeN(context.Background(), r.keys.Events(), "+", "-", 1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if len(msgs) == 0 {
		return "0-0"
	}
	return msgs[0].ID
}

// after returns the stream's events after position.
func (r *rig) after(tb testing.TB, position string) []redisx.Event {
	tb.Helper()
	msgs, err := r.rdb.XRange(context.Background(), r.keys.Events(), "("+position, "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]redisx.Event, len(msgs))
	for i, m := range msgs {
		if out[i], err = redisx.ParseEvent(m); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// waitCaughtUp waits until every shard of the indices has a checkpoint
// equal to its gcp and the gcp covers every op started.
func (r *rig) waitCaughtUp(tb testing.TB, indices ...string) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		if why = r.caughtUp(tb, indices); why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("the relay did not catch up: %s", why)
}

func (r *rig) caughtUp(tb testing.TB, indices []string) string {
	st, err := r.store.Load(context.Background())
	if err != nil {
		return err.Error()
	}
	stats, err := r.es.Stats(context.Background(), indices)
	if err != nil {
		return err.Error()
	}
	for _, name := range indices {
		ix, ok := stats[name]
		if !ok {
			return name + ": no stats"
		}
		for _, sc := range ix.Shards {
			if sc.GlobalCheckpoint != sc.MaxSeqNo {
				return fmt.Sprintf("%s/%d: gcp %d behind max seq no %d", name, sc.Shard, sc.GlobalCheckpoint, sc.MaxSeqNo)
			}
			cp, ok := st.Checkpoints[checkpoint.ShardID{IndexUUID: ix.UUID, Shard: sc.Shard}]
			if sc.GlobalCheckpoint >= 0 && (!ok || cp != sc.GlobalCheckpoint) {
				return fmt.Sprintf("%s/%d: checkpoint %d (stored %v), gcp %d", name, sc.Shard, cp, ok, sc.GlobalCheckpoint)
			}
		}
	}
	return ""
}

// do sends a request to the source and fails the test on an error status.
func (r *rig) do(tb testing.TB, method, path, body string) []byte {
	tb.Helper()
	return mustDo(tb, method, r.url+path, body)
}

func mustDo(tb testing.TB, method, url, body string) []byte {
	tb.Helper()
	st, b, err := tryDo(method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	if st >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, url, st, b)
	}
	return b
}

func tryDo(method, url, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	ct := "application/json"
	if strings.HasSuffix(strings.SplitN(url, "?", 2)[0], "/_bulk") {
		ct = "application/x-ndjson"
	}
	req.Header.Set("Content-Type", ct)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// docKey is a document's identity: one _id on two shards is two documents.
type docKey struct {
	uuid  string
	shard int
	id    string
}

type doc struct {
	routing string
	seq     int64
	source  string
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// clusterDocs reads every shard of an index in _seq_no order after a
// refresh: what the cluster holds.
func clusterDocs(tb testing.TB, url, index string) map[docKey]doc {
	tb.Helper()
	mustDo(tb, "POST", url+"/"+index+"/_refresh", "")
	var settings map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", url+"/"+index+"/_settings?flat_settings=true", ""), &settings); err != nil {
		tb.Fatal(err)
	}
	uuid := fmt.Sprint(settings[index].Settings["index.uuid"])
	shards, err := strconv.Atoi(fmt.Sprint(settings[index].Settings["index.number_of_shards"]))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[docKey]doc{}
	for n := 0; n < shards; n++ {
		after := ""
		for {
			body := `{"size":1000,"seq_no_primary_term":true,"track_total_hits":false,"sort":[{"_seq_no":"asc"}],"query":{"match_all":{}}` + after + `}`
			var r struct {
				Shards struct {
					Failed int `json:"failed"`
				} `json:"_shards"`
				Hits struct {
					Hits []struct {
						ID      string          `json:"_id"`
						Routing string          `json:"_routing"`
						SeqNo   int64           `json:"_seq_no"`
						Source  json.RawMessage `json:"_source"`
					} `json:"hits"`
				} `json:"hits"`
			}
			b := mustDo(tb, "POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", url, index, n), body)
			if err := json.Unmarshal(b, &r); err != nil {
				tb.Fatal(err)
			}
			if r.Shards.Failed != 0 {
				tb.Fatalf("search shard %d of %s: %s", n, index, b)
			}
			for _, h := range r.Hits.Hits {
				out[docKey{uuid, n, h.ID}] = doc{routing: h.Routing, seq: h.SeqNo, source: compact(h.Source)}
			}
			if len(r.Hits.Hits) < 1000 {
				break
			}
			after = fmt.Sprintf(`,"search_after":[%d]`, r.Hits.Hits[len(r.Hits.Hits)-1].SeqNo)
		}
	}
	return out
}

// fenced replays events as a consumer behind the feed's fences does: per
// document the event with the highest order (idempotency.Order) wins, a
// delete removes; the rest are stale or repeats and change nothing.
func fenced(tb testing.TB, evs ...[]redisx.Event) map[docKey]doc {
	tb.Helper()
	orders := map[docKey]uint64{}
	out := map[docKey]doc{}
	for _, list := range evs {
		for _, e := range list {
			if !idempotency.Fenced(e) {
				continue
			}
			o, err := idempotency.Order(e)
			if err != nil {
				tb.Fatal(err)
			}
			k := docKey{e.IndexUUID, e.Shard, e.ID}
			if cur, ok := orders[k]; ok && o <= cur {
				continue
			}
			orders[k] = o
			if e.Op == redisx.OpDelete {
				delete(out, k)
			} else {
				out[k] = doc{routing: e.Routing, seq: e.SeqNo, source: compact(e.Source)}
			}
		}
	}
	return out
}

// only keeps the documents of the given index uuids.
func only(docs map[docKey]doc, uuids ...string) map[docKey]doc {
	keep := map[string]bool{}
	for _, u := range uuids {
		keep[u] = true
	}
	out := map[docKey]doc{}
	for k, d := range docs {
		if keep[k.uuid] {
			out[k] = d
		}
	}
	return out
}

func merge(ms ...map[docKey]doc) map[docKey]doc {
	out := map[docKey]doc{}
	for _, m := range ms {
		for k, d := range m {
			out[k] = d
		}
	}
	return out
}

// diffDocs says how got differs from want ("" when equal).
func diffDocs(want, got map[docKey]doc) string {
	var lines []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("missing %v (seq %d)", k, w.seq))
		case g != w:
			lines = append(lines, fmt.Sprintf("differs %v: got %+v, want %+v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("extra %v (seq %d)", k, g.seq))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("… and %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// collector is a handler keeping every event it is handed.
type collector struct {
	mu   sync.Mutex
	evs  []redisx.Event
	hook func(e redisx.Event) error // called first; its error fails the event
}

func (c *collector) handle(_ context.Context, e redisx.Event) error {
	if c.hook != nil {
		if err := c.hook(e); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
	return nil
}

func (c *collector) events() []redisx.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]redisx.Event(nil), c.evs...)
}

// testWriter sends log lines to t.Log (until the test ends).
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }()
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func uuidOf(tb testing.TB, c *es.Client, index string) string {
	tb.Helper()
	s, err := c.Settings(context.Background(), index)
	if err != nil {
		tb.Fatal(err)
	}
	return s.UUID
}

// waitAdopted waits until the relay gave the index's current uuid a
// generation (it adopted the index, even an empty one).
func (r *rig) waitAdopted(tb testing.TB, index string) {
	tb.Helper()
	uuid := uuidOf(tb, r.es, index)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n, _ := r.rdb.HExists(context.Background(), r.keys.Generations(), uuid).Result(); n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("the relay did not adopt %s (uuid %s)", index, uuid)
}
