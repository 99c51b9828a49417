package sink_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
)

// httpRequest is what the test webhook received in one request.
type httpRequest struct {
	header http.Header
	events []redisx.Event
}

// httpWebhook is an httptest server recording each request and answering
// with status(request number) (200 when status is nil); while its gate
// hangs, it does not answer.
type httpWebhook struct {
	*httptest.Server
	gate     sinktest.Gate
	mu       sync.Mutex
	requests []httpRequest
}

func newHTTPWebhook(tb testing.TB, status func(n int) int) *httpWebhook {
	tb.Helper()
	w := &httpWebhook{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.gate.Pass(r.Context()) != nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		var events []redisx.Event
		if err := json.Unmarshal(body, &events); err != nil {
			tb.Errorf("webhook body is not a JSON array of events: %v\n%s", err, body)
		}
		w.mu.Lock()
		w.requests = append(w.requests, httpRequest{header: r.Header.Clone(), events: events})
		n := len(w.requests)
		w.mu.Unlock()
		code := http.StatusOK
		if status != nil {
			code = status(n)
		}
		rw.WriteHeader(code)
		_, _ = rw.Write([]byte(http.StatusText(code)))
	}))
	tb.Cleanup(w.Close)
	return w
}

func (w *httpWebhook) got() []httpRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]httpRequest(nil), w.requests...)
}

// delivered is every event received, in the order received.
func (w *httpWebhook) delivered(context.Context) ([]redisx.Event, error) {
	var out []redisx.Event
	for _, r := range w.got() {
		out = append(out, r.events...)
	}
	return out, nil
}

// idleCloser is a transport that notes CloseIdleConnections, which is
// what closing an *http.Client amounts to.
type idleCloser struct {
	http.RoundTripper
	closed atomic.Bool
}

func (t *idleCloser) CloseIdleConnections() { t.closed.Store(true) }

// TestHTTP_Contract runs the sinks' contract (sinktest) on HTTP, with a
// client passed in.
func TestHTTP_Contract(t *testing.T) {
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		hook := newHTTPWebhook(tb, nil)
		tr := &idleCloser{RoundTripper: http.DefaultTransport.(*http.Transport).Clone()}
		tb.Cleanup(tr.RoundTripper.(*http.Transport).CloseIdleConnections)
		client := &http.Client{Transport: tr}
		s := newHTTPSink(tb, sink.HTTPConfig{URL: hook.URL, Client: client})
		clientOpen := func(context.Context) error {
			if tr.closed.Load() {
				return errors.New("the sink closed the idle connections of the *http.Client passed in")
			}
			return nil
		}
		return sinktest.Env{Sink: s, Delivered: hook.delivered, Gate: &hook.gate, ClientsOpen: clientOpen}
	}, sinktest.Features{Appends: true, ClientsPassedIn: true, CloseAborts: true})
}

// newHTTPSink returns a sink closed in tb.Cleanup.
func newHTTPSink(tb testing.TB, cfg sink.HTTPConfig) *sink.HTTP {
	tb.Helper()
	s, err := sink.NewHTTP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestHTTPConfig_Validate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     sink.HTTPConfig
		wantErr string
	}{
		{name: "defaults", cfg: sink.HTTPConfig{URL: "https://hooks.example.com/escf"}},
		{name: "headers", cfg: sink.HTTPConfig{URL: "http://h/", Headers: map[string]string{"Authorization": "Bearer x", "X-Feed": "orders"}}},
		{name: "no URL", cfg: sink.HTTPConfig{}, wantErr: "URL is empty"},
		{name: "scheme", cfg: sink.HTTPConfig{URL: "ftp://h/"}, wantErr: `scheme "ftp"`},
		{name: "no host", cfg: sink.HTTPConfig{URL: "http:///x"}, wantErr: "no host"},
		{name: "password redacted", cfg: sink.HTTPConfig{URL: "gopher://u:secret@h/"}, wantErr: "u:xxxxx@h"},
		{name: "header set by the sink", cfg: sink.HTTPConfig{URL: "http://h/", Headers: map[string]string{"content-type": "text/plain"}}, wantErr: "Content-Type is set by the sink"},
		{name: "bad header name", cfg: sink.HTTPConfig{URL: "http://h/", Headers: map[string]string{"Bad Name": "x"}}, wantErr: `"Bad Name" is not a header name`},
		{name: "header value with a newline", cfg: sink.HTTPConfig{URL: "http://h/", Headers: map[string]string{"X-A": "a\r\nX-B: b"}}, wantErr: "line break"},
		{name: "negative timeout", cfg: sink.HTTPConfig{URL: "http://h/", Timeout: -time.Second}, wantErr: "Timeout = -1s"},
		{name: "negative batch", cfg: sink.HTTPConfig{URL: "http://h/", MaxBatch: -1}, wantErr: "MaxBatch = -1"},
		{name: "negative wait", cfg: sink.HTTPConfig{URL: "http://h/", MaxWait: -time.Millisecond}, wantErr: "MaxWait = -1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("err shows the password: %v", err)
			}
		})
	}
}

