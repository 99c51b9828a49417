package partition_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/partition"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// testRelay is one manager with workers that only keep their lease.
type testRelay struct {
	m      *partition.Manager
	rdb    *redis.Client
	cancel context.CancelFunc
	done   chan error
}

func startRelay(tb testing.TB, srv *redistest.Server, feed string, parts int, ttl time.Duration, name string) *testRelay {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	tb.Cleanup(func() { _ = rdb.Close() })
	open := func(p int) (partition.Worker, error) {
		lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: redisx.PartitionKeys(feed, p, parts).Lease(), TTL: ttl, Owner: name})
		if err != nil {
			return partition.Worker{}, err
		}
		return partition.Worker{Lease: lease, Run: func(ctx context.Context) error {
			if err := lease.Keep(ctx); err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = lease.Release(rctx)
			return nil
		}}, nil
	}
	m, err := partition.New(partition.Config{Client: rdb, Feed: feed, Partitions: parts, TTL: ttl, Owner: name, Open: open,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &testRelay{m: m, rdb: rdb, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-r.done })
	return r
}

// holders reads every partition's lease: partition -> owner name ("" free).
func holders(tb testing.TB, rdb *redis.Client, feed string, parts int) []string {
	tb.Helper()
	out := make([]string, parts)
	for p := range out {
		v, err := rdb.Get(context.Background(), redisx.PartitionKeys(feed, p, parts).Lease()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			tb.Fatal(err)
		}
		out[p], _, _ = strings.Cut(v, "/")
	}
	return out
}

// leaseExpiries reads every partition lease's expiry (PEXPIRETIME, Unix
// ms; 0 when the key is gone).
func leaseExpiries(tb testing.TB, rdb *redis.Client, feed string, parts int) []int64 {
	tb.Helper()
	out := make([]int64, parts)
	for p := range out {
		ms, err := rdb.Do(context.Background(), "PEXPIRETIME", redisx.PartitionKeys(feed, p, parts).Lease()).Int64()
		if err != nil {
			tb.Fatal(err)
		}
		out[p] = max(ms, 0)
	}
	return out
}

// waitFor polls cond until it holds or d passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() (bool, string)) time.Duration {
	tb.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < d {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("%s: not within %s (last: %s)", what, d, last)
	return 0
}

func balanced(rdb *redis.Client, tb testing.TB, feed string, parts int, names []string, limit int) func() (bool, string) {
	return func() (bool, string) {
		h := holders(tb, rdb, feed, parts)
		count := map[string]int{}
		for _, o := range h {
			count[o]++
		}
		if count[""] > 0 {
			return false, fmt.Sprint(h)
		}
		for _, n := range names {
			if count[n] > limit || count[n] == 0 {
				return false, fmt.Sprint(h)
			}
		}
		return len(count) == len(names), fmt.Sprint(h)
	}
}

func TestManager_BalanceAndTakeover(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const feed, parts = "balance", 6
	ttl := 600 * time.Millisecond

	a := startRelay(t, srv, feed, parts, ttl, "a")
	waitFor(t, 30*time.Second, "one relay holds every partition", balanced(rdb, t, feed, parts, []string{"a"}, parts))

	b := startRelay(t, srv, feed, parts, ttl, "b")
	waitFor(t, 30*time.Second, "two relays share 3+3", balanced(rdb, t, feed, parts, []string{"a", "b"}, 3))
	c := startRelay(t, srv, feed, parts, ttl, "c")
	waitFor(t, 30*time.Second, "three relays share 2+2+2", balanced(rdb, t, feed, parts, []string{"a", "b", "c"}, 2))

	// Steady: nobody goes above ceil(6/3) = 2 while every partition's
	// lease is renewed until 3 TTLs past its expiry of now (PEXPIRETIME:
	// renewals, not a pause, make the window), and the managers agree
	// with Redis.
	expiries := leaseExpiries(t, rdb, feed, parts)
	waitFor(t, 30*time.Second, "every lease renewed 3 TTLs on", func() (bool, string) {
		h := holders(t, rdb, feed, parts)
		count := map[string]int{}
		for _, o := range h {
			count[o]++
		}
		for n, c := range count {
			if c > 2 {
				t.Fatalf("relay %q holds %d partitions with 3 alive: %v", n, c, h)
			}
		}
		now := leaseExpiries(t, rdb, feed, parts)
		for p := range now {
			if now[p] < expiries[p]+3*ttl.Milliseconds() {
				return false, fmt.Sprintf("partition %d expires at %d, from %d", p, now[p], expiries[p])
			}
		}
		return true, ""
	})
	for _, r := range []*testRelay{a, b, c} {
		if got := len(r.m.Held()); got != 2 {
			t.Errorf("%s holds %v, want 2 partitions", r.m.Token(), r.m.Held())
		}
		if got := r.m.Members(); got != 3 {
			t.Errorf("%s counts %d relays, want 3", r.m.Token(), got)
		}
	}

	t.Run("a dead relay's partitions are taken over within 2xTTL", func(t *testing.T) {
		// Death: c's connection goes (no release, no leaving the ZSET).
		_ = c.rdb.Close()
		died := time.Now()
		waitFor(t, 30*time.Second, "a and b hold everything", balanced(rdb, t, feed, parts, []string{"a", "b"}, 3))
		t.Logf("takeover after %s (TTL %s)", time.Since(died).Round(time.Millisecond), ttl)
	})

	t.Run("a stopped relay hands its partitions over", func(t *testing.T) {
		b.cancel()
		if err := <-b.done; err != nil {
			t.Fatalf("b stopped with %v", err)
		}
		b.done <- nil // for the cleanup
		// Handed over, not left to expire: once b's Run returned, no
		// lease names b.
		for p, h := range holders(t, rdb, feed, parts) {
			if h == "b" {
				t.Errorf("partition %d's lease still names the stopped b", p)
			}
		}
		waitFor(t, 30*time.Second, "a holds everything", balanced(rdb, t, feed, parts, []string{"a"}, parts))
		if n, _ := rdb.ZCard(context.Background(), redisx.NewKeys(feed).Relays()).Result(); n != 1 {
			t.Errorf("%d members left in %s, want 1 (a)", n, redisx.NewKeys(feed).Relays())
		}
	})
}

func TestManager_WorkerErrorStops(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	boom := errors.New("boom")
	var once sync.Once
	m, err := partition.New(partition.Config{Client: rdb, Feed: "fail", Partitions: 2, TTL: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Open: func(p int) (partition.Worker, error) {
			lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: redisx.PartitionKeys("fail", p, 2).Lease(), TTL: 300 * time.Millisecond})
			return partition.Worker{Lease: lease, Run: func(ctx context.Context) error {
				var err error
				once.Do(func() { err = boom })
				if err != nil {
					return err
				}
				<-ctx.Done()
				return nil
			}}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Run(ctx); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the worker's error", err)
	}
	if len(m.Held()) != 0 {
		t.Errorf("still holds %v after stopping", m.Held())
	}
}
