package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// proc is a running es-changefeed binary.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startBinary(tb testing.TB, args ...string) *proc {
	tb.Helper()
	p := &proc{out: &syncBuffer{}}
	p.cmd = binaryCommand(tb, nil, args...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

func relayArgs(c backend, redisURL, feed, index string, extra ...string) []string {
	args := append([]string{"run"}, inspect(c).cliArgs()...)
	return append(append(args, "--redis", redisURL, "--feed", feed, "--index", index,
		"--poll-interval", "20ms", "--batch-size", "50", "--lease-ttl", "500ms"), extra...)
}

func storeFor(tb testing.TB, srv *redistest.Server, feedName string) *checkpoint.Store {
	tb.Helper()
	st, err := checkpoint.New(checkpoint.Config{Client: srv.Client(tb), Keys: redisx.NewKeys(feedName)})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// waitHolder waits until the lease key holds a value other than old.
func waitHolder(tb testing.TB, get func(context.Context, string) *redis.StringCmd, key, old string, timeout time.Duration) string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		v, err := get(context.Background(), key).Result()
		if err == nil && v != "" && v != old {
			return v
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("lease %s still %q after %s", key, old, timeout)
	return ""
}

// redisNow is Redis's clock (TIME).
func redisNow(tb testing.TB, rdb *redis.Client) time.Time {
	tb.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return now
}

// valuesAt reads keys ("" for a missing one) and Redis's clock in one
// transaction: what the keys held at that instant of Redis's clock.
func valuesAt(tb testing.TB, rdb *redis.Client, keys []string) ([]string, time.Time) {
	tb.Helper()
	ctx := context.Background()
	gets := make([]*redis.StringCmd, len(keys))
	var now *redis.TimeCmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
		}
		now = p.Time(ctx)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	out := make([]string, len(keys))
	for i, g := range gets {
		out[i] = g.Val()
	}
	return out, now.Val()
}

// waitTakeover waits until the lease keys hold what done accepts and
// returns when Redis's clock first showed it, after since (Redis's clock
// read after the holder was killed). The deadline is on Redis's clock too:
// the test fails only on a reading that Redis took more than within after
// since and that done refuses, so a loaded machine that polls late cannot
// fail it, only see the takeover later.
func waitTakeover(tb testing.TB, rdb *redis.Client, keys []string, since time.Time, within time.Duration, done func(values []string) bool) time.Duration {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		values, now := valuesAt(tb, rdb, keys)
		if done(values) {
			return now.Sub(since)
		}
		if now.Sub(since) > within {
			tb.Fatalf("%s after the holder was killed (Redis's clock) the leases are still %q; want taken over within %s", now.Sub(since).Round(time.Millisecond), values, within)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no takeover seen within a minute (Redis's clock at %s after the kill): %q", now.Sub(since).Round(time.Millisecond), values)
		}
	}
}

// TestCLI_SIGTERMReleasesTheLease: SIGTERM lets the relay finish, release
// the lease (so a standby can take over at once) and exit 0.
func TestCLI_SIGTERMReleasesTheLease(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("graceful")
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("graceful")
	p := startBinary(t, relayArgs(c, srv.URL(), "graceful", ix, "--lease-ttl", "1m")...)
	waitHolder(t, rdb.Get, keys.Lease(), "", 5*time.Second)
	for i := 0; i < 10; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), `{}`)
	}
	waitCaughtUp(t, c, storeFor(t, srv, "graceful"), []string{ix}, 10*time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit within 10s of SIGTERM:\n%s", p.out)
	}
	if n, _ := rdb.Exists(context.Background(), keys.Lease()).Result(); n != 0 {
		t.Fatalf("the lease is still held after a graceful stop (TTL 1m would block a standby)")
	}
}
