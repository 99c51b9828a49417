package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// memPositions is a sink's store of applied positions in memory.
type memPositions struct {
	mu       sync.Mutex
	pos      map[string]redisx.Position
	advances int
}

func (m *memPositions) key(stream, group string) string { return stream + "|" + group }

func (m *memPositions) Applied(_ context.Context, stream, group string) (redisx.Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pos[m.key(stream, group)], nil
}

func (m *memPositions) Advance(_ context.Context, stream, group string, p redisx.Position, since string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advances++
	k := m.key(stream, group)
	cur := m.pos[k]
	var err error
	if since != "" && redisx.LessID(cur.Lead, since) {
		err = &redisx.BehindError{Store: "memory", Recorded: cur, Since: since}
	}
	m.pos[k] = redisx.Position{Lead: redisx.MaxID(cur.Lead, p.Lead), Low: redisx.MaxID(cur.Low, p.Low)}
	return err
}

func (m *memPositions) Reset(_ context.Context, stream, group string, p redisx.Position) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos[m.key(stream, group)] = p
	return nil
}

func (m *memPositions) set(stream, group string, p redisx.Position) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos[m.key(stream, group)] = p
}

// racingPositions is a memPositions whose first Applied runs after once
// it has read the store: another consumer of the group writing meanwhile.
type racingPositions struct {
	memPositions
	after func()
	once  sync.Once
}

func (r *racingPositions) Applied(ctx context.Context, stream, group string) (redisx.Position, error) {
	p, err := r.memPositions.Applied(ctx, stream, group)
	r.once.Do(r.after)
	return p, err
}

