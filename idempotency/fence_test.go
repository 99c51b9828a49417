package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// fenceUpsert is an upsert of document id in index uuid "u", shard 0.
func fenceUpsert(id string, seq int64) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: id, SeqNo: seq,
		PrimaryTerm: 1, Version: seq + 1, Source: json.RawMessage(`{"seq":` + strconv.FormatInt(seq, 10) + `}`)}
}

// fenceDelete is a delete of document id with ordering stamp seq.
func fenceDelete(id string, seq int64) redisx.Event {
	return redisx.Event{Op: redisx.OpDelete, Index: "i", IndexUUID: "u", Shard: 0, ID: id, SeqNo: seq}
}

// layout is a way to lay fences out in Redis; every behavior test runs on
// each.
type layout struct {
	name string
	cfg  func(name string) idempotency.Config // without Client
}

var layouts = []layout{
	{name: "per index", cfg: func(n string) idempotency.Config {
		return idempotency.Config{Prefix: redisx.NewKeys("fencetest").Fence(n)}
	}},
	{name: "per index sharded", cfg: func(n string) idempotency.Config {
		return idempotency.Config{Prefix: redisx.NewKeys("fencetest").Fence(n), Shards: 4}
	}},
	{name: "per index and slot", cfg: func(n string) idempotency.Config {
		return idempotency.Config{Prefix: "escf:fence:" + n, SlotOf: func(e redisx.Event) string { return "doc:" + e.ID }}
	}},
	{name: "single hash (deprecated)", cfg: func(n string) idempotency.Config {
		return idempotency.Config{Key: redisx.NewKeys("fencetest").Fence(n)}
	}},
}

// eachLayout runs test once per layout, as a subtest.
func eachLayout(t *testing.T, test func(t *testing.T, l layout)) {
	t.Helper()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { test(t, l) })
	}
}

// inUUID is e moved to index uuid.
func inUUID(e redisx.Event, uuid string) redisx.Event {
	e.IndexUUID = uuid
	return e
}

// newTestFence starts a redis-server and returns a fence of layout l
// named for the test and a client to the server.
func newTestFence(tb testing.TB, l layout) (*idempotency.Fence, *redis.Client) {
	tb.Helper()
	c := redistest.Start(tb).Client(tb)
	return newFenceOn(tb, c, l.cfg(tb.Name())), c
}

// newFenceOn returns a fence with cfg on client c.
func newFenceOn(tb testing.TB, c redis.UniversalClient, cfg idempotency.Config) *idempotency.Fence {
	tb.Helper()
	cfg.Client = c
	f, err := idempotency.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// dbState is every key of the database with its type and content, for
// comparing before and after.
func dbState(tb testing.TB, c *redis.Client) map[string]string {
	tb.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range c.Keys(ctx, "*").Val() {
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			tb.Fatal(err)
		}
		out[k] = d
	}
	return out
}

