package sink

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// TestHTTP_Close checks that Close sends a batch still lingering (its
// MaxWait not over).
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
}
