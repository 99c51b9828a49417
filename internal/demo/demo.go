package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

// Index is the index the demo's writer writes and its feed follows.
const Index = "demo-orders"

// DefaultFlavor is the engine the demo emulates when Config.Flavor is
// empty.
const DefaultFlavor = string(esemu.DefaultFlavor)

// DefaultDuration is how long the writer writes when Config.Duration is
// zero.
const DefaultDuration = 10 * time.Second

// Config configures Run.
type Config struct {
	// Flavor names the emulated engine, one of Flavors. Default
	// DefaultFlavor.
	Flavor string
	// Duration is how long the writer writes. Default DefaultDuration.
	Duration time.Duration
	// Stdout gets each event of the stream as one JSON line, Stderr the
	// demo's own lines (what runs where, the final check). Default
	// io.Discard.
	Stdout, Stderr io.Writer
	// Metrics registers the feed's collectors. Default: a registry of
	// Run's own, thrown away.
	Metrics prometheus.Registerer
	// Serve, when set, is called once with what the demo's feed offers a
	// metrics and status server (the CLI's --metrics-addr); the server
	// must stop when ctx ends. An error ends Run before the writer starts.
	Serve func(ctx context.Context, feed Ops) error
	// Logger logs the relay. Default: discarded.
	Logger *slog.Logger
}

// Ops is what a metrics and status server reads of the demo's feed.
type Ops struct {
	Redis         redis.UniversalClient
	Keys          redisx.Keys
	ES            *es.Client
	Health, Ready func() (bool, string)
}