func TestOrder(t *testing.T) {
	tests := []struct {
		name    string
		e       redisx.Event
		want    uint64
		wantErr error
	}{
		{name: "upsert seq 0", e: fenceUpsert("a", 0), want: 0},
		{name: "delete seq 0", e: fenceDelete("a", 0), want: 1},
		{name: "upsert seq 5", e: fenceUpsert("a", 5), want: 10},
		{name: "delete seq 5 orders after upsert 5", e: fenceDelete("a", 5), want: 11},
		{name: "upsert seq 6 orders after delete 5", e: fenceUpsert("a", 6), want: 12},
		{name: "largest upsert", e: fenceUpsert("a", math.MaxInt64), want: math.MaxUint64 - 1},
		{name: "largest delete", e: fenceDelete("a", math.MaxInt64), want: math.MaxUint64},
		{name: "negative seq_no", e: fenceUpsert("a", -2), wantErr: idempotency.ErrBadSeqNo},
		{name: "index_deleted", e: redisx.Event{Op: redisx.OpIndexDeleted, Index: "i", IndexUUID: "u"}, wantErr: idempotency.ErrNotDocument},
		{name: "snapshot_start", e: redisx.Event{Op: redisx.OpSnapshotStart, Target: "i"}, wantErr: idempotency.ErrNotDocument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idempotency.Order(tt.e)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
			if errors.Is(err, idempotency.ErrBadSeqNo) && !redisx.IsPermanent(err) {
				t.Errorf("a negative seq_no should be a permanent error: %v", err)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	e := redisx.Event{Op: redisx.OpUpsert, IndexUUID: "BZfH", Shard: 3, ID: "a/b"}
	if got, want := idempotency.Identity(e), "BZfH/3/a/b"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNew_Validate(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	slotOf := func(e redisx.Event) string { return e.ID }
	tests := []struct {
		name string
		cfg  idempotency.Config
		ok   bool
	}{
		{name: "per index", cfg: idempotency.Config{Client: c, Prefix: "p"}, ok: true},
		{name: "sharded", cfg: idempotency.Config{Client: c, Prefix: "p", Shards: 8}, ok: true},
		{name: "per slot", cfg: idempotency.Config{Client: c, Prefix: "p", SlotOf: slotOf}, ok: true},
		{name: "legacy and grace", cfg: idempotency.Config{Client: c, Prefix: "p", Legacy: "old", EndGrace: time.Hour}, ok: true},
		{name: "single hash (deprecated)", cfg: idempotency.Config{Client: c, Key: "k"}, ok: true},
		{name: "no client", cfg: idempotency.Config{Prefix: "p"}},
		{name: "no prefix", cfg: idempotency.Config{Client: c}},
		{name: "prefix and key", cfg: idempotency.Config{Client: c, Prefix: "p", Key: "k"}},
		{name: "negative shards", cfg: idempotency.Config{Client: c, Prefix: "p", Shards: -1}},
		{name: "negative grace", cfg: idempotency.Config{Client: c, Prefix: "p", EndGrace: -time.Second}},
		{name: "shards with per slot", cfg: idempotency.Config{Client: c, Prefix: "p", Shards: 2, SlotOf: slotOf}},
		{name: "braces with per slot", cfg: idempotency.Config{Client: c, Prefix: "p:{x}", SlotOf: slotOf}},
		{name: "a lone brace with per slot", cfg: idempotency.Config{Client: c, Prefix: "p{", SlotOf: slotOf}},
		{name: "key with shards", cfg: idempotency.Config{Client: c, Key: "k", Shards: 2}},
		{name: "key with per slot", cfg: idempotency.Config{Client: c, Key: "k", SlotOf: slotOf}},
		{name: "key with legacy", cfg: idempotency.Config{Client: c, Key: "k", Legacy: "old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := idempotency.New(tt.cfg)
			if got := err == nil; got != tt.ok {
				t.Errorf("New: err = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestFence_ShouldApply replays event sequences through ShouldApply +
// Record, as Middleware does, and checks which events get through.
func TestFence_ShouldApply(t *testing.T) {
	type step struct {
		e    redisx.Event
		want bool
	}
	big := int64(1) << 60 // orders around 2^61: doubles cannot tell neighbors apart
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "in order", steps: []step{{fenceUpsert("a", 1), true}, {fenceUpsert("a", 2), true}, {fenceUpsert("a", 7), true}}},
		{name: "older after newer is skipped", steps: []step{{fenceUpsert("a", 5), true}, {fenceUpsert("a", 3), false}, {fenceUpsert("a", 4), false}, {fenceUpsert("a", 6), true}}},
		{name: "redelivery of the same event is skipped", steps: []step{{fenceUpsert("a", 5), true}, {fenceUpsert("a", 5), false}}},
		{name: "seq_no 0 is applied once", steps: []step{{fenceUpsert("a", 0), true}, {fenceUpsert("a", 0), false}}},
		{name: "delete after upsert with the same seq_no", steps: []step{{fenceUpsert("a", 5), true}, {fenceDelete("a", 5), true}}},
		{name: "upsert after delete with the same seq_no is skipped", steps: []step{{fenceDelete("a", 5), true}, {fenceUpsert("a", 5), false}}},
		{name: "delete redelivered is skipped", steps: []step{{fenceDelete("a", 5), true}, {fenceDelete("a", 5), false}}},
		{name: "re-creation after a delete", steps: []step{{fenceUpsert("a", 2), true}, {fenceDelete("a", 9), true}, {fenceUpsert("a", 10), true}}},
		{name: "documents are fenced apart", steps: []step{{fenceUpsert("a", 9), true}, {fenceUpsert("b", 1), true}, {fenceUpsert("a", 1), false}}},
		{name: "shards are fenced apart", steps: []step{
			{fenceUpsert("a", 9), true},
			{redisx.Event{Op: redisx.OpUpsert, IndexUUID: "u", Shard: 1, ID: "a", SeqNo: 1}, true},
		}},
		{name: "orders above 2^53 compare exactly", steps: []step{
			{fenceUpsert("a", big+1), true}, {fenceUpsert("a", big), false}, {fenceDelete("a", big+1), true}, {fenceUpsert("a", big+2), true},
			{fenceDelete("a", math.MaxInt64), true}, {fenceDelete("a", math.MaxInt64), false},
		}},
		{name: "unfenced ops always pass", steps: []step{
			{redisx.Event{Op: redisx.OpSnapshotStart, Target: "i"}, true},
			{redisx.Event{Op: redisx.OpSnapshotStart, Target: "i"}, true},
			{redisx.Event{Op: redisx.OpIndexDeleted, Index: "i", IndexUUID: "u"}, true},
		}},
	}
	eachLayout(t, func(t *testing.T, l layout) {
		f, _ := newTestFence(t, l)
		ctx := context.Background()
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				for j, s := range tt.steps {
					s.e.IndexUUID += strconv.Itoa(i) // a fresh document per case
					got, err := f.ShouldApply(ctx, s.e)
					if err != nil {
						t.Fatalf("step %d: %v", j, err)
					}
					if got != s.want {
						t.Fatalf("step %d (%s seq_no %d): ShouldApply = %v, want %v", j, s.e.Op, s.e.SeqNo, got, s.want)
					}
					if got {
						if err := f.Record(ctx, s.e); err != nil {
							t.Fatalf("step %d: Record: %v", j, err)
						}
					}
				}
			})
		}
	})
}

func TestFence_Record(t *testing.T) {
	eachLayout(t, func(t *testing.T, l layout) {
		f, c := newTestFence(t, l)
		ctx := context.Background()
		tests := []struct {
			name string
			seqs []int64 // upserts recorded in this order
			want uint64
		}{
			{name: "rises", seqs: []int64{1, 2, 3}, want: 6},
			{name: "never lowers", seqs: []int64{10, 4, 0}, want: 20},
			{name: "equal keeps", seqs: []int64{7, 7}, want: 14},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id := tt.name
				for _, s := range tt.seqs {
					if err := f.Record(ctx, fenceUpsert(id, s)); err != nil {
						t.Fatal(err)
					}
				}
				got, ok, err := f.Recorded(ctx, fenceUpsert(id, 0))
				if err != nil || !ok {
					t.Fatalf("Recorded: %d %v %v", got, ok, err)
				}
				if got != tt.want {
					t.Errorf("got %d, want %d", got, tt.want)
				}
			})
		}
		t.Run("unfenced events are not recorded", func(t *testing.T) {
			before := dbState(t, c)
			if err := f.Record(ctx, redisx.Event{Op: redisx.OpSnapshotEnd, Counts: map[string]int64{}}); err != nil {
				t.Fatal(err)
			}
			if after := dbState(t, c); !maps.Equal(after, before) {
				t.Errorf("Record of snapshot_end changed Redis: %v, was %v", after, before)
			}
		})
		t.Run("a foreign value is an error", func(t *testing.T) {
			e := fenceUpsert("foreign", 1)
			key, field := f.KeyOf(e)
			c.HSet(ctx, key, field, "x12")
			if err := f.Record(ctx, e); !errors.Is(err, idempotency.ErrBadFenceValue) {
				t.Errorf("Record: err = %v, want ErrBadFenceValue", err)
			}
			if _, err := f.ShouldApply(ctx, e); !errors.Is(err, idempotency.ErrBadFenceValue) {
				t.Errorf("ShouldApply: err = %v, want ErrBadFenceValue", err)
			}
		})
	})
}

func TestFence_ApplyRedis(t *testing.T) {
	eachLayout(t, func(t *testing.T, l layout) {
		f, c := newTestFence(t, l)
		ctx := context.Background()
		type step struct {
			e      redisx.Event
			effect idempotency.Effect
			want   bool   // applied
			value  string // of key "v:<case>" afterwards; "" = missing
		}
		set := func(key string, seq int64) idempotency.Effect {
			return idempotency.Set{Key: key, Value: []byte(strconv.FormatInt(seq, 10))}
		}
		tests := []struct {
			name  string
			steps func(key string) []step
		}{
			{name: "newer overwrites, older and equal are refused", steps: func(k string) []step {
				return []step{
					{fenceUpsert("d", 2), set(k, 2), true, "2"},
					{fenceUpsert("d", 5), set(k, 5), true, "5"},
					{fenceUpsert("d", 3), set(k, 3), false, "5"},
					{fenceUpsert("d", 5), set(k, 5), false, "5"},
				}
			}},
			{name: "delete after upsert with the same seq_no, then a late upsert", steps: func(k string) []step {
				return []step{
					{fenceUpsert("d", 4), set(k, 4), true, "4"},
					{fenceDelete("d", 4), idempotency.Del{Keys: []string{k}}, true, ""},
					{fenceUpsert("d", 4), set(k, 4), false, ""},
					{fenceUpsert("d", 3), set(k, 3), false, ""},
					{fenceUpsert("d", 6), set(k, 6), true, "6"},
				}
			}},
			{name: "nil effect records only", steps: func(k string) []step {
				return []step{
					{fenceUpsert("d", 4), nil, true, ""},
					{fenceUpsert("d", 3), set(k, 3), false, ""},
				}
			}},
			{name: "unfenced events always apply", steps: func(k string) []step {
				return []step{
					{redisx.Event{Op: redisx.OpSnapshotStart}, set(k, 1), true, "1"},
					{redisx.Event{Op: redisx.OpSnapshotStart}, set(k, 0), true, "0"},
				}
			}},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				key := "v:" + strconv.Itoa(i)
				for j, s := range tt.steps(key) {
					s.e.IndexUUID += strconv.Itoa(i)
					got, err := f.ApplyRedis(ctx, s.e, s.effect)
					if err != nil {
						t.Fatalf("step %d: %v", j, err)
					}
					if got != s.want {
						t.Errorf("step %d: applied = %v, want %v", j, got, s.want)
					}
					v, err := c.Get(ctx, key).Result()
					if errors.Is(err, redis.Nil) {
						v, err = "", nil
					}
					if err != nil {
						t.Fatal(err)
					}
					if v != s.value {
						t.Errorf("step %d: %s = %q, want %q", j, key, v, s.value)
					}
				}
			})
		}

		t.Run("TTL", func(t *testing.T) {
			if _, err := f.ApplyRedis(ctx, fenceUpsert("ttl", 1), idempotency.Set{Key: "ttl", Value: []byte("x"), TTL: 1500 * time.Microsecond}); err != nil {
				t.Fatal(err)
			}
			// 1.5ms rounds up to 2ms: the key may already be gone, but never
			// lives without an expiry.
			if ttl := c.PTTL(ctx, "ttl").Val(); ttl == -1 || ttl > 2*time.Millisecond {
				t.Errorf("PTTL = %s, want at most 2ms", ttl)
			}
		})
		t.Run("del of several keys", func(t *testing.T) {
			c.MSet(ctx, "m1", "1", "m2", "2", "m3", "3")
			if _, err := f.ApplyRedis(ctx, fenceDelete("multi", 1), idempotency.Del{Keys: []string{"m1", "m2"}}); err != nil {
				t.Fatal(err)
			}
			if got, want := c.Exists(ctx, "m1", "m2", "m3").Val(), int64(1); got != want {
				t.Errorf("%d keys left, want %d", got, want)
			}
		})
		t.Run("bad effects", func(t *testing.T) {
			for _, eff := range []idempotency.Effect{idempotency.Set{}, idempotency.Set{Key: "k", TTL: -1}, idempotency.Del{}, idempotency.Del{Keys: []string{""}}} {
				if _, err := f.ApplyRedis(ctx, fenceUpsert("bad", 1), eff); err == nil {
					t.Errorf("%#v: no error", eff)
				}
			}
		})
		t.Run("negative seq_no is permanent", func(t *testing.T) {
			_, err := f.ApplyRedis(ctx, fenceUpsert("neg", -1), idempotency.Set{Key: "neg", Value: []byte("x")})
			if !errors.Is(err, idempotency.ErrBadSeqNo) || !redisx.IsPermanent(err) {
				t.Errorf("err = %v, want a permanent ErrBadSeqNo", err)
			}
		})

	})
}

// TestFence_ApplyRedis_Atomic checks that the fence is read before anything
// is written: when the check fails, neither the effect nor the order lands.
func TestFence_ApplyRedis_Atomic(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(c *redis.Client, fence, field string)
		wantErr func(error) bool
	}{
		{
			name:    "foreign value in the fence field",
			prepare: func(c *redis.Client, fence, field string) { c.HSet(ctx, fence, field, "12x") },
			wantErr: func(err error) bool { return errors.Is(err, idempotency.ErrBadFenceValue) },
		},
		{
			name:    "fence key of the wrong type",
			prepare: func(c *redis.Client, fence, field string) { c.Set(ctx, fence, "a string", 0) },
			wantErr: func(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") },
		},
	}
	eachLayout(t, func(t *testing.T, l layout) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f, c := newTestFence(t, l)
				e := fenceUpsert("a", 3)
				c.Set(ctx, "victim", "before", 0)
				key, field := f.KeyOf(e)
				tt.prepare(c, key, field)
				before := dbState(t, c)
				applied, err := f.ApplyRedis(ctx, e, idempotency.Del{Keys: []string{"victim"}})
				if applied || !tt.wantErr(err) {
					t.Fatalf("applied %v, err %v", applied, err)
				}
				if got, want := c.Get(ctx, "victim").Val(), "before"; got != want {
					t.Errorf("victim = %q, want %q: the effect ran although the check failed", got, want)
				}
				if after := dbState(t, c); !maps.Equal(after, before) {
					t.Errorf("Redis changed although the check failed")
				}
			})
		}
	})
}

