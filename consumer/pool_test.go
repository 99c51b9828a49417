package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// addEvents appends n upserts, versions of docs "d0".."d{docs-1}" in turn.
func addEvents(tb testing.TB, rdb *redis.Client, keys redisx.Keys, n, docs int) {
	tb.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < n; i++ {
		e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "U", Shard: 0, ID: fmt.Sprintf("d%d", i%docs),
			SeqNo: int64(i), PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`)}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events(), Values: e.Values()})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
}

// runPool runs a pool until stop() and returns it.
func runPool(tb testing.TB, cfg consumer.PoolConfig, h redisx.Handler) (*consumer.Pool, func()) {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := consumer.NewPool(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, h) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("Run: %v", err)
			}
		})
	}
	tb.Cleanup(stop)
	return p, stop
}

func waitFor(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pending(tb testing.TB, rdb *redis.Client, keys redisx.Keys, group string) int64 {
	tb.Helper()
	p, err := rdb.XPending(context.Background(), keys.Events(), group).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return p.Count
}

func TestPool_HandlesEveryEventInDocumentOrder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("order")
	addEvents(t, rdb, keys, 2000, 37)
	var mu sync.Mutex
	last := map[string]int64{}
	var outOfOrder, n atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Workers: 8}, func(ctx context.Context, e redisx.Event) error {
		mu.Lock()
		if prev, ok := last[e.ID]; ok && e.SeqNo <= prev {
			outOfOrder.Add(1)
		}
		last[e.ID] = e.SeqNo
		mu.Unlock()
		n.Add(1)
		return nil
	})
	waitFor(t, "2000 events", 10*time.Second, func() bool { return p.Stats().Acked == 2000 })
	stop()
	if n.Load() != 2000 || outOfOrder.Load() != 0 {
		t.Fatalf("handled %d (want 2000), %d out of document order (want 0)", n.Load(), outOfOrder.Load())
	}
	if got := pending(t, rdb, keys, "g"); got != 0 {
		t.Fatalf("%d events still pending", got)
	}
}

// TestPool_Run_Delivery: every handler call's context says the stream and
// group of its event (redisx.DeliveryOf), the entries read and the ones
// retried alike: a sink serving several partitions records what it
// applied per stream.
func TestPool_Run_Delivery(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("delivery")
	addEvents(t, rdb, keys, 20, 5)
	var mu sync.Mutex
	got := map[redisx.Delivery]int{}
	var failed atomic.Bool
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Workers: 4, RetryBackoff: time.Millisecond},
		func(ctx context.Context, e redisx.Event) error {
			d, ok := redisx.DeliveryOf(ctx)
			mu.Lock()
			if !ok {
				d = redisx.Delivery{Stream: "(none)"}
			}
			got[d]++
			mu.Unlock()
			if failed.CompareAndSwap(false, true) {
				return errors.New("once") // its retry carries the delivery too
			}
			return nil
		})
	waitFor(t, "20 events", 10*time.Second, func() bool { return p.Stats().Acked == 20 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	want := map[redisx.Delivery]int{{Stream: keys.Events(), Group: "g"}: 21}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handler calls by delivery: %v, want %v", got, want)
	}
	if _, ok := redisx.DeliveryOf(context.Background()); ok {
		t.Fatal("DeliveryOf(context.Background()) reports a delivery")
	}
}

func TestPool_DeadLettersAfterExactlyMaxDeliveries(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("dead")
	poison := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: "U", ID: "poison", SeqNo: 0, PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`)}
	rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Events(), Values: poison.Values()})
	addEvents(t, rdb, keys, 20, 5) // behind it, in the same (only) lane
	var attempts, others atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Workers: 1, MaxDeliveries: 4,
		RetryBackoff: 5 * time.Millisecond}, func(ctx context.Context, e redisx.Event) error {
		if e.ID == "poison" {
			attempts.Add(1)
			return errors.New("boom")
		}
		others.Add(1)
		return nil
	})
	waitFor(t, "the lane to get past the poison event", 10*time.Second, func() bool { return others.Load() == 20 })
	stop()
	if attempts.Load() != 4 || p.Stats().DeadLettered != 1 {
		t.Fatalf("attempts %d, dead-lettered %d; want 4 and 1", attempts.Load(), p.Stats().DeadLettered)
	}
	dead, err := rdb.XRange(context.Background(), keys.Dead(), "-", "+").Result()
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v %v", dead, err)
	}
	if v := dead[0].Values; v["id"] != "poison" || v["error"] != "boom" || v["deliveries"] != "4" || v["group"] != "g" {
		t.Fatalf("dead letter fields %v", v)
	}
	if got := pending(t, rdb, keys, "g"); got != 0 {
		t.Fatalf("%d events pending: the dead-lettered one must be acked", got)
	}
}

func TestPool_PermanentErrorDeadLettersAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("perm")
	addEvents(t, rdb, keys, 3, 3)
	var calls atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g"}, func(ctx context.Context, e redisx.Event) error {
		calls.Add(1)
		return redisx.Permanent(errors.New("HTTP 400"))
	})
	waitFor(t, "3 dead letters", 5*time.Second, func() bool { return p.Stats().DeadLettered == 3 })
	stop()
	if calls.Load() != 3 {
		t.Fatalf("handler called %d times, want 3 (no retry of a permanent error)", calls.Load())
	}
}

func TestPool_MalformedEntryIsDeadLettered(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("malformed")
	rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Events(), Values: []any{"op", "frobnicate"}})
	addEvents(t, rdb, keys, 2, 2)
	var calls atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g"}, func(ctx context.Context, e redisx.Event) error {
		calls.Add(1)
		return nil
	})
	waitFor(t, "all entries done", 5*time.Second, func() bool { s := p.Stats(); return s.DeadLettered == 1 && s.Acked == 2 })
	stop()
	if calls.Load() != 2 {
		t.Fatalf("handler saw %d events, want the 2 valid ones", calls.Load())
	}
}

func TestPool_ReclaimsFromDeadConsumerAndDrainsOwnPending(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("reclaim")
	ctx := context.Background()
	rdb.XGroupCreateMkStream(ctx, keys.Events(), "g", "0")
	addEvents(t, rdb, keys, 30, 30)
	// "ghost" reads 10 and dies; "me" reads 10 and crashes (restarts below).
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{keys.Events(), ">"}, Count: 10})
	mine, _ := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "me", Streams: []string{keys.Events(), ">"}, Count: 10}).Result()
	var mu sync.Mutex
	var order []string
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Consumer: "me", Workers: 1, MinIdle: 200 * time.Millisecond, DeadConsumerIdle: 400 * time.Millisecond},
		func(ctx context.Context, e redisx.Event) error {
			mu.Lock()
			order = append(order, e.StreamID)
			mu.Unlock()
			return nil
		})
	waitFor(t, "all 30 events", 10*time.Second, func() bool { return p.Stats().Acked == 30 })
	// The ghost, its events reclaimed and idle past DeadConsumerIdle, is
	// removed from the group.
	waitFor(t, "the dead consumer removed", 10*time.Second, func() bool {
		for _, c := range rdb.XInfoConsumers(ctx, keys.Events(), "g").Val() {
			if c.Name == "ghost" {
				return false
			}
		}
		return true
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	// Own pending entries come first, in order.
	for i, m := range mine[0].Messages {
		if order[i] != m.ID {
			t.Fatalf("event %d handled was %s, want own pending %s first", i, order[i], m.ID)
		}
	}
	if st := p.Stats(); st.Reclaimed != 10 {
		t.Fatalf("reclaimed %d, want the ghost's 10", st.Reclaimed)
	}
	if got := pending(t, rdb, keys, "g"); got != 0 {
		t.Fatalf("%d still pending", got)
	}
}

// TestPool_HeldEventsAreNotReclaimed: a slow consumer holds many events
// longer than MinIdle; its heartbeat keeps them, so a second consumer never
// reclaims (and double-handles) what the first still holds. The slow
// handler blocks until the second consumer has run reclaim passes
// (XAUTOCLAIM, counted on its client) over events held longer than MinIdle.
func TestPool_HeldEventsAreNotReclaimed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("held")
	addEvents(t, rdb, keys, 12, 12)
	const minIdle = 300 * time.Millisecond
	var seen sync.Map
	var doubles atomic.Int64
	record := func(e redisx.Event) {
		if _, dup := seen.LoadOrStore(e.StreamID, true); dup {
			doubles.Add(1)
		}
	}
	release := make(chan struct{})
	slow := func(ctx context.Context, e redisx.Event) error {
		record(e)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	eager := func(ctx context.Context, e redisx.Event) error { record(e); return nil }
	cfg := consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Consumer: "slow", Workers: 1, Prefetch: 12, MinIdle: minIdle}
	a, stopA := runPool(t, cfg, slow)
	waitFor(t, "the slow consumer to hold everything", 30*time.Second, func() bool { return a.Stats().Read == 12 })
	idleFrom := time.Now().Add(minIdle) // without heartbeats, reclaimable from then on
	claims := &claimCounter{after: idleFrom}
	bClient := srv.Client(t)
	bClient.AddHook(claims)
	cfg.Consumer, cfg.Client = "eager", bClient
	b, stopB := runPool(t, cfg, eager)
	waitFor(t, "3 reclaim passes of the eager consumer over events held past MinIdle", 30*time.Second,
		func() bool { return claims.n.Load() >= 3 })
	ext, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: keys.Events(), Group: "g", Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) != 12 {
		t.Fatalf("%d pending, want the 12 the slow consumer holds", len(ext))
	}
	for _, pe := range ext {
		if pe.Consumer != "slow" || pe.RetryCount != 1 {
			t.Fatalf("pending %s: consumer %q, delivered %d times; want held by slow, delivered once", pe.ID, pe.Consumer, pe.RetryCount)
		}
	}
	close(release)
	waitFor(t, "all handled", 30*time.Second, func() bool { return a.Stats().Acked+b.Stats().Acked >= 12 })
	stopA()
	stopB()
	if doubles.Load() != 0 || b.Stats().Reclaimed != 0 {
		t.Fatalf("%d events handled twice, %d reclaimed from a live consumer; want 0", doubles.Load(), b.Stats().Reclaimed)
	}
}