// Flavors are the names Config.Flavor takes.
func Flavors() []string {
	out := make([]string, len(esemu.Flavors))
	for i, f := range esemu.Flavors {
		out[i] = string(f)
	}
	return out
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Flavor != "" {
		if _, err := esemu.ParseFlavor(c.Flavor); err != nil {
			return fmt.Errorf("demo config: Flavor: %w", err)
		}
	}
	if c.Duration < 0 {
		return fmt.Errorf("demo config: Duration = %s: want > 0", c.Duration)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Flavor == "" {
		c.Flavor = DefaultFlavor
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Run wires everything in-process: writes for cfg.Duration, waits until
// the feed caught up, checks that replaying the stream reproduces the
// index, and returns. It blocks until then or until ctx ends (nil: a
// stop is not a failure).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	flavor, _ := esemu.ParseFlavor(cfg.Flavor)
	d, stdout, stderr := cfg.Duration, cfg.Stdout, cfg.Stderr
	cluster, err := esemu.New(esemu.Config{Flavor: flavor, Nodes: 3, OutOfOrder: true})
	if err != nil {
		return err
	}
	defer cluster.Close()
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("start embedded Redis: %w", err)
	}
	defer mr.Close()
	fmt.Fprintf(stderr, "demo: %s %s with 3 nodes at %s, embedded Redis at %s; writing for %s\n",
		flavor, flavor.Version(), cluster.URL(), mr.Addr(), d)

	w := &writer{url: cluster.URL(), rng: rand.New(rand.NewPCG(1, 2)), live: map[string]bool{}, routing: map[string]string{}}
	if err := w.put("/"+Index, `{"settings":{"number_of_shards":3,"number_of_replicas":1}}`); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	client, err := es.New(es.Config{URLs: []string{cluster.URL()}})
	if err != nil {
		return err
	}
	f, err := relay.NewFeed(relay.FeedConfig{ES: client, Redis: rdb, Feed: "demo", Targets: []string{Index}, Owner: "demo",
		PollInterval: 100 * time.Millisecond, BatchSize: 200, Deletes: relay.Deletes{Enabled: true, Interval: 500 * time.Millisecond},
		Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	keys := f.Keys(0)
	fmt.Fprintf(stderr, "demo: a writer creates, updates and deletes documents of %s; the relay (run --deletes) follows it into the stream %s; a reader prints each event on stdout as a JSON line (--log-level info shows the relay's log)\n",
		Index, keys.Events())
	// The demo reads the feed's state to tell when it caught up.
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if cfg.Serve != nil {
		if err := cfg.Serve(runCtx, Ops{Redis: rdb, Keys: keys, ES: client, Health: f.Health, Ready: f.Ready}); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	relayErr := make(chan error, 1)
	wg.Add(2)
	go func() { defer wg.Done(); relayErr <- f.Run(runCtx) }()
	printed := make(chan string, 1)
	var events int
	go func() {
		defer wg.Done()
		last, n := printEvents(runCtx, rdb, keys.Events(), stdout, stderr)
		events = n
		printed <- last
	}()

	writeCtx, stopWriting := context.WithTimeout(ctx, d)
	werr := w.run(writeCtx)
	stopWriting()
	if werr != nil && ctx.Err() == nil {
		stop()
		wg.Wait()
		return werr
	}
	if ctx.Err() != nil {
		stop()
		wg.Wait()
		return nil
	}
	if err := catchUp(ctx, cluster, store, relayErr); err != nil {
		stop()
		wg.Wait()
		return err
	}
	// Deletes are found by scans between reads: wait for the stream to
	// mirror the index.
	var docs int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if docs, err = verify(ctx, cluster, rdb, keys.Events()); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		stop()
		wg.Wait()
		return err
	}
	// Let the reader drain the stream before stopping it.
	lastID := ""
	if msgs, err := rdb.XRevRangeN(ctx, keys.Events(), "+", "-", 1).Result(); err == nil && len(msgs) == 1 {
		lastID = msgs[0].ID
	}
	waitPrinted(ctx, rdb, keys.Events(), lastID)
	stop()
	wg.Wait()
	<-printed
	fmt.Fprintf(stderr, "demo: %d writes (%d deletes), %d events; replaying the stream gives the %d documents of the index, exactly\n",
		w.writes, w.deletes, events, docs)
	return nil
}

// writer creates, updates and deletes orders, some with custom routing.
type writer struct {
	url     string
	rng     *rand.Rand
	ids     []string          // ids ever created (never reused)
	live    map[string]bool   // ids not deleted
	routing map[string]string // id -> routing, fixed per document
	writes  int
	deletes int
}

func (w *writer) put(path, body string) error { return w.send(http.MethodPut, path, body) }

func (w *writer) send(method, path, body string) error {
	req, err := http.NewRequest(method, w.url+path, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("demo writer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("demo writer: %s %s: %s", method, path, b)
	}
	w.writes++
	return nil
}

var statuses = []string{"new", "paid", "packed", "shipped", "delivered"}

func (w *writer) run(ctx context.Context) error {
	t := time.NewTicker(40 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if len(w.live) > 5 && w.rng.IntN(6) == 0 {
			if err := w.deleteOne(); err != nil {
				return err
			}
			continue
		}
		var id string
		if len(w.live) < 5 || w.rng.IntN(3) == 0 {
			id = fmt.Sprintf("order-%d", len(w.ids)+1)
			w.ids = append(w.ids, id)
			w.live[id] = true
			if len(w.ids)%2 == 0 {
				w.routing[id] = fmt.Sprintf("customer-%d", w.rng.IntN(4)) // routed documents land by customer
			}
		} else {
			id = w.pick()
		}
		doc := map[string]any{"status": statuses[w.rng.IntN(len(statuses))], "amount": w.rng.IntN(50000) / 100.0}
		if r := w.routing[id]; r != "" {
			doc["customer"] = r
		}
		b, _ := json.Marshal(doc)
		if err := w.put(w.docPath(id), string(b)); err != nil {
			return err
		}
	}
}

// pick returns a random live id.
func (w *writer) pick() string {
	for {
		if id := w.ids[w.rng.IntN(len(w.ids))]; w.live[id] {
			return id
		}
	}
}

func (w *writer) docPath(id string) string {
	p := "/" + Index + "/_doc/" + id
	if r := w.routing[id]; r != "" {
		p += "?routing=" + r
	}
	return p
}

func (w *writer) deleteOne() error {
	id := w.pick()
	delete(w.live, id)
	w.deletes++
	return w.send(http.MethodDelete, w.docPath(id), "")
}

// printEvents prints every stream entry as a JSON line until ctx ends.
func printEvents(ctx context.Context, rdb *redis.Client, stream string, out, errOut io.Writer) (string, int) {
	last, n := "0", 0
	enc := json.NewEncoder(out)
	for ctx.Err() == nil {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 100, Block: 100 * time.Millisecond}).Result()
		if err != nil {
			continue
		}
		for _, s := range res {
			for _, m := range s.Messages {
				e, err := redisx.ParseEvent(m)
				if err != nil {
					fmt.Fprintln(errOut, "demo:", err)
					continue
				}
				_ = enc.Encode(e)
				last = m.ID
				n++
			}
		}
	}
	return last, n
}

// catchUp waits until every shard's checkpoint reached its gcp.
func catchUp(ctx context.Context, c *esemu.Cluster, store *checkpoint.Store, relayErr <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-relayErr:
			return fmt.Errorf("relay stopped: %v", err)
		default:
		}
		st, err := store.Load(ctx)
		if err == nil && caughtUp(c, st) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("demo: the relay did not catch up within 30s")
}

func caughtUp(c *esemu.Cluster, st checkpoint.State) bool {
	for n := 0; n < 3; n++ {
		ss, err := c.ShardState(Index, n)
		if err != nil {
			return false
		}
		found := false
		for id, cp := range st.Checkpoints {
			if id.Shard == n && cp == ss.GlobalCheckpoint && ss.GlobalCheckpoint == ss.NextSeqNo-1 {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func waitPrinted(ctx context.Context, rdb *redis.Client, stream, lastID string) {
	// The reader reads in 100-entry pages every 100ms at most; give it time.
	n, _ := rdb.XLen(ctx, stream).Result()
	time.Sleep(time.Duration(n/100+3) * 100 * time.Millisecond)
}

// verify replays the stream (last upsert per shard and id) and compares
// it with the documents of the index.
func verify(ctx context.Context, c *esemu.Cluster, rdb *redis.Client, stream string) (int, error) {
	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		return 0, err
	}
	type key struct {
		shard int
		id    string
	}
	replay := map[key]redisx.Event{}
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			return 0, err
		}
		switch e.Op {
		case redisx.OpUpsert:
			replay[key{e.Shard, e.ID}] = e
		case redisx.OpDelete:
			delete(replay, key{e.Shard, e.ID})
		}
	}
	docs := 0
	for n := 0; n < 3; n++ {
		vis, err := c.VisibleDocs(Index, n, 0)
		if err != nil {
			return 0, err
		}
		for _, d := range vis {
			docs++
			e, ok := replay[key{n, d.ID}]
			if !ok || e.SeqNo != d.SeqNo || !bytes.Equal(e.Source, d.Source) {
				return 0, fmt.Errorf("demo: the stream does not reproduce document %s of shard %d (seq %d)", d.ID, n, d.SeqNo)
			}
		}
	}
	if docs != len(replay) {
		return 0, fmt.Errorf("demo: the stream has %d documents, the index %d", len(replay), docs)
	}
	return docs, nil
}
