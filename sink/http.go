package sink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/urlx"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Defaults of HTTPConfig.
const (
	DefaultHTTPTimeout  = 10 * time.Second
	DefaultHTTPMaxBatch = 100
	DefaultHTTPMaxWait  = 5 * time.Millisecond
)

// HTTPConfig configures an HTTP sink.
type HTTPConfig struct {
	// URL is the webhook, http:// or https://. Required.
	URL string
	// Headers are sent with every request, e.g. "Authorization". They may
	// not set Content-Type or Idempotency-Key, which the sink sets.
	Headers map[string]string
	// Timeout bounds one request, response body included. Default 10s
	// (DefaultHTTPTimeout).
	Timeout time.Duration
	// MaxBatch is the most events in one request. Default 100
	// (DefaultHTTPMaxBatch).
	MaxBatch int
	// MaxWait is how long a batch that is not full waits for more events.
	// Default 5ms (DefaultHTTPMaxWait).
	MaxWait time.Duration
	// Client sends the requests. Default: a client that does not follow
	// redirects (a 3xx is a permanent failure: fix the URL). The sink never
	// closes it.
	Client *http.Client
}

// Validate names the first bad field.
func (c HTTPConfig) Validate() error {
	if c.URL == "" {
		return errors.New("http sink config: URL is empty")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// Not err itself: a *url.Error quotes the whole URL, password included.
		return fmt.Errorf("http sink config: URL %q: %v", urlx.Redact(c.URL), errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("http sink config: URL %q: scheme %q: want http or https", urlx.Redact(c.URL), u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("http sink config: URL %q has no host", urlx.Redact(c.URL))
	}
	for name, value := range c.Headers {
		if !validHeaderName(name) {
			return fmt.Errorf("http sink config: Headers: %q is not a header name", name)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Content-Type", "Idempotency-Key", "Content-Length", "Host":
			return fmt.Errorf("http sink config: Headers: %s is set by the sink", http.CanonicalHeaderKey(name))
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return fmt.Errorf("http sink config: Headers: value of %s contains a line break or NUL", name)
		}
	}
	if c.Timeout < 0 {
		return fmt.Errorf("http sink config: Timeout = %s: want 0 (default %s) or more", c.Timeout, DefaultHTTPTimeout)
	}
	if c.MaxBatch < 0 {
		return fmt.Errorf("http sink config: MaxBatch = %d: want 0 (default %d) or more", c.MaxBatch, DefaultHTTPMaxBatch)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("http sink config: MaxWait = %s: want 0 (default %s) or more", c.MaxWait, DefaultHTTPMaxWait)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// HTTPStatusError is a webhook answer outside 2xx.
type HTTPStatusError struct {
	URL        string // credentials redacted
	StatusCode int
	Body       string // the first KiB of the response body
	RetryAfter string // the Retry-After header, if any
}

func (e *HTTPStatusError) Error() string {
	msg := fmt.Sprintf("POST %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.RetryAfter != "" {
		msg += " (Retry-After " + e.RetryAfter + ")"
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// HTTP POSTs events to a webhook in JSON batches, with group commit: up to
// MaxBatch events gathered for up to MaxWait go in one request, one at a
// time. The body is a JSON array of events in the Stdout form, with
//
//	Content-Type: application/json
//	Idempotency-Key: <IdempotencyKey of the batch>
//
// and the configured Headers. Every handler of a batch gets its outcome:
//
//   - 2xx: nil, the event is done.
//   - 408, 425, 429, 5xx, a timeout or a connection error: an error; the
//     event is delivered again (maybe in another batch).
//   - 413 for a batch of several events: an error (smaller batches may
//     pass); for one event: permanent.
//   - any other status: a redisx.Permanent *HTTPStatusError; the event goes
//     to the dead-letter stream.
//
// So a receiver answers 2xx to what it has nothing to do for, a delete of
// an id it never saw included: deletes can be redundant (docs/CONSUMING.md,
// "An HTTP receiver").
type HTTP struct {
	cfg     HTTPConfig
	url     string // redacted, for errors
	client  *http.Client
	ownedTr *http.Transport // the default client's transport, closed by Close
	gc      *groupCommit[httpItem]
}

type httpItem struct {
	identity string
	json     []byte
}

// NewHTTP returns an HTTP sink and starts its sending goroutine.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultHTTPTimeout
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultHTTPMaxBatch
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultHTTPMaxWait
	}
	s := &HTTP{cfg: cfg, url: urlx.Redact(cfg.URL), client: cfg.Client}
	if s.client == nil {
		s.ownedTr = http.DefaultTransport.(*http.Transport).Clone()
		s.client = &http.Client{
			Transport:     s.ownedTr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s.gc = newGroupCommit(cfg.MaxBatch, cfg.MaxWait, s.post)
	return s, nil
}

// Handler queues the event and returns the outcome of the request that
// carried it.
func (s *HTTP) Handler() redisx.Handler {
	return func(ctx context.Context, e redisx.Event) error {
		line, err := jsonLine(e)
		if err != nil {
			return err
		}
		return s.gc.submit(ctx, httpItem{identity: eventIdentity(e), json: line[:len(line)-1]})
	}
}

// Close sends what is pending and stops. When ctx ends first, the request
// in flight is canceled and the pending events fail (they are retried by
// whoever consumes the feed next).
func (s *HTTP) Close(ctx context.Context) error {
	err := s.gc.close(ctx)
	if s.ownedTr != nil {
		s.ownedTr.CloseIdleConnections()
	}
	return err
}

// IdempotencyKey is the Idempotency-Key of a batch: the hex SHA-256 of the
// events' identities in order, each as "<length>:<identity>". An event's
// identity is "<index_uuid>/<shard>/<id>/<seq_no>/<op>" for upserts and
// deletes, "<op>/<index_uuid>/<stream id>" for other ops. The same events in
// the same order give the same key, however often they are sent; a
// redelivery batched differently gets another key (each event is still
// identified by its own fields in the body).
func IdempotencyKey(events []redisx.Event) string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = eventIdentity(e)
	}
	return batchKey(ids)
}

func eventIdentity(e redisx.Event) string {
	if e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete {
		return e.IndexUUID + "/" + strconv.Itoa(e.Shard) + "/" + e.ID + "/" + strconv.FormatInt(e.SeqNo, 10) + "/" + string(e.Op)
	}
	return string(e.Op) + "/" + e.IndexUUID + "/" + e.StreamID
}

func batchKey(identities []string) string {
	h := sha256.New()
	for _, id := range identities {
		h.Write([]byte(strconv.Itoa(len(id))))
		h.Write([]byte{':'})
		h.Write([]byte(id))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// post sends one batch. It runs on the group-commit goroutine only.
func (s *HTTP) post(ctx context.Context, batch []httpItem) error {
	var body bytes.Buffer
	ids := make([]string, len(batch))
	body.WriteByte('[')
	for i, it := range batch {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(it.json)
		ids[i] = it.identity
	}
	body.WriteByte(']')

	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body.Bytes()))
	if err != nil {
		return redisx.Permanent(fmt.Errorf("http sink: build request to %s: %w", s.url, err))
	}
	for k, v := range s.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", batchKey(ids))
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("http sink: POST %d events: %w", len(batch), err) // *url.Error, redacted
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	serr := &HTTPStatusError{URL: s.url, StatusCode: resp.StatusCode, Body: strings.TrimSpace(string(head)),
		RetryAfter: resp.Header.Get("Retry-After")}
	if retryableStatus(resp.StatusCode, len(batch)) {
		return fmt.Errorf("http sink: %d events: %w", len(batch), serr)
	}
	return redisx.Permanent(fmt.Errorf("http sink: %d events: %w", len(batch), serr))
}

// retryableStatus reports whether a non-2xx answer may pass on a retry.
func retryableStatus(code, events int) bool {
	switch {
	case code >= 500,
		code == http.StatusRequestTimeout,
		code == http.StatusTooEarly,
		code == http.StatusTooManyRequests:
		return true
	case code == http.StatusRequestEntityTooLarge:
		return events > 1
	}
	return false
}