// addAt appends upserts of documents d<i> at the given stream ids.
func addAt(tb testing.TB, rdb *redis.Client, keys redisx.Keys, ids ...string) {
	tb.Helper()
	for i, id := range ids {
		e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "U", Shard: 0, ID: "d" + id, SeqNo: int64(i), PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`)}
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Events(), ID: id, Values: e.Values()}).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// consumedAt creates group g at "0" and moves it, acknowledged, to id: an
// earlier consumer that handled everything up to id.
func consumedAt(tb testing.TB, rdb *redis.Client, keys redisx.Keys, group, id string) {
	tb.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreate(ctx, keys.Events(), group, "0").Err(); err != nil {
		tb.Fatal(err)
	}
	msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "earlier", Streams: []string{keys.Events(), ">"}, Count: 1000, Block: -1}).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range msgs[0].Messages {
		if redisx.LessID(id, m.ID) {
			break
		}
		rdb.XAck(ctx, keys.Events(), group, m.ID)
	}
	rdb.XGroupSetID(ctx, keys.Events(), group, id)
	rdb.XGroupDelConsumer(ctx, keys.Events(), group, "earlier")
}

// recorder is a handler that notes the entries it handled.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) handle(_ context.Context, e redisx.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, e.StreamID)
	return nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.ids)
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case redisx.LessID(a, b):
			return -1
		case redisx.LessID(b, a):
			return 1
		}
		return 0
	})
	return out
}

// poolRun is a pool running in the background.
type poolRun struct {
	done   chan error
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

// wait returns Run's result, waiting up to within for it.
func (r *poolRun) wait(tb testing.TB, within time.Duration) error {
	tb.Helper()
	select {
	case err := <-r.done:
		r.once.Do(func() { r.err = err })
	case <-time.After(within):
		tb.Fatalf("Run did not return within %s", within)
	}
	return r.err
}

// startPool runs a pool until the test ends.
func startPool(tb testing.TB, cfg consumer.PoolConfig, h redisx.Handler) (*consumer.Pool, *poolRun) {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := consumer.NewPool(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &poolRun{done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- p.Run(ctx, h) }()
	tb.Cleanup(func() {
		cancel()
		r.once.Do(func() {
			select {
			case r.err = <-r.done:
			case <-time.After(30 * time.Second):
				tb.Error("pool did not stop")
			}
		})
	})
	return p, r
}

// TestPool_NoticesRedisLostAppliedEntries: a feed's Redis that comes back
// from its append-only file without entries the pool had handed on (a
// power failure under appendfsync everysec) stops the pool with a
// *StreamRolledBackError at its next read, before it hands on anything of
// the new history, and records the loss for status and later starts.
func TestPool_NoticesRedisLostAppliedEntries(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0"}})
	rdb := srv.Client(t)
	keys := redisx.NewKeys("rolledback")
	addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
	var rec recorder
	client, err := redisx.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	p, run := startPool(t, consumer.PoolConfig{Client: client, Keys: keys, Group: "g", Block: 100 * time.Millisecond, RepairGrace: time.Second}, rec.handle)
	waitFor(t, "3 entries acknowledged", 10*time.Second, func() bool { return p.Stats().Acked == 3 })
	incr, _ := filepath.Glob(filepath.Join(srv.AOFDir(), "*.incr.aof"))
	fi, err := os.Stat(incr[0])
	if err != nil {
		t.Fatal(err)
	}
	addAt(t, rdb, keys, "4000-0", "5000-0")
	waitFor(t, "5 entries acknowledged", 10*time.Second, func() bool { return p.Stats().Acked == 5 })
	// The power cut: Redis comes back with what it had after the first 3.
	srv.Stop()
	if err := os.Truncate(incr[0], fi.Size()); err != nil {
		t.Fatal(err)
	}
	srv.StartAgain()
	rdb = srv.Client(t)
	addAt(t, rdb, keys, "6000-0") // the relay, started again, goes on
	err = run.wait(t, 20*time.Second)
	var rb *redisx.StreamRolledBackError
	if !errors.As(err, &rb) || !errors.Is(err, redisx.ErrHistoryLost) || rb.Applied != "5000-0" {
		t.Fatalf("Run = %v; want a *redisx.StreamRolledBackError for entry 5000-0", err)
	}
	if got := rec.seen(); slices.Contains(got, "6000-0") {
		t.Errorf("the pool handed on %v: an entry of the new history after the loss", got)
	}
	if v, _ := rdb.HGet(context.Background(), keys.Lost(), "g").Result(); v == "" {
		t.Errorf("%s has no record for group g", keys.Lost())
	}
}

// TestPool_AppliedPosition covers the sink's recorded position
// (PoolConfig.Positions) with a store in memory.
func TestPool_AppliedPosition(t *testing.T) {
	ctx := context.Background()

	t.Run("an applied entry lost before the start stops the pool once the grace is over", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("lost-before")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		consumedAt(t, rdb, keys, "g", "3000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "4000-0", Low: "3000-1"}) // applied, then lost
		addAt(t, rdb, keys, "9000-0")
		var rec recorder
		_, run := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos, RepairGrace: time.Second}, rec.handle)
		err := run.wait(t, 10*time.Second)
		var rb *redisx.StreamRolledBackError
		if !errors.As(err, &rb) || rb.Applied != "4000-0" {
			t.Fatalf("Run = %v; want a *redisx.StreamRolledBackError for entry 4000-0", err)
		}
		if got := rec.seen(); len(got) != 0 {
			t.Errorf("handed on %v before the check", got)
		}
	})

	t.Run("a loss the relay repaired is no loss", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("repaired")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		consumedAt(t, rdb, keys, "g", "3000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "4000-0", Low: "3000-1"})
		v, err := redisx.AppendRollback("", redisx.Rollback{After: "3000-0", Before: "5000-0", Commits: 2})
		if err != nil {
			t.Fatal(err)
		}
		rdb.HSet(ctx, keys.Meta(), redisx.RollbacksField, v)
		addAt(t, rdb, keys, "6000-0")
		var rec recorder
		p, _ := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos}, rec.handle)
		waitFor(t, "6000-0 handled", 10*time.Second, func() bool { return p.Stats().Acked == 1 })
		if got := rec.seen(); !slices.Equal(got, []string{"6000-0"}) {
			t.Errorf("handled %v, want [6000-0]", got)
		}
		if v, _ := rdb.HGet(ctx, keys.Lost(), "g").Result(); v != "" {
			t.Errorf("loss recorded although the relay repaired it: %s", v)
		}
	})

	t.Run("a repair the relay records within the grace is waited for", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("repair-later")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		consumedAt(t, rdb, keys, "g", "3000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "4000-0", Low: "3000-1"})
		var rec recorder
		p, _ := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos, RepairGrace: time.Minute}, rec.handle)
		time.Sleep(300 * time.Millisecond) // the pool found the loss and waits
		v, err := redisx.AppendRollback("", redisx.Rollback{After: "3000-0", Before: "5000-0", Commits: 1})
		if err != nil {
			t.Fatal(err)
		}
		rdb.HSet(ctx, keys.Meta(), redisx.RollbacksField, v)
		addAt(t, rdb, keys, "6000-0")
		waitFor(t, "6000-0 handled", 10*time.Second, func() bool { return p.Stats().Acked == 1 })
		if v, _ := rdb.HGet(ctx, keys.Lost(), "g").Result(); v != "" {
			t.Errorf("loss recorded although the relay repaired it: %s", v)
		}
	})

	t.Run("a store that lost writes gets the entries again from its low water", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("behind-start")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0", "4000-0", "5000-0")
		consumedAt(t, rdb, keys, "g", "5000-0")
		rdb.HSet(ctx, keys.Applied(), "g", "5000-0") // what the store recorded
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "3000-0", Low: "2000-0"}) // what it holds now
		var rec recorder
		p, _ := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos}, rec.handle)
		waitFor(t, "the lost entries handed on again", 10*time.Second, func() bool { return len(rec.seen()) == 4 })
		addAt(t, rdb, keys, "6000-0")
		waitFor(t, "6000-0 handled", 10*time.Second, func() bool { return p.Stats().Acked == 1 })
		if got, want := rec.seen(), []string{"2000-0", "3000-0", "4000-0", "5000-0", "6000-0"}; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
		if got := pos.pos[keys.Events()+"|g"].Lead; got != "6000-0" {
			t.Errorf("store's lead %s after 6000-0, want 6000-0", got)
		}
	})

	t.Run("a store that lost writes while the pool ran gets them again", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("behind-running")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		var rec recorder
		p, _ := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos, Block: 100 * time.Millisecond}, rec.handle)
		waitFor(t, "3 entries", 10*time.Second, func() bool { return p.Stats().Acked == 3 })
		pos.set(keys.Events(), "g", redisx.Position{Lead: "1000-0", Low: "1000-0"}) // the store went back
		addAt(t, rdb, keys, "4000-0")
		waitFor(t, "the lost entries handed on again and 4000-0", 10*time.Second, func() bool { return len(rec.seen()) == 7 })
		if got, want := rec.seen(), []string{"1000-0", "1000-0", "2000-0", "2000-0", "3000-0", "3000-0", "4000-0"}; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
	})

	t.Run("a store that lost writes the stream no longer holds is history lost", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("behind-trimmed")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0", "4000-0", "5000-0")
		consumedAt(t, rdb, keys, "g", "5000-0")
		rdb.XTrimMinID(ctx, keys.Events(), "4000-0")
		rdb.HSet(ctx, keys.Applied(), "g", "5000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "3000-0", Low: "2000-0"})
		var rec recorder
		_, run := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos}, rec.handle)
		if err := run.wait(t, 10*time.Second); !errors.Is(err, redisx.ErrHistoryLost) {
			t.Fatalf("Run = %v, want history lost", err)
		}
		if got := rec.seen(); len(got) != 0 {
			t.Errorf("handled %v", got)
		}
	})

	t.Run("a consumer starting while another of its group records its first lead is not behind", func(t *testing.T) {
		// Two consumers of a new group started together: the other one
		// records its lead in the store and the feed's copy between this
		// one's read of the store (empty) and of the copy. A store is
		// behind only if it holds less than a copy read before it.
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("racing-start")
		addAt(t, rdb, keys, "1000-0", "2000-0")
		pos := &racingPositions{memPositions: memPositions{pos: map[string]redisx.Position{}}}
		pos.after = func() {
			pos.set(keys.Events(), "g", redisx.Position{Lead: "2000-0"})
			rdb.HSet(ctx, keys.Applied(), "g", "2000-0")
		}
		var rec recorder
		p, run := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos, Block: 100 * time.Millisecond}, rec.handle)
		deadline := time.Now().Add(10 * time.Second)
		for p.Stats().Acked < 2 && time.Now().Before(deadline) {
			select {
			case err := <-run.done:
				run.once.Do(func() { run.err = err })
				t.Fatalf("Run = %v: the other consumer's first lead taken for a store that lost writes", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if got, want := rec.seen(), []string{"1000-0", "2000-0"}; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
		if v, _ := rdb.HGet(ctx, keys.Lost(), "g").Result(); v != "" {
			t.Errorf("loss recorded: %s", v)
		}
	})

	t.Run("the lead is recorded before entries are handed on", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		keys := redisx.NewKeys("lead-first")
		addAt(t, rdb, keys, "1000-0", "2000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		var bad sync.Once
		var before string
		h := func(_ context.Context, e redisx.Event) error {
			if lead := pos.pos[keys.Events()+"|g"].Lead; redisx.LessID(lead, e.StreamID) {
				bad.Do(func() { before = e.StreamID + " handed on with the lead at " + lead })
			}
			return nil
		}
		p, _ := startPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Positions: pos, Block: 100 * time.Millisecond}, h)
		waitFor(t, "2 entries", 10*time.Second, func() bool { return p.Stats().Acked == 2 })
		addAt(t, rdb, keys, "3000-0")
		waitFor(t, "3 entries", 10*time.Second, func() bool { return p.Stats().Acked == 3 })
		if before != "" {
			t.Fatal(before)
		}
		waitFor(t, "the feed's copy of the lead", 10*time.Second, func() bool {
			v, _ := rdb.HGet(ctx, keys.Applied(), "g").Result()
			return v == "3000-0"
		})
	})
}
