package redisx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func newLease(tb testing.TB, url string, ttl time.Duration) *redisx.Lease {
	tb.Helper()
	rdb, err := redisx.NewClient(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	l, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: redisx.NewKeys("lease").Lease(), TTL: ttl})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestLease_OneOwnerStandbyTakesOver(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 300 * time.Millisecond
	a, b := newLease(t, srv.URL(), ttl), newLease(t, srv.URL(), ttl)
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first := expiryOf(t, rdb, a.Key())
	aCtx, stopA := context.WithCancel(ctx)
	keepDone := make(chan error, 1)
	go func() { keepDone <- a.Keep(aCtx) }()
	if ok, err := b.TryAcquire(ctx); err != nil || ok {
		t.Fatalf("second lease acquired while the first is kept: %v %v", ok, err)
	}
	// Kept across several TTLs (renewed until the key expires 3 TTLs past
	// its first expiry): still a's, and b's tries fail all along.
	deadline := time.Now().Add(30 * time.Second)
	for expiryOf(t, rdb, a.Key()) < first+3*ttl.Milliseconds() {
		if h, _ := b.Holder(ctx); h != a.Token() {
			t.Fatalf("holder = %q while a keeps the lease, want a's token", h)
		}
		if ok, err := b.TryAcquire(ctx); err != nil || ok {
			t.Fatalf("b acquired the lease a keeps: %v %v", ok, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's lease not renewed 3 TTLs past its first expiry within 30s")
		}
		time.Sleep(10 * time.Millisecond) // a poll of the key's state
	}
	// a dies (stops renewing): b takes over once a's key has expired.
	stopA()
	if err := <-keepDone; err != nil {
		t.Fatalf("Keep after its context ended = %v, want nil", err)
	}
	last := expiryOf(t, rdb, a.Key())
	waited := ""
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	if err := b.Acquire(actx, func(h string) { waited = h }); err != nil {
		t.Fatalf("b's Acquire after a stopped: %v", err)
	}
	if h, _ := b.Holder(ctx); h != b.Token() {
		t.Fatalf("holder = %q after b acquired, want b's token", h)
	}
	if now := redisMillis(t, rdb); last > 0 && now < last {
		t.Errorf("b acquired at %d ms, before a's lease expired at %d ms", now, last)
	}
	if waited != a.Token() {
		t.Errorf("standby saw holder %q, want a's token", waited)
	}
	// a's renewals now fail: Keep reports the loss.
	err := a.Keep(ctx)
	if !errors.Is(err, redisx.ErrLeaseLost) {
		t.Fatalf("Keep after takeover = %v, want ErrLeaseLost", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Error("Lost() not closed after the lease was lost")
	}
}

// expiryOf is the key's absolute expiry in Unix ms (PEXPIRETIME); 0 when
// the key is gone.
func expiryOf(tb testing.TB, rdb *redis.Client, key string) int64 {
	tb.Helper()
	ms, err := rdb.Do(context.Background(), "PEXPIRETIME", key).Int64()
	if err != nil {
		tb.Fatal(err)
	}
	return max(ms, 0)
}

// redisMillis is the Redis server's clock in Unix ms.
func redisMillis(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return now.UnixMilli()
}

func TestLease_ReleaseLetsStandbyInAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a, b := newLease(t, srv.URL(), time.Minute), newLease(t, srv.URL(), time.Minute)
	if ok, _ := a.TryAcquire(ctx); !ok {
		t.Fatal("a could not acquire")
	}
	// Release by a non-owner does nothing.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Holder(ctx); h != a.Token() {
		t.Fatalf("a non-owner's Release removed the lease")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.TryAcquire(ctx); !ok {
		t.Fatal("b could not acquire after a released")
	}
}

func TestNewClient_BadURLs(t *testing.T) {
	for _, u := range []string{"localhost:6379", "http://localhost:6379", "redis://", "redis://:pw@[::1", "redis://h:6379/notadb"} {
		if _, err := redisx.NewClient(u); !errors.Is(err, redisx.ErrBadURL) {
			t.Errorf("NewClient(%q) err = %v, want ErrBadURL", u, err)
		}
	}
	_, err := redisx.NewClient("ftp://user:secret@host")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password or is nil: %v", err)
	}
}

// TestLease_LostTwice: a lease lost, acquired again and lost again (two
// Redis hiccups in a relay's life) reports both losses; the second used to
// close an already closed channel and panic.
func TestLease_LostTwice(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ttl := 150 * time.Millisecond
	l := newLease(t, srv.URL(), ttl)
	for i := 0; i < 2; i++ {
		if err := l.Acquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
		lost := l.Lost()
		if err := rdb.Set(ctx, l.Key(), "someone-else", ttl).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Keep(ctx); !errors.Is(err, redisx.ErrLeaseLost) {
			t.Fatalf("loss %d: Keep = %v, want ErrLeaseLost", i+1, err)
		}
		select {
		case <-lost:
		default:
			t.Fatalf("loss %d: Lost() not closed", i+1)
		}
		if err := rdb.Del(ctx, l.Key()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