// TestHTTP_Batching sends many events at once and checks they arrive
// grouped, each once, in well-formed requests.
func TestHTTP_Batching(t *testing.T) {
	hook := newHTTPWebhook(t, nil)
	s := newHTTPSink(t, sink.HTTPConfig{URL: hook.URL, MaxBatch: 16, MaxWait: 50 * time.Millisecond,
		Headers: map[string]string{"Authorization": "Bearer token"}})
	h := s.Handler()
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h(context.Background(), sinkUpsert(strconv.Itoa(i), int64(i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	reqs := hook.got()
	if len(reqs) >= n || len(reqs) < 3 {
		t.Errorf("%d requests for %d events, want between 3 (batches of 16) and %d", len(reqs), n, n-1)
	}
	seen := map[string]int{}
	for i, r := range reqs {
		if len(r.events) == 0 || len(r.events) > 16 {
			t.Errorf("request %d has %d events, want 1..16", i, len(r.events))
		}
		for _, e := range r.events {
			seen[e.ID]++
		}
		if got, want := r.header.Get("Content-Type"), "application/json"; got != want {
			t.Errorf("Content-Type = %q, want %q", got, want)
		}
		if got, want := r.header.Get("Authorization"), "Bearer token"; got != want {
			t.Errorf("Authorization = %q, want %q", got, want)
		}
		// The receiver can recompute the key from the body.
		if got, want := r.header.Get("Idempotency-Key"), sink.IdempotencyKey(r.events); got != want {
			t.Errorf("request %d: Idempotency-Key = %q, want %q", i, got, want)
		}
	}
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("event %d arrived %d times, want once", i, c)
		}
	}
}

func TestHTTP_IdempotencyKeyIsStable(t *testing.T) {
	hook := newHTTPWebhook(t, nil)
	s := newHTTPSink(t, sink.HTTPConfig{URL: hook.URL, MaxWait: time.Millisecond})
	h := s.Handler()
	ctx := context.Background()
	for _, e := range []redisx.Event{sinkUpsert("a", 1), sinkUpsert("a", 1), sinkUpsert("a", 2)} {
		if err := h(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	reqs := hook.got()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	k0, k1, k2 := reqs[0].header.Get("Idempotency-Key"), reqs[1].header.Get("Idempotency-Key"), reqs[2].header.Get("Idempotency-Key")
	if k0 == "" || k0 != k1 {
		t.Errorf("a redelivered event got key %q, the first delivery %q: want equal", k1, k0)
	}
	if k2 == k0 {
		t.Errorf("another version got the same key %q", k2)
	}
}

func TestIdempotencyKey(t *testing.T) {
	// The documented format, computed independently.
	want := func(ids ...string) string {
		h := sha256.New()
		for _, id := range ids {
			h.Write([]byte(strconv.Itoa(len(id)) + ":" + id))
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	snap := redisx.Event{StreamID: "1700000000000-3", Op: redisx.OpSnapshotStart, Target: "orders"}
	tests := []struct {
		name   string
		events []redisx.Event
		want   string
	}{
		{name: "one upsert", events: []redisx.Event{sinkUpsert("a", 0)}, want: want("U1/0/a/0/upsert")},
		{name: "delete", events: []redisx.Event{sinkDelete("a/b", 7)}, want: want("U1/0/a/b/7/delete")},
		{name: "order matters", events: []redisx.Event{sinkUpsert("b", 1), sinkUpsert("a", 1)}, want: want("U1/0/b/1/upsert", "U1/0/a/1/upsert")},
		{name: "snapshot event by stream id", events: []redisx.Event{snap}, want: want("snapshot_start//1700000000000-3")},
		{name: "empty batch", events: nil, want: want()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sink.IdempotencyKey(tt.events); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if sink.IdempotencyKey([]redisx.Event{sinkUpsert("a", 1), sinkUpsert("b", 1)}) == sink.IdempotencyKey([]redisx.Event{sinkUpsert("b", 1), sinkUpsert("a", 1)}) {
		t.Error("the key ignores the order of the events")
	}
}

func TestHTTP_Status(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		batch     int
		wantErr   bool
		permanent bool
	}{
		{name: "200", status: 200, batch: 1},
		{name: "204", status: 204, batch: 1},
		{name: "500 is retried", status: 500, batch: 1, wantErr: true},
		{name: "503 is retried", status: 503, batch: 1, wantErr: true},
		{name: "429 is retried", status: 429, batch: 1, wantErr: true},
		{name: "408 is retried", status: 408, batch: 1, wantErr: true},
		{name: "400 is permanent", status: 400, batch: 1, wantErr: true, permanent: true},
		{name: "401 is permanent", status: 401, batch: 1, wantErr: true, permanent: true},
		{name: "404 is permanent", status: 404, batch: 1, wantErr: true, permanent: true},
		{name: "422 is permanent", status: 422, batch: 1, wantErr: true, permanent: true},
		{name: "413 of one event is permanent", status: 413, batch: 1, wantErr: true, permanent: true},
		{name: "413 of a batch is retried", status: 413, batch: 3, wantErr: true},
		{name: "a redirect is not followed", status: 308, batch: 1, wantErr: true, permanent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hook := newHTTPWebhook(t, func(int) int { return tt.status })
			s := newHTTPSink(t, sink.HTTPConfig{URL: hook.URL, MaxBatch: tt.batch, MaxWait: time.Second})
			errs := make(chan error, tt.batch)
			for i := range tt.batch {
				go func() { errs <- s.Handler()(context.Background(), sinkUpsert(strconv.Itoa(i), 1)) }()
			}
			for range tt.batch {
				err := <-errs
				if (err != nil) != tt.wantErr {
					t.Fatalf("err = %v, want error %v", err, tt.wantErr)
				}
				if err == nil {
					continue
				}
				if got := redisx.IsPermanent(err); got != tt.permanent {
					t.Errorf("permanent = %v, want %v (err %v)", got, tt.permanent, err)
				}
				var se *sink.HTTPStatusError
				if !errors.As(err, &se) || se.StatusCode != tt.status {
					t.Errorf("err = %v, want an *HTTPStatusError with %d", err, tt.status)
				}
			}
			if reqs := hook.got(); len(reqs) != 1 || len(reqs[0].events) != tt.batch {
				t.Errorf("got %d requests, want 1 of %d events", len(reqs), tt.batch)
			}
		})
	}
}

func TestHTTP_Timeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := newHTTPSink(t, sink.HTTPConfig{URL: srv.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := s.Handler()(context.Background(), sinkUpsert("a", 1))
	if err == nil || redisx.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a retryable deadline error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the handler took %s with Timeout 100ms", d)
	}
}

func TestHTTP_ConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := newHTTPSink(t, sink.HTTPConfig{URL: "http://" + addr + "/hook"})
	if err := s.Handler()(context.Background(), sinkUpsert("a", 1)); err == nil || redisx.IsPermanent(err) {
		t.Errorf("err = %v, want a retryable error", err)
	}
}