// claimCounter is a go-redis hook counting the XAUTOCLAIM calls that
// return after a time.
type claimCounter struct {
	after time.Time
	n     atomic.Int64
}

func (c *claimCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *claimCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		started := time.Now()
		err := next(ctx, cmd)
		if cmd.Name() == "xautoclaim" && err == nil && started.After(c.after) {
			c.n.Add(1)
		}
		return err
	}
}

func (c *claimCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestPool_ShutdownHandlesWhatItRead: when Run's context ends, every event
// read is handled and acknowledged (the queued ones too, not only the one
// in flight), and the consumer leaves the group: nothing waits --min-idle
// in a departed consumer's name.
func TestPool_ShutdownHandlesWhatItRead(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("shutdown")
	addEvents(t, rdb, keys, 5, 1) // one document: one lane, in order
	started := make(chan struct{})
	var once sync.Once
	var finished atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g"}, func(ctx context.Context, e redisx.Event) error {
		once.Do(func() { close(started) })
		time.Sleep(100 * time.Millisecond)
		finished.Add(1)
		return nil
	})
	<-started
	stop()
	if finished.Load() != 5 || p.Stats().Acked != 5 {
		t.Fatalf("finished %d, acked %d; want all 5 read events handled and acked", finished.Load(), p.Stats().Acked)
	}
	if got := pending(t, rdb, keys, "g"); got != 0 {
		t.Fatalf("%d pending after a clean stop, want 0", got)
	}
	if cs := rdb.XInfoConsumers(context.Background(), keys.Events(), "g").Val(); len(cs) != 0 {
		t.Fatalf("consumers left in the group after a clean stop: %+v", cs)
	}
}

// TestPool_StopBeforeTheFirstRead: a stop asked while the pool is still
// creating its group and checking the stream (consume stopped right after
// it started) is a clean stop: Run returns nil, and nothing was read.
func TestPool_StopBeforeTheFirstRead(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	keys := redisx.NewKeys("early")
	addEvents(t, rdb, keys, 3, 1)
	p, err := consumer.NewPool(consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx, func(context.Context, redisx.Event) error { return nil }); err != nil {
		t.Fatalf("Run with its stop already asked = %v, want nil (a clean stop)", err)
	}
	if st := p.Stats(); st.Read != 0 {
		t.Errorf("stats %+v: read events after the stop", st)
	}
}

