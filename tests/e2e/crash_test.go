package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/esemu"
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
