package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// feedEnv is an emulated cluster and a real Redis for a Feed.
type feedEnv struct {
	url    string
	client *es.Client
	rdb    *redis.Client
}

func newFeedEnv(tb testing.TB) feedEnv {
	tb.Helper()
	c, err := esemu.New(esemu.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	client, err := es.New(es.Config{URLs: []string{c.URL()}})
	if err != nil {
		tb.Fatal(err)
	}
	return feedEnv{url: c.URL(), client: client, rdb: redistest.Start(tb).Client(tb)}
}

func (e feedEnv) do(tb testing.TB, method, path, body string) {
	tb.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
}

func (e feedEnv) create(tb testing.TB, index string, shards int) {
	tb.Helper()
	e.do(tb, http.MethodPut, "/"+index, fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":0}}`, shards))
}

// runFeed runs a Feed on cfg (clients, fast polls and backoffs filled in)
// until the test ends, when Run must return nil.
func (e feedEnv) runFeed(tb testing.TB, cfg FeedConfig) *Feed {
	tb.Helper()
	f, run := e.startFeed(tb, cfg)
	tb.Cleanup(func() {
		if err := run.stop(); err != nil {
			tb.Errorf("Feed.Run: %v", err)
		}
	})
	return f
}

// runningFeed is a Feed's Run in a goroutine.
type runningFeed struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

// stop ends Run and returns its error.
func (r *runningFeed) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// startFeed runs a Feed on cfg until the test ends.
func (e feedEnv) startFeed(tb testing.TB, cfg FeedConfig) (*Feed, *runningFeed) {
	tb.Helper()
	cfg.ES, cfg.Redis = e.client, e.rdb
	cfg.PollInterval, cfg.LeaseTTL = 50*time.Millisecond, time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Tune = func(c *Config) { c.MinBackoff, c.MaxBackoff = 10*time.Millisecond, 200*time.Millisecond }
	f, err := NewFeed(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &runningFeed{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(run.done); run.err = f.Run(ctx) }()
	tb.Cleanup(func() { _ = run.stop() })
	return f, run
}

// shardSeries lists the escf_shard_checkpoint and
// escf_shard_global_checkpoint series in g as "name index/shard", sorted.
func shardSeries(tb testing.TB, g prometheus.Gatherer) []string {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "escf_shard_checkpoint" && mf.GetName() != "escf_shard_global_checkpoint" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, mf.GetName()+" "+labels["index"]+"/"+labels["shard"])
		}
	}
	slices.Sort(out)
	return out
}

// waitSeries waits until the shard series in g are want.
func waitSeries(tb testing.TB, g prometheus.Gatherer, want []string, what string) {
	tb.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := shardSeries(tb, g)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: series %q, want %q", what, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func both(index string, shards ...int) []string {
	var out []string
	for _, s := range shards {
		out = append(out, fmt.Sprintf("escf_shard_checkpoint %s/%d", index, s), fmt.Sprintf("escf_shard_global_checkpoint %s/%d", index, s))
	}
	return out
}

// TestFeed_MetricsOfGoneIndices: the per-shard series of an index that is
// deleted, or no longer matches the targets, are deleted from the
// registry; a re-created index (same name, new uuid, fewer shards) keeps
// its name's series, for the shards it has only.
func TestFeed_MetricsOfGoneIndices(t *testing.T) {
	env := newFeedEnv(t)
	env.create(t, "m-a", 2)
	env.create(t, "m-b", 2)
	env.create(t, "m-c", 1)
	reg := prometheus.NewRegistry()
	f := env.runFeed(t, FeedConfig{Feed: "metrics", Targets: []string{"m-*,-m-c", "m-c"}, Metrics: reg})
	waitSeries(t, reg, slices.Concat(both("m-a", 0, 1), both("m-b", 0, 1), both("m-c", 0)), "followed")
	if err := f.Run(context.Background()); !errors.Is(err, ErrRanTwice) {
		t.Fatalf("a second Feed.Run: %v, want ErrRanTwice", err)
	}

	env.do(t, http.MethodDelete, "/m-a", "")
	waitSeries(t, reg, slices.Concat(both("m-b", 0, 1), both("m-c", 0)), "m-a deleted")

	env.do(t, http.MethodDelete, "/m-b", "")
	env.create(t, "m-b", 1)
	waitSeries(t, reg, slices.Concat(both("m-b", 0), both("m-c", 0)), "m-b re-created with one shard")

	// An index that still exists but no longer matches: m-c closed is
	// skipped, its loop ends.
	env.do(t, http.MethodPost, "/m-c/_close", "")
	waitSeries(t, reg, both("m-b", 0), "m-c closed")
}

