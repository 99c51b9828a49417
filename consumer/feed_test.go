package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestPartitionPools: one pool per partition with the same group; a
// handler that fails on one document dead-letters its event into that
// document's partition's dead stream; the lanes are spread
// (ceil(workers/P) each); the pools' metrics register side by side with a
// partition label.
func TestPartitionPools(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const feed, P, uuid = "pools", 3, "u"
	sent := 0
	for shard := range 6 {
		k := redisx.PartitionKeys(feed, redisx.Partition(uuid, shard, P), P)
		for d := range 10 {
			e := redisx.Event{Op: redisx.OpUpsert, Index: "i", IndexUUID: uuid, Shard: shard, ID: fmt.Sprintf("s%dd%d", shard, d),
				SeqNo: int64(d), Source: []byte(`{}`)}
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Events(), Values: e.Values()}).Err(); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	const poison = "s3d4"
	poisonPart := redisx.Partition(uuid, 3, P)

	reg := prometheus.NewRegistry()
	f, err := New(Config{Client: rdb, Feed: feed, Partitions: P, Metrics: reg,
		Pool: PoolConfig{Group: "g", Consumer: "c", Workers: 8, MinIdle: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	pools := f.Pools()
	if len(pools) != P {
		t.Fatalf("%d pools, want %d", len(pools), P)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(_ context.Context, e redisx.Event) error {
		if e.ID == poison {
			return redisx.Permanent(errors.New("poison"))
		}
		mu.Lock()
		seen[e.ID]++
		mu.Unlock()
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(rctx, h) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == sent-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events handled", n, sent-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for p, k := range redisx.AllPartitionKeys(feed, P) {
		want := int64(0)
		if p == poisonPart {
			want = 1
		}
		deadline := time.Now().Add(5 * time.Second)
		for rdb.XLen(ctx, k.Dead()).Val() != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := rdb.XLen(ctx, k.Dead()).Val(); got != want {
			t.Errorf("partition %d: %d dead letters in %s, want %d", p, got, k.Dead(), want)
		}
		if want == 1 {
			d := rdb.XRange(ctx, k.Dead(), "-", "+").Val()
			if d[0].Values["id"] != poison || d[0].Values["error"] != "poison" {
				t.Errorf("dead letter %v, want %s with its error", d[0].Values, poison)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	for p, k := range redisx.AllPartitionKeys(feed, P) {
		if pend := rdb.XPending(ctx, k.Events(), "g").Val(); pend.Count != 0 {
			t.Errorf("partition %d: %d pending after the stop", p, pend.Count)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"escf_consumer_events_total", "escf_stream_entries"} {
		parts := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "partition" {
						parts[l.GetValue()] = true
					}
				}
			}
		}
		if len(parts) != P {
			t.Errorf("%s has partitions %v, want 0..%d", name, parts, P-1)
		}
	}
	if f.Pools()[0].cfg.Workers != 3 {
		t.Errorf("each partition's pool has %d lanes, want ceil(8/3) = 3", f.Pools()[0].cfg.Workers)
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		name          string
		n, partitions int
		want          int
	}{
		{name: "even", n: 9, partitions: 3, want: 3},
		{name: "rounded up", n: 8, partitions: 3, want: 3},
		{name: "fewer than partitions", n: 2, partitions: 4, want: 1},
		{name: "one partition", n: 8, partitions: 1, want: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spread(tt.n, tt.partitions); got != tt.want {
				t.Fatalf("spread(%d, %d) = %d, want %d", tt.n, tt.partitions, got, tt.want)
			}
		})
	}
}

// TestWatchPartitions: a consumer that started on a feed with no record
// stops with the explanation once a relay records another count; a
// matching record keeps it running. Each watcher reads through a client of
// its own that counts the reads, so that "not stopped" is decided after
// reads that saw the state, not after a pause.
func TestWatchPartitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 2)
	one, four := countedClient(t, srv), countedClient(t, srv)
	watcher := func(c *readCounter, partitions int) *Feed {
		f, err := New(Config{Client: c, Feed: "w", Partitions: partitions, PartitionsRecheck: 20 * time.Millisecond, Pool: PoolConfig{Group: "g"}})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	go watcher(one, 1).watchPartitions(ctx, func(err error) { stopped <- err })
	go watcher(four, 4).watchPartitions(ctx, func(err error) { stopped <- err })
	// Two reads of each watcher begun: the first has been checked.
	waitReads(t, one, 2)
	waitReads(t, four, 2)
	select {
	case err := <-stopped:
		t.Fatalf("stopped before any record: %v", err)
	default:
	}
	if err := redisx.RecordPartitions(ctx, rdb, "w", 4); err != nil {
		t.Fatal(err)
	}
	after := four.reads.Load()
	select {
	case err := <-stopped:
		var pe *redisx.PartitionsError
		if !errors.As(err, &pe) || pe.Recorded != 4 || pe.Passed != 1 {
			t.Fatalf("stopped with %v, want the 1-partition consumer refused by the record of 4", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the 1-partition consumer was not stopped by the record of 4")
	}
	// Reads after the record begun and checked: the record did not stop it.
	waitReads(t, four, after+3)
	select {
	case err := <-stopped:
		t.Fatalf("the 4-partition consumer was stopped: %v", err)
	default:
	}
}

// readCounter is a client that counts the commands and pipelines it sends
// (a read of the partition record is one pipeline).
type readCounter struct {
	*redis.Client
	reads atomic.Int64
	read  chan struct{} // a send (when none is waiting) after each count
}

func (c *readCounter) count() {
	c.reads.Add(1)
	select {
	case c.read <- struct{}{}:
	default:
	}
}

func (c *readCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.count(); return next(ctx, cmd) }
}

func (c *readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.count(); return next(ctx, cmds) }
}

func countedClient(tb testing.TB, srv *redistest.Server) *readCounter {
	tb.Helper()
	c := &readCounter{Client: srv.Client(tb), read: make(chan struct{}, 1)}
	c.AddHook(c)
	return c
}

// waitReads waits until c has begun n reads: the reads before the n-th
// have returned, and their outcome has been acted on.
func waitReads(tb testing.TB, c *readCounter, n int64) {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for c.reads.Load() < n {
		select {
		case <-c.read:
		case <-timeout:
			tb.Fatalf("%d reads of the partition record within 30s, want %d", c.reads.Load(), n)
		}
	}
}