// TestPool_ShutdownTimeoutLeavesTheRestPending: past ShutdownTimeout the
// events not started stay pending, and the consumer stays in the group so
// that they are reclaimed.
func TestPool_ShutdownTimeoutLeavesTheRestPending(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("shutdown-timeout")
	addEvents(t, rdb, keys, 5, 1)
	started := make(chan struct{})
	var once sync.Once
	var finished atomic.Int64
	_, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", ShutdownTimeout: 300 * time.Millisecond}, func(ctx context.Context, e redisx.Event) error {
		once.Do(func() { close(started) })
		time.Sleep(200 * time.Millisecond)
		finished.Add(1)
		return nil
	})
	<-started
	stop()
	if got := pending(t, rdb, keys, "g"); got != 5-finished.Load() || got == 0 {
		t.Fatalf("%d pending after %d of 5 finished: want the rest pending", got, finished.Load())
	}
	if cs := rdb.XInfoConsumers(context.Background(), keys.Events(), "g").Val(); len(cs) != 1 {
		t.Fatalf("consumers in the group: %+v; want the one holding the pending events", cs)
	}
}

// TestPool_BarrierForFeedEvents: snapshot and index events run alone, after
// everything before them.
func TestPool_BarrierForFeedEvents(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("barrier")
	addEvents(t, rdb, keys, 50, 50)
	rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Events(), Values: redisx.Event{Op: redisx.OpSnapshotEnd, Counts: map[string]int64{}}.Values()})
	addEvents(t, rdb, keys, 50, 50)
	var before, after atomic.Int64
	var atBarrier int64 = -1
	var afterEarly atomic.Int64
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", Workers: 8}, func(ctx context.Context, e redisx.Event) error {
		if e.Op == redisx.OpSnapshotEnd {
			atBarrier = before.Load()
			return nil
		}
		time.Sleep(time.Millisecond)
		if atBarrier < 0 {
			before.Add(1)
			if before.Load() > 50 {
				afterEarly.Add(1)
			}
		} else {
			after.Add(1)
		}
		return nil
	})
	waitFor(t, "101 events", 10*time.Second, func() bool { return p.Stats().Acked == 101 })
	stop()
	if atBarrier != 50 || after.Load() != 50 || afterEarly.Load() != 0 {
		t.Fatalf("barrier saw %d events before it (want 50), %d after (want 50), %d later events before it", atBarrier, after.Load(), afterEarly.Load())
	}
}

// runPoolOnce runs a pool until it returns by itself (within 10s).
func runPoolOnce(t *testing.T, cfg consumer.PoolConfig, h redisx.Handler) (*consumer.Pool, error) {
	t.Helper()
	cfg.Logger = quiet
	p, err := consumer.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.Run(ctx, h)
	if ctx.Err() != nil {
		t.Fatalf("the pool ran until the test's deadline: %v", err)
	}
	return p, err
}

// TestPool_HistoryLostAtStart: the case (a group read 10 of 50,
// the stream trimmed to its last 20), and a new group on that stream: Run
// refuses both with the error naming the group and what to do, hands
// nothing to the handler, acknowledges nothing, and records the loss so
// that a later start refuses too. A new group starting at "$" is allowed.
func TestPool_HistoryLostAtStart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("lost")
	ctx := context.Background()
	rdb.XGroupCreateMkStream(ctx, keys.Events(), "g1", "0")
	addEvents(t, rdb, keys, 50, 50)
	res, _ := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g1", Consumer: "old", Streams: []string{keys.Events(), ">"}, Count: 10}).Result()
	for _, m := range res[0].Messages {
		rdb.XAck(ctx, keys.Events(), "g1", m.ID)
	}
	rdb.XTrimMaxLen(ctx, keys.Events(), 20)
	var calls atomic.Int64
	h := func(context.Context, redisx.Event) error { calls.Add(1); return nil }

	for run := 1; run <= 2; run++ {
		p, err := runPoolOnce(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g1"}, h)
		if !errors.Is(err, redisx.ErrHistoryLost) || !strings.Contains(err.Error(), `"g1"`) || !strings.Contains(err.Error(), "20 entries") || !strings.Contains(err.Error(), "with a bootstrap") {
			t.Fatalf("run %d: Run returned %v; want history lost naming g1, 20 entries and the bootstrap", run, err)
		}
		if calls.Load() != 0 || p.Stats().Acked != 0 {
			t.Fatalf("run %d: %d events handled, %d acked; want none", run, calls.Load(), p.Stats().Acked)
		}
	}
	if rec, _ := redisx.RecordedLoss(ctx, rdb, keys, "g1"); !strings.Contains(rec, "20 entries") {
		t.Fatalf("recorded loss %q: want the error", rec)
	}
	_, err := runPoolOnce(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "new"}, h)
	if !errors.Is(err, redisx.ErrHistoryLost) || !strings.Contains(err.Error(), `new group "new"`) || !strings.Contains(err.Error(), "30 of 50") {
		t.Fatalf("a new group on the trimmed stream: %v; want it refused, naming 30 of 50 entries gone", err)
	}
	if n := rdb.XInfoGroups(ctx, keys.Events()).Val(); len(n) != 1 {
		t.Fatalf("groups %+v: the refused group was created", n)
	}
	p, stop := runPool(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "tail", Start: "$"}, h)
	waitFor(t, "the $ group", 5*time.Second, func() bool { return len(rdb.XInfoGroups(ctx, keys.Events()).Val()) == 2 })
	addEvents(t, rdb, keys, 3, 3)
	waitFor(t, "the $ group to handle new events", 5*time.Second, func() bool { return p.Stats().Acked == 3 })
	stop()
}

