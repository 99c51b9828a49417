package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// newRedisSink returns a sink on c with cfg (Client set), closed in
// tb.Cleanup.
func newRedisSink(tb testing.TB, c redis.UniversalClient, cfg sink.RedisConfig) *sink.Redis {
	tb.Helper()
	cfg.Client = c
	s, err := sink.NewRedis(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// redisValue is the value of key, "" when it does not exist.
func redisValue(tb testing.TB, c *redis.Client, key string) string {
	tb.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// TestRedis_Contract runs the sinks' contract (sinktest) on Redis in set
// mode, with a client passed in that reaches the server through a proxy
// (the suite's hanging target).
func TestRedis_Contract(t *testing.T) {
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		srv := redistest.Start(tb)
		proxy := sinktest.StartProxy(tb, srv.Addr)
		passed := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		tb.Cleanup(func() { passed.Close() })
		direct := srv.Client(tb)
		open := func(tb testing.TB) sink.Sink {
			s, err := sink.NewRedis(sink.RedisConfig{Client: passed, Mode: sink.RedisSet})
			if err != nil {
				tb.Fatal(err)
			}
			return s
		}
		holds := func(ctx context.Context, d sinktest.DocID) (json.RawMessage, bool, error) {
			v, err := direct.Get(ctx, "cache:"+d.Index+":"+d.ID).Result() // sink.DefaultRedisKey
			if errors.Is(err, redis.Nil) {
				return nil, false, nil
			}
			return json.RawMessage(v), err == nil, err
		}
		clientOpen := func(ctx context.Context) error { return passed.Ping(ctx).Err() }
		return sinktest.Env{Sink: open(tb), Holds: holds, Gate: &proxy.Gate, ClientsOpen: clientOpen, Reopen: open}
	}, sinktest.Features{Ordered: true, Positions: true, Reconciler: true, ClientsPassedIn: true, CloseAborts: true})
}

func TestRedisConfig_Validate(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	tests := []struct {
		name    string
		cfg     sink.RedisConfig
		wantErr string
	}{
		{name: "defaults", cfg: sink.RedisConfig{Client: c}},
		{name: "URL", cfg: sink.RedisConfig{URL: "redis://127.0.0.1:1/0"}},
		{name: "set with TTL", cfg: sink.RedisConfig{Client: c, Mode: sink.RedisSet, TTL: time.Minute}},
		{name: "cluster with the old fence's tag", cfg: sink.RedisConfig{Client: cluster, Key: "cache:{{cache}}:{index}:{id}"}},
		{name: "cluster with its own old fence", cfg: sink.RedisConfig{Client: cluster, Key: "{{c7}}{index}/{id}", FenceKey: "fence:{c7}"}},
		{name: "cluster without a tag", cfg: sink.RedisConfig{Client: cluster}},
		{name: "cluster with another tag", cfg: sink.RedisConfig{Client: cluster, Key: "{{x}}:{id}"}},
		{name: "cluster with an untagged old fence", cfg: sink.RedisConfig{Client: cluster, Key: "{{x}}:{id}", FenceKey: "fence"}},
		{name: "cluster with a fence prefix", cfg: sink.RedisConfig{Client: cluster, FencePrefix: "f:cache"}},
		{name: "end grace", cfg: sink.RedisConfig{Client: c, FenceEndGrace: time.Hour}},
		{name: "cluster URL", cfg: sink.RedisConfig{URL: "redis-cluster://127.0.0.1:1,127.0.0.1:2", Key: "{id}"}},
		{name: "cluster URL with a braced fence prefix", cfg: sink.RedisConfig{URL: "redis-cluster://127.0.0.1:1", FencePrefix: "{f}"}, wantErr: "in Redis Cluster it must hold no braces"},
		{name: "neither client nor URL", cfg: sink.RedisConfig{}, wantErr: "set Client or URL"},
		{name: "both", cfg: sink.RedisConfig{Client: c, URL: "redis://h:1"}, wantErr: "not both"},
		{name: "unknown placeholder", cfg: sink.RedisConfig{Client: c, Key: "c:{indx}:{id}"}, wantErr: `Key: bad key template "c:{indx}:{id}": unknown placeholder "{indx}"`},
		{name: "bad mode", cfg: sink.RedisConfig{Client: c, Mode: "put"}, wantErr: `Mode "put"`},
		{name: "TTL in del mode", cfg: sink.RedisConfig{Client: c, TTL: time.Second}, wantErr: `TTL = 1s is only used in mode "set"`},
		{name: "negative TTL", cfg: sink.RedisConfig{Client: c, Mode: sink.RedisSet, TTL: -time.Second}, wantErr: "TTL = -1s"},
		{name: "name with a brace", cfg: sink.RedisConfig{Client: c, Name: "a{b"}, wantErr: `Name "a{b"`},
		{name: "cluster with a braced fence prefix", cfg: sink.RedisConfig{Client: cluster, FencePrefix: "f:{cache}"}, wantErr: `FencePrefix "f:{cache}": in Redis Cluster it must hold no braces`},
		{name: "negative end grace", cfg: sink.RedisConfig{Client: c, FenceEndGrace: -time.Second}, wantErr: "FenceEndGrace = -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRedis_Handler(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	type step struct {
		e    redisx.Event
		want string // the document's key afterwards; "" = missing
	}
	src := func(e redisx.Event) string { return string(e.Source) }
	tests := []struct {
		name  string
		cfg   sink.RedisConfig
		key   string // of document "42"
		steps []step
	}{
		{
			name: "del mode invalidates on upserts and deletes",
			cfg:  sink.RedisConfig{Name: "del"},
			key:  "cache:orders:42",
			steps: []step{
				{sinkUpsert("42", 1), ""},
				{sinkDelete("42", 1), ""},
			},
		},
		{
			name: "set mode: newer wins, deletes stay deleted",
			cfg:  sink.RedisConfig{Name: "set", Mode: sink.RedisSet, Key: "set:{index}:{id}"},
			key:  "set:orders:42",
			steps: []step{
				{sinkUpsert("42", 1), src(sinkUpsert("42", 1))},
				{sinkUpsert("42", 3), src(sinkUpsert("42", 3))},
				{sinkUpsert("42", 2), src(sinkUpsert("42", 3))}, // older, late
				{sinkUpsert("42", 3), src(sinkUpsert("42", 3))}, // redelivered
				{sinkDelete("42", 3), ""},                       // delete at the same seq_no
				{sinkUpsert("42", 3), ""},                       // the upsert it follows, redelivered
				{sinkUpsert("42", 5), src(sinkUpsert("42", 5))}, // re-created
			},
		},
		{
			name: "template with every placeholder",
			cfg:  sink.RedisConfig{Name: "all", Mode: sink.RedisSet, Key: "{index}/{index_uuid}/{shard}/{routing}/{id}"},
			key:  "orders/U1/0//42",
			steps: []step{
				{sinkUpsert("42", 1), src(sinkUpsert("42", 1))},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRedisSink(t, c, tt.cfg).Handler()
			c.Set(ctx, tt.key, "stale", 0)
			for i, s := range tt.steps {
				if err := h(ctx, s.e); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := redisValue(t, c, tt.key); got != s.want {
					t.Fatalf("step %d (%s seq_no %d): %s = %q, want %q", i, s.e.Op, s.e.SeqNo, tt.key, got, s.want)
				}
			}
		})
	}

	t.Run("the fence lives in the cache's Redis under the default key", func(t *testing.T) {
		got, err := c.HGet(ctx, "escf:{cache}:fence:set:U1", "0/42").Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := "10"; got != want { // the re-created upsert at seq_no 5
			t.Errorf("fence = %s, want %s", got, want)
		}
	})
	t.Run("a del mode upsert after a newer delete does not touch the key", func(t *testing.T) {
		h := newRedisSink(t, c, sink.RedisConfig{Name: "late", Key: "late:{id}"}).Handler()
		if err := h(ctx, sinkDelete("7", 9)); err != nil {
			t.Fatal(err)
		}
		c.Set(ctx, "late:7", "reloaded by the application", 0)
		if err := h(ctx, sinkUpsert("7", 4)); err != nil {
			t.Fatal(err)
		}
		if got, want := redisValue(t, c, "late:7"), "reloaded by the application"; got != want {
			t.Errorf("late:7 = %q, want %q", got, want)
		}
	})
	t.Run("TTL", func(t *testing.T) {
		h := newRedisSink(t, c, sink.RedisConfig{Name: "ttl", Mode: sink.RedisSet, TTL: time.Hour, Key: "ttl:{id}"}).Handler()
		if err := h(ctx, sinkUpsert("1", 1)); err != nil {
			t.Fatal(err)
		}
		if ttl := c.TTL(ctx, "ttl:1").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("TTL = %s, want about 1h", ttl)
		}
	})
	t.Run("other ops write nothing", func(t *testing.T) {
		before := c.DBSize(ctx).Val()
		h := newRedisSink(t, c, sink.RedisConfig{Name: "other"}).Handler()
		for _, e := range []redisx.Event{
			{Op: redisx.OpIndexDeleted, Index: "orders"}, // no uuid: no fences to end
			{Op: redisx.OpSnapshotStart, Target: "orders"},
			{Op: redisx.OpSnapshotEnd, Target: "orders", Counts: map[string]int64{"orders": 1}},
		} {
			if err := h(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if after := c.DBSize(ctx).Val(); after != before {
			t.Errorf("%d keys, want %d", after, before)
		}
	})
	t.Run("negative seq_no is permanent", func(t *testing.T) {
		h := newRedisSink(t, c, sink.RedisConfig{Name: "neg"}).Handler()
		if err := h(ctx, sinkUpsert("1", -1)); !redisx.IsPermanent(err) {
			t.Errorf("err = %v, want permanent", err)
		}
	})
}

// TestRedis_Concurrent has several consumers apply shuffled versions of
// documents at once: each document ends with its newest version.
func TestRedis_Concurrent(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	const (
		consumers = 8
		versions  = 30
	)
	docs := []string{"a", "b", "c"}
	var events []redisx.Event
	for _, id := range docs {
		for s := range int64(versions) {
			events = append(events, sinkUpsert(id, s))
		}
	}
	events = append(events, sinkDelete("c", versions-1)) // c ends deleted
	var wg sync.WaitGroup
	for w := range consumers {
		// Each consumer its own sink and client, as separate processes.
		h := newRedisSink(t, srv.Client(t), sink.RedisConfig{Mode: sink.RedisSet}).Handler()
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := append([]redisx.Event(nil), events...)
			rand.New(rand.NewPCG(uint64(w), 1)).Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for _, e := range mine {
				if err := h(ctx, e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	newest := string(sinkUpsert("", versions-1).Source)
	for id, want := range map[string]string{"a": newest, "b": newest, "c": ""} {
		if got := redisValue(t, c, "cache:orders:"+id); got != want {
			t.Errorf("document %s = %q, want %q", id, got, want)
		}
	}
}

func TestRedis_URLAndClose(t *testing.T) {
	srv := redistest.Start(t)
	s, err := sink.NewRedis(sink.RedisConfig{URL: srv.URL(), Mode: sink.RedisSet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Handler()(ctx, sinkUpsert("1", 1)); err != nil {
		t.Fatal(err)
	}
	if got, want := redisValue(t, srv.Client(t), "cache:orders:1"), `{"seq":1}`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = sink.NewRedis(sink.RedisConfig{URL: "http://nope"})
	if !errors.Is(err, redisx.ErrBadURL) {
		t.Errorf("bad URL: err = %v, want ErrBadURL", err)
	}
}
