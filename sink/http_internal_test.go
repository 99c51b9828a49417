package sink

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// TestHTTP_Close checks that Close sends a batch still lingering, and that
// the handler refuses events afterwards.
func TestHTTP_Close(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(srv.Close)
	s, err := NewHTTP(HTTPConfig{URL: srv.URL, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	done := make(chan error, 1)
	go func() {
		done <- h(context.Background(), redisx.Event{Op: redisx.OpDelete, IndexUUID: "U1", ID: "a", SeqNo: 1})
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.gc.mu.Lock()
		queued := len(s.gc.pending)
		s.gc.mu.Unlock()
		if queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the event was never queued")
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("the lingering event: %v, want sent by Close", err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("%d requests, want 1", got)
	}
	if err := h(context.Background(), redisx.Event{Op: redisx.OpDelete, IndexUUID: "U1", ID: "b", SeqNo: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
}

// TestHTTP_CloseTimeout checks that Close gives up on a hanging webhook
// when its context ends, and the handler gets a retryable error.
func TestHTTP_CloseTimeout(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s, err := NewHTTP(HTTPConfig{URL: srv.URL, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Handler()(context.Background(), redisx.Event{Op: redisx.OpDelete, IndexUUID: "U1", ID: "a", SeqNo: 1})
	}()
	<-arrived // the request hangs
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: err = %v, want DeadlineExceeded", err)
	}
	if err := <-done; err == nil || redisx.IsPermanent(err) {
		t.Errorf("handler: err = %v, want a retryable error", err)
	}
}
