package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
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
	p.cmd = exec.Command(binary(tb), args...)
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

func relayArgs(c *esemu.Cluster, redisURL, feed, index string, extra ...string) []string {
	return append([]string{"run", "--es", c.URL(), "--redis", redisURL, "--feed", feed, "--index", index,
		"--poll-interval", "20ms", "--batch-size", "50", "--lease-ttl", "500ms"}, extra...)
}

func storeFor(tb testing.TB, srv *redistest.Server, feedName string) *checkpoint.Store {
	tb.Helper()
	st, err := checkpoint.New(checkpoint.Config{Client: srv.Client(tb), Keys: redisx.NewKeys(feedName)})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// TestCrash_SIGKILL kills the relay binary at random moments while writers
// write, 20+ times, restarting it each time: no (index_uuid, shard, seq_no)
// may appear twice, and the replayed stream must equal the index.
func TestCrash_SIGKILL(t *testing.T) {
	kills := 20
	if testing.Short() {
		kills = 5
	}
	c := cluster(t, esemu.Config{Nodes: 3, OutOfOrder: true})
	createIndex(t, c, "crash", 3, 1)
	srv := redistest.Start(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	writers := make([]*writer, 3)
	for i := range writers {
		writers[i] = &writer{url: c.URL(), index: "crash", id: i, rng: rand.New(rand.NewPCG(uint64(i), 7)), routing: map[string]string{}}
		wg.Add(1)
		go func(w *writer) { defer wg.Done(); w.run(t, stop) }(writers[i])
	}
	rng := rand.New(rand.NewPCG(42, 42))
	var p *proc
	for i := 0; i < kills; i++ {
		p = startBinary(t, relayArgs(c, srv.URL(), "crash", "crash")...)
		// Kill at a random moment: often mid-commit, sometimes while still
		// waiting out the previous owner's lease.
		time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
		p.kill()
	}
	close(stop)
	wg.Wait()
	p = startBinary(t, relayArgs(c, srv.URL(), "crash", "crash")...)
	waitCaughtUp(t, c, storeFor(t, srv, "crash"), []string{"crash"}, 30*time.Second)
	p.kill()

	evs := entries(t, srv.Client(t), redisx.NewKeys("crash").Events())
	type seqKey struct {
		uuid  string
		shard int
		seq   int64
	}
	seen := map[seqKey]bool{}
	for _, e := range evs {
		k := seqKey{e.IndexUUID, e.Shard, e.SeqNo}
		if seen[k] {
			t.Fatalf("duplicate entry for shard %d seq %d after %d kills", e.Shard, e.SeqNo, kills)
		}
		seen[k] = true
	}
	want := clusterDocs(t, c, "crash")
	if diff := diffDocs(want, replay(evs)); diff != "" {
		t.Fatalf("after %d kills the replayed stream differs from the index:\n%s", kills, diff)
	}
	t.Logf("%d kills, %d stream entries, %d documents, 0 duplicates, 0 missing", kills, len(evs), len(want))
}

// TestLease_TwoRelays: two relays on one feed, exactly one writes; SIGKILL
// it and the other takes over within 2 × TTL; a paused owner that outlived
// its lease has its next commit refused.
func TestLease_TwoRelays(t *testing.T) {
	c := cluster(t, esemu.Config{})
	createIndex(t, c, "leased", 2, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("leased")
	ttl := 500 * time.Millisecond
	a := startBinary(t, relayArgs(c, srv.URL(), "leased", "leased")...)
	holder := waitHolder(t, rdb.Get, keys.Lease(), "", 5*time.Second)
	b := startBinary(t, relayArgs(c, srv.URL(), "leased", "leased")...)
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/leased/_doc/%d", c.URL(), i), `{"phase":1}`)
	}
	time.Sleep(time.Second)
	if h, _ := rdb.Get(context.Background(), keys.Lease()).Result(); h != holder {
		t.Fatalf("lease moved from %q to %q while the owner lived", holder, h)
	}
	owner, standby := a, b
	if !strings.Contains(a.out.String(), "acquired the lease") {
		owner, standby = b, a
	}
	if strings.Contains(standby.out.String(), "acquired the lease") {
		t.Fatalf("both relays acquired the lease:\nA:\n%s\nB:\n%s", a.out, b.out)
	}
	if !strings.Contains(standby.out.String(), "waiting as standby") {
		t.Fatalf("the second relay does not say it is a standby:\n%s", standby.out)
	}
	// SIGKILL the owner: the standby takes over within 2 × TTL.
	killed := time.Now()
	owner.kill()
	waitHolder(t, rdb.Get, keys.Lease(), holder, 2*ttl+300*time.Millisecond)
	took := time.Since(killed)
	t.Logf("takeover after SIGKILL: %s (TTL %s)", took, ttl)
	if took > 2*ttl+100*time.Millisecond {
		t.Errorf("takeover took %s, want within 2×TTL = %s", took, 2*ttl)
	}
	// Pause the new owner past its TTL: a third relay takes over; when the
	// paused one resumes, its commit is refused and it becomes a standby.
	holder2, _ := rdb.Get(context.Background(), keys.Lease()).Result()
	_ = standby.cmd.Process.Signal(syscall.SIGSTOP)
	third := startBinary(t, relayArgs(c, srv.URL(), "leased", "leased")...)
	waitHolder(t, rdb.Get, keys.Lease(), holder2, 5*time.Second)
	for i := 20; i < 40; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/leased/_doc/%d", c.URL(), i), `{"phase":2}`)
	}
	_ = standby.cmd.Process.Signal(syscall.SIGCONT)
	waitCaughtUp(t, c, storeFor(t, srv, "leased"), []string{"leased"}, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(standby.out.String(), "lost the lease") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(standby.out.String(), "lost the lease") {
		t.Fatalf("the resumed stale owner did not notice it lost the lease:\n%s", standby.out)
	}
	_ = third
	evs := entries(t, rdb, keys.Events())
	seen := map[string]bool{}
	for _, e := range evs {
		k := fmt.Sprintf("%d/%d", e.Shard, e.SeqNo)
		if seen[k] {
			t.Fatalf("duplicate entry %s: two relays wrote", k)
		}
		seen[k] = true
	}
	if diff := diffDocs(clusterDocs(t, c, "leased"), replay(evs)); diff != "" {
		t.Fatalf("stream differs from the index:\n%s", diff)
	}
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
	c := cluster(t, esemu.Config{})
	createIndex(t, c, "graceful", 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("graceful")
	p := startBinary(t, relayArgs(c, srv.URL(), "graceful", "graceful", "--lease-ttl", "1m")...)
	waitHolder(t, rdb.Get, keys.Lease(), "", 5*time.Second)
	for i := 0; i < 10; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/graceful/_doc/%d", c.URL(), i), `{}`)
	}
	waitCaughtUp(t, c, storeFor(t, srv, "graceful"), []string{"graceful"}, 10*time.Second)
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
	if !strings.Contains(p.out.String(), "released the lease") {
		t.Errorf("no log line about releasing the lease:\n%s", p.out)
	}
}