// TestFence_Concurrent has many goroutines apply shuffled versions of one
// document at once; the newest must win, both in the fence and in the
// effect, with ApplyRedis and with ShouldApply+Record.
func TestFence_Concurrent(t *testing.T) {
	eachLayout(t, func(t *testing.T, l layout) {
		const (
			workers  = 16
			versions = 60
		)
		// versions: upserts 0..versions-1, then a delete stamped with the last seq.
		events := make([]redisx.Event, 0, versions+1)
		for s := range int64(versions) {
			events = append(events, fenceUpsert("doc", s))
		}
		last := fenceDelete("doc", versions-1)
		events = append(events, last)
		wantOrder, _ := idempotency.Order(last)

		f, c := newTestFence(t, l)
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		var mu sync.Mutex
		applied := 0
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				mine := append([]redisx.Event(nil), events...)
				r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				for _, e := range mine {
					var eff idempotency.Effect = idempotency.Set{Key: "doc", Value: e.Source}
					if e.Op == redisx.OpDelete {
						eff = idempotency.Del{Keys: []string{"doc"}}
					}
					ok, err := f.ApplyRedis(ctx, e, eff)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						mu.Lock()
						applied++
						mu.Unlock()
					}
					// A second document fenced the check-then-record way.
					e.ID = "doc2"
					if ok, err := f.ShouldApply(ctx, e); err != nil || ok {
						if err == nil {
							err = f.Record(ctx, e)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, id := range []string{"doc", "doc2"} {
			got, ok, err := f.Recorded(ctx, fenceUpsert(id, 0))
			if err != nil || !ok {
				t.Fatalf("%s: Recorded %v %v", id, ok, err)
			}
			if got != wantOrder {
				t.Errorf("%s: fence holds %d, want %d", id, got, wantOrder)
			}
		}
		if n := c.Exists(ctx, "doc").Val(); n != 0 {
			t.Errorf("the newest event is a delete, but the key exists: %q", c.Get(ctx, "doc").Val())
		}
		// Each applied event raised the order, so at most one apply per version.
		if applied < 1 || applied > len(events) {
			t.Errorf("%d applies, want 1..%d", applied, len(events))
		}

	})
}

func TestMiddleware(t *testing.T) {
	eachLayout(t, testMiddleware)
}

func testMiddleware(t *testing.T, l layout) {
	f, _ := newTestFence(t, l)
	ctx := context.Background()
	var seen []int64
	fail := map[int64]bool{7: true}
	h := redisx.Chain(func(ctx context.Context, e redisx.Event) error {
		seen = append(seen, e.SeqNo)
		if fail[e.SeqNo] {
			delete(fail, e.SeqNo)
			return errors.New("sink down")
		}
		return nil
	}, idempotency.Middleware(f))

	tests := []struct {
		name      string
		e         redisx.Event
		wantErr   bool
		wantCalls []int64 // seq_nos the handler saw so far
	}{
		{name: "first", e: fenceUpsert("a", 5), wantCalls: []int64{5}},
		{name: "redelivery skipped", e: fenceUpsert("a", 5), wantCalls: []int64{5}},
		{name: "older skipped", e: fenceUpsert("a", 4), wantCalls: []int64{5}},
		{name: "handler error: not recorded", e: fenceUpsert("a", 7), wantErr: true, wantCalls: []int64{5, 7}},
		{name: "retry applied", e: fenceUpsert("a", 7), wantCalls: []int64{5, 7, 7}},
		{name: "delete same seq_no applied", e: fenceDelete("a", 7), wantCalls: []int64{5, 7, 7, 7}},
		{name: "unfenced passes", e: redisx.Event{Op: redisx.OpSnapshotStart, SeqNo: 0}, wantCalls: []int64{5, 7, 7, 7, 0}},
		{name: "index_deleted passes", e: redisx.Event{Op: redisx.OpIndexDeleted, IndexUUID: "u", SeqNo: 1}, wantCalls: []int64{5, 7, 7, 7, 0, 1}},
		{name: "the ended index's events are skipped", e: fenceUpsert("a", 20), wantCalls: []int64{5, 7, 7, 7, 0, 1}},
		{name: "a new document of it too", e: fenceUpsert("z", 20), wantCalls: []int64{5, 7, 7, 7, 0, 1}},
		{name: "another index is not ended", e: inUUID(fenceUpsert("a", 20), "v"), wantCalls: []int64{5, 7, 7, 7, 0, 1, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h(ctx, tt.e)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if got, want := seen, tt.wantCalls; !slices.Equal(got, want) {
				t.Errorf("handler saw %v, want %v", got, want)
			}
		})
	}
	t.Run("negative seq_no is permanent", func(t *testing.T) {
		if err := h(ctx, fenceUpsert("b", -1)); !redisx.IsPermanent(err) {
			t.Errorf("err = %v, want permanent", err)
		}
	})
}
