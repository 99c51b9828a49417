package redisx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := 300 * time.Millisecond
	a, b := newLease(t, srv.URL(), ttl), newLease(t, srv.URL(), ttl)
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	aCtx, stopA := context.WithCancel(ctx)
	go a.Keep(aCtx)
	if ok, err := b.TryAcquire(ctx); err != nil || ok {
		t.Fatalf("second lease acquired while the first is kept: %v %v", ok, err)
	}
	// Kept for several TTLs: still a's.
	time.Sleep(3 * ttl)
	if h, _ := b.Holder(ctx); h != a.Token() {
		t.Fatalf("holder = %q, want a's token", h)
	}
	// a dies (stops renewing): b takes over within 2 × TTL.
	stopA()
	start := time.Now()
	waited := ""
	if err := b.Acquire(ctx, func(h string) { waited = h }); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > 2*ttl {
		t.Errorf("takeover took %s, want <= 2×TTL = %s", took, 2*ttl)
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