// TestPool_HistoryLostWhileRunning: a slow pool is behind when the stream
// is trimmed past it: it stops with the error, and hands the handler no
// event from after the gap (reading past it would hide the gap).
func TestPool_HistoryLostWhileRunning(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("lost-running")
	ctx := context.Background()
	addEvents(t, rdb, keys, 200, 200)
	var mu sync.Mutex
	var seen []string
	trimmed := make(chan string, 1)
	h := func(_ context.Context, e redisx.Event) error {
		mu.Lock()
		seen = append(seen, e.StreamID)
		n := len(seen)
		mu.Unlock()
		if n == 5 {
			rdb.XTrimMaxLen(ctx, keys.Events(), 50)
			trimmed <- rdb.XRangeN(ctx, keys.Events(), "-", "+", 1).Val()[0].ID
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	p, err := runPoolOnce(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "slow", Workers: 1, Prefetch: 2}, h)
	if !errors.Is(err, redisx.ErrHistoryLost) {
		t.Fatalf("Run returned %v; want history lost", err)
	}
	first := <-trimmed
	mu.Lock()
	defer mu.Unlock()
	for _, id := range seen {
		if !idBefore(id, first) {
			t.Fatalf("the handler got %s, after the gap (the trim kept %s and later): the gap was read past", id, first)
		}
	}
	if st := p.Stats(); st.Acked != st.Handled || st.Gone == 0 {
		t.Fatalf("stats %+v: want every ack a handled event, and the loss counted", st)
	}
}

// TestPool_PendingEntriesGone: another consumer's pending entries trimmed
// away: the pool refuses to run (it would have acknowledged them unseen).
func TestPool_PendingEntriesGone(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("pending-gone")
	ctx := context.Background()
	rdb.XGroupCreateMkStream(ctx, keys.Events(), "g", "0")
	addEvents(t, rdb, keys, 30, 30)
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{keys.Events(), ">"}, Count: 10})
	all := rdb.XRange(ctx, keys.Events(), "-", "+").Val()
	rdb.XTrimMinID(ctx, keys.Events(), all[5].ID)
	_, err := runPoolOnce(t, consumer.PoolConfig{Client: rdb, Keys: keys, Group: "g", MinIdle: 100 * time.Millisecond},
		func(context.Context, redisx.Event) error { return nil })
	if !errors.Is(err, redisx.ErrHistoryLost) || !strings.Contains(err.Error(), "5 pending entries are gone") {
		t.Fatalf("Run returned %v; want history lost naming 5 pending entries gone", err)
	}
	if got := pending(t, rdb, keys, "g"); got != 10 {
		t.Fatalf("%d pending; want the ghost's 10 left as they were", got)
	}
}

// idBefore compares stream ids.
func idBefore(a, b string) bool {
	var am, as, bm, bs uint64
	fmt.Sscanf(a, "%d-%d", &am, &as)
	fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || (am == bm && as < bs)
}