// waitHeld waits until f's manager holds every one of its partitions.
func waitHeld(tb testing.TB, f *Feed, what string) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m := f.manager.Load(); m != nil && len(m.Held()) == f.cfg.Partitions {
			return
		}
		if time.Now().After(deadline) {
			_, held := f.Health()
			tb.Fatalf("%s: %s, want every partition held", what, held)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFeed_PartitionStateLostIsTold: the keys of a partition vanish
// (Redis restarted without them) while this process runs it: the fresh
// Relay that takes the partition again knows this process saw its state,
// and the feed stops with ErrStateLost instead of starting it afresh.
func TestFeed_PartitionStateLostIsTold(t *testing.T) {
	env := newFeedEnv(t)
	env.create(t, "l-a", 4)
	for i := range 20 {
		env.do(t, http.MethodPut, fmt.Sprintf("/l-a/_doc/%d", i), `{}`)
	}
	f, run := env.startFeed(t, FeedConfig{Feed: "lost", Targets: []string{"l-a"}, Partitions: 2})
	waitHeld(t, f, "start")
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if n, _ := env.rdb.XLen(ctx, f.Keys(0).Events()).Result(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("partition 0 wrote nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys, err := env.rdb.Keys(ctx, "escf:{lost:0}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of partition 0: %v %v", keys, err)
	}
	if err := env.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.done:
		if !errors.Is(run.err, checkpoint.ErrStateLost) {
			t.Fatalf("Feed.Run: %v, want ErrStateLost", run.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the feed went on after partition 0's state vanished")
	}
}

// TestFeed_PartitionReacquiredGetsAFreshRelay: a partition whose lease is
// lost is taken again by the manager with a new Relay (the metrics of the
// first are not registered twice) that goes on delivering.
func TestFeed_PartitionReacquiredGetsAFreshRelay(t *testing.T) {
	env := newFeedEnv(t)
	env.create(t, "p-a", 4)
	reg := prometheus.NewRegistry()
	f := env.runFeed(t, FeedConfig{Feed: "parts", Targets: []string{"p-a"}, Partitions: 2, Metrics: reg})
	ctx := context.Background()
	waitHeld(t, f, "start")
	first, err := env.rdb.Get(ctx, f.Keys(0).Lease()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Another holder takes partition 0's lease for a moment: its relay
	// loses it and returns.
	if err := env.rdb.Set(ctx, f.Keys(0).Lease(), "intruder", 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		tok, err := env.rdb.Get(ctx, f.Keys(0).Lease()).Result()
		if err == nil && tok == first && len(f.manager.Load().Held()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition 0's lease is %q (%v), want %q again", tok, err, first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitHeld(t, f, "re-acquired")
	// Documents on every shard reach the partitions' streams.
	for i := range 40 {
		env.do(t, http.MethodPut, fmt.Sprintf("/p-a/_doc/%d", i), `{}`)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		n := int64(0)
		for p := range 2 {
			msgs, err := env.rdb.XRange(ctx, f.Keys(p).Events(), "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if e, err := redisx.ParseEvent(m); err == nil && e.Op == redisx.OpUpsert {
					n++
				}
			}
		}
		if n >= 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d upserts in the streams, want 40", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRelay_RunOnce: a Relay runs once; a second Run is refused.
func TestRelay_RunOnce(t *testing.T) {
	env := newFeedEnv(t)
	f, err := NewFeed(FeedConfig{ES: env.client, Redis: env.rdb, Feed: "once", Targets: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.relayConfig(f.parts[0], false)
	cfg.carry = nil
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("first Run on an ended context: %v, want nil", err)
	}
	if err := r.Run(ctx); !errors.Is(err, ErrRanTwice) {
		t.Fatalf("second Run: %v, want ErrRanTwice", err)
	}
}

func TestFeedConfig_Validate(t *testing.T) {
	base := FeedConfig{ES: &es.Client{}, Redis: redis.NewClient(&redis.Options{}), Feed: "f", Targets: []string{"a"}}
	tests := []struct {
		name    string
		mod     func(*FeedConfig)
		wantErr string
	}{
		{name: "minimal", mod: func(*FeedConfig) {}},
		{name: "no ES", mod: func(c *FeedConfig) { c.ES = nil }, wantErr: "ES is nil"},
		{name: "no Redis", mod: func(c *FeedConfig) { c.Redis = nil }, wantErr: "Redis is nil"},
		{name: "bad feed name", mod: func(c *FeedConfig) { c.Feed = "a:b" }, wantErr: "Feed:"},
		{name: "too many partitions", mod: func(c *FeedConfig) { c.Partitions = 1025 }, wantErr: "Partitions = 1025"},
		{name: "negative backlog", mod: func(c *FeedConfig) { c.Retention.MaxBacklog = -1 }, wantErr: "Retention.MaxBacklog = -1"},
		{name: "negative replicas", mod: func(c *FeedConfig) { c.Durability.WaitReplicas = -1 }, wantErr: "Durability.WaitReplicas = -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			checkValidate(t, c.Validate(), tt.wantErr)
		})
	}
	t.Run("NewFeed checks the relay config too", func(t *testing.T) {
		c := base
		c.Targets = nil
		if _, err := NewFeed(c); err == nil || !strings.Contains(err.Error(), "no Targets") {
			t.Fatalf("NewFeed without targets: %v, want the relay config's refusal", err)
		}
	})
}
