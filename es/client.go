// Package es is the relay's Elasticsearch/OpenSearch client: the few calls a
// change feed needs (root info, shard-level stats, settings, refresh, one
// shard's search page), built on opensearch-go v4's transport with request
// and response types of its own, and strict about partial answers: a
// response with failed shards or a timeout is an error, never data.
package es

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
	"github.com/es-changefeed/es-changefeed/internal/urlx"
)

// DefaultURL is the cluster address when Config.URLs is empty.
const DefaultURL = "http://localhost:9200"

// DefaultRequestTimeout bounds one HTTP request when Config.RequestTimeout
// is zero.
const DefaultRequestTimeout = 30 * time.Second

// MaxPageSize is the most hits one search page may ask for: the default of
// index.max_result_window (from + size beyond it is refused). The relay's
// batch size, the delete scanner's and the bootstrap's pages are bounded by
// it.
const MaxPageSize = 10000

// Config configures a Client.
type Config struct {
	// URLs are the cluster's HTTP addresses. Default [DefaultURL].
	URLs []string
	// Username and Password enable basic auth. Default: none.
	Username string
	Password string
	// RequestTimeout bounds each request. Default 30s.
	RequestTimeout time.Duration
	// Transport overrides the HTTP transport. Default: a clone of Go's
	// http.DefaultTransport with CACertPEM and InsecureSkipVerify applied
	// (which must be unset when Transport is set).
	Transport http.RoundTripper
	// CACertPEM is a PEM bundle of the certificate authorities that https://
	// URLs must chain to; it replaces the system roots. Default: the system
	// roots.
	CACertPEM []byte
	// InsecureSkipVerify accepts any server certificate. Default false.
	InsecureSkipVerify bool
	// ClientCertPEM and ClientKeyPEM are a client certificate and its
	// private key, presented to clusters that ask for one (mutual TLS).
	// Both or neither. Default: none.
	ClientCertPEM []byte
	ClientKeyPEM  []byte
	// APIKey is an Elasticsearch API key, sent as "Authorization: ApiKey
	// <APIKey>": the encoded form base64(id:key) (see EncodeAPIKey). Not
	// together with Username. Default: none.
	APIKey string
}

// EncodeAPIKey accepts an API key as Elasticsearch hands it out (the
// "encoded" field: base64 of "id:key") or as "id:key", and returns the
// encoded form. Errors never quote the key.
func EncodeAPIKey(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("the API key is empty")
	}
	if id, key, ok := strings.Cut(s, ":"); ok {
		if id == "" || key == "" {
			return "", fmt.Errorf("the API key has the form id:key but its id or key is empty")
		}
		return base64.StdEncoding.EncodeToString([]byte(s)), nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil || !strings.Contains(string(raw), ":") {
		return "", fmt.Errorf("the API key (%d characters) is neither id:key nor the encoded form base64(id:key) that Elasticsearch returns in the \"encoded\" field", len(s))
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// Validate names the first bad URL or setting.
func (c Config) Validate() error {
	for _, u := range c.URLs {
		if err := validateURL(u); err != nil {
			return err
		}
	}
	if c.RequestTimeout < 0 {
		return fmt.Errorf("es config: RequestTimeout = %s: want >= 0", c.RequestTimeout)
	}
	if c.InsecureSkipVerify && len(c.CACertPEM) > 0 {
		return fmt.Errorf("es config: CACertPEM and InsecureSkipVerify are both set: verify with the CA, or skip verification, not both")
	}
	if c.Transport != nil && (c.InsecureSkipVerify || len(c.CACertPEM) > 0 || len(c.ClientCertPEM) > 0) {
		return fmt.Errorf("es config: CACertPEM/InsecureSkipVerify/ClientCertPEM apply to the default transport: set them on Transport instead")
	}
	if c.APIKey != "" && c.Username != "" {
		return fmt.Errorf("es config: APIKey and Username are both set: authenticate with an API key or a user, not both")
	}
	if c.APIKey != "" {
		if _, err := EncodeAPIKey(c.APIKey); err != nil {
			return fmt.Errorf("es config: APIKey: %w", err)
		}
	}
	if (len(c.ClientCertPEM) > 0) != (len(c.ClientKeyPEM) > 0) {
		return fmt.Errorf("es config: ClientCertPEM and ClientKeyPEM go together: set both (certificate and private key) or neither")
	}
	if len(c.ClientCertPEM) > 0 {
		if _, err := tls.X509KeyPair(c.ClientCertPEM, c.ClientKeyPEM); err != nil {
			return fmt.Errorf("es config: client certificate and key: %w", err)
		}
	}
	if len(c.CACertPEM) > 0 {
		if _, err := certPool(c.CACertPEM); err != nil {
			return err
		}
	}
	return nil
}

// certPool parses a PEM bundle; it refuses one without any certificate.
func certPool(pemData []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("es config: CACertPEM holds no PEM certificate (want one or more -----BEGIN CERTIFICATE----- blocks)")
	}
	return pool, nil
}

// transport builds the default transport with the TLS settings.
func (c Config) transport() (http.RoundTripper, error) {
	if c.Transport != nil || (len(c.CACertPEM) == 0 && !c.InsecureSkipVerify && len(c.ClientCertPEM) == 0) {
		return c.Transport, nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify}
	if len(c.CACertPEM) > 0 {
		pool, err := certPool(c.CACertPEM)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if len(c.ClientCertPEM) > 0 {
		cert, err := tls.X509KeyPair(c.ClientCertPEM, c.ClientKeyPEM)
		if err != nil {
			return nil, fmt.Errorf("es config: client certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	t.TLSClientConfig = tc
	return t, nil
}

func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// Not err itself: a *url.Error quotes the whole URL, password included.
		return fmt.Errorf("bad Elasticsearch URL %q: %v (want http://host:9200 or https://host:9200)", urlx.Redact(raw), errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("bad Elasticsearch URL %q: scheme %q (want http://host:9200 or https://host:9200)", urlx.Redact(raw), u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("bad Elasticsearch URL %q: no host (want http://host:9200)", urlx.Redact(raw))
	}
	if urlx.StrayAt(u) {
		return fmt.Errorf("bad Elasticsearch URL %q: an '@' after the host (percent-encode '/', '?' and '#' in a password: %%2F, %%3F, %%23)", urlx.Redact(raw))
	}
	return nil
}

// Client talks to one cluster. It is safe for concurrent use.
type Client struct {
	os      *opensearch.Client
	timeout time.Duration
	urls    []string

	rawURLs       []string // as configured, for the TLS probe
	hasClientCert bool

	// nodes are clients of one node each (with several URLs), for Pin.
	nodes []*Client
	next  *atomic.Uint32

	shared *clientShared // with the clients of Pin
}

// clientShared is what a client and its pinned clients share.
type clientShared struct {
	mu   sync.Mutex
	info Info // from the last Info call: decides PIT paths
}

// Pin returns a client that sends every request to one node, the nodes
// taken in turn by successive calls (the client itself with one URL).
// A shard read or a delete scan makes all its requests through one Pin: a
// node that was cut off and is back, not yet knowing it was removed, may
// coordinate requests from its own stale view for a moment; one
// coordinator gives one view (its stats, refresh, searches agree with each
// other), while mixing coordinators could list a stale copy against
// another node's checkpoints (seen on a real OpenSearch 2.19 after SIGCONT:
// a scan took deleted documents for live ones). A pinned client does not
// try other nodes: the caller's round fails and the next Pin takes the
// next node.
func (c *Client) Pin() *Client {
	if len(c.nodes) == 0 {
		return c
	}
	return c.nodes[int(c.next.Add(1)-1)%len(c.nodes)]
}

// New returns a client. It does not contact the cluster (see Info).
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.URLs) == 0 {
		cfg.URLs = []string{DefaultURL}
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Username == "" && cfg.Password != "" {
		// A user in the URL, the password given apart (from a file or the
		// environment, out of ps and logs).
		// The client would take the URL's user with an empty password.
		urls := make([]string, len(cfg.URLs))
		for i, raw := range cfg.URLs {
			urls[i] = raw
			if u, err := url.Parse(raw); err == nil && u.User != nil {
				if cfg.Username == "" {
					cfg.Username = u.User.Username()
				}
				u.User = nil
				urls[i] = u.String()
			}
		}
		cfg.URLs = urls
	}
	tr, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	var header http.Header
	if cfg.APIKey != "" {
		key, _ := EncodeAPIKey(cfg.APIKey) // checked by Validate
		header = http.Header{"Authorization": {"ApiKey " + key}}
	}
	discover := false
	client := func(addresses []string) (*Client, error) {
		c, err := opensearch.NewClient(opensearch.Config{
			Addresses:             addresses,
			Username:              cfg.Username,
			Password:              cfg.Password,
			Header:                header,
			Transport:             tr,
			DisableRetry:          true, // the relay retries whole rounds itself
			DiscoverNodesOnStart:  &discover,
			HealthCheckMaxRetries: -1,
			MaxRetryClusterHealth: -1,
		})
		if err != nil {
			return nil, fmt.Errorf("Elasticsearch client for %s: %w", strings.Join(addresses, ","), err)
		}
		urls := make([]string, len(addresses))
		for i, u := range addresses {
			urls[i] = urlx.Redact(u)
		}
		return &Client{os: c, timeout: cfg.RequestTimeout, urls: urls, rawURLs: addresses, hasClientCert: len(cfg.ClientCertPEM) > 0}, nil
	}
	c, err := client(cfg.URLs)
	if err != nil {
		return nil, err
	}
	c.shared = &clientShared{}
	if len(cfg.URLs) > 1 {
		c.next = new(atomic.Uint32)
		for _, u := range cfg.URLs {
			n, err := client([]string{u})
			if err != nil {
				return nil, err
			}
			n.shared = c.shared
			c.nodes = append(c.nodes, n)
		}
	}
	return c, nil
}

// URLs are the cluster addresses (passwords masked), for messages.
func (c *Client) URLs() string { return strings.Join(c.urls, ",") }

// Error is a failed call: an error response from the cluster (Status > 0)
// or a transport failure (Status 0, Err set).
type Error struct {
	// Op says what was attempted, e.g. "search shard 2 of orders".
	Op     string
	Status int
	// Type and Reason come from ES's error body (root cause first).
	Type   string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	switch {
	case e.Status == 0 && e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	case e.Type != "":
		return fmt.Sprintf("%s: HTTP %d %s: %s", e.Op, e.Status, e.Type, e.Reason)
	default:
		return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, e.Reason)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// Temporary reports whether retrying later may succeed: connection errors,
// 429, 5xx, partial results and timeouts.
func (e *Error) Temporary() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500 ||
		errors.Is(e.Err, ErrPartial)
}

// Sentinels for errors.Is.
var (
	// ErrPartial marks a response that reported failed shards or a timeout.
	ErrPartial = errors.New("partial response")
	// ErrNotFound marks a 404 for a missing index.
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized marks 401 and 403 answers.
	ErrUnauthorized = errors.New("not authorized")
	// ErrMalformed marks a response that does not have the expected shape.
	ErrMalformed = errors.New("malformed response")
)

// do sends a request and decodes a 2xx JSON body into out. Other statuses
// become *Error.
func (c *Client) do(ctx context.Context, op, method, path string, body any, out any) error {
	buf := bodyBuffers.Get().(*[]byte)
	defer bodyBuffers.Put(buf)
	data, status, err := c.read(ctx, op, method, path, body, (*buf)[:0])
	if cap(data) <= maxPooledBody {
		*buf = data[:0]
	}
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Op: op, Status: status, Err: fmt.Errorf("%w: %v", ErrMalformed, err), Reason: "undecodable body"}
	}
	return nil
}

// bodyBuffers are the buffers do reads bodies into: json.Unmarshal copies
// out what it keeps. Buffers beyond maxPooledBody are left to the GC.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledBody = 4 << 20

// read sends a request and appends a 2xx body to buf; other statuses
// become *Error. It returns the body and the status.
func (c *Client) read(ctx context.Context, op, method, path string, body any, buf []byte) ([]byte, int, error) {
	if rs, ok := ctx.Value(requestStatsKey{}).(*RequestStats); ok {
		start := time.Now()
		defer func() { rs.add(time.Since(start)) }()
	}
	var encoded []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return buf, 0, &Error{Op: op, Err: err}
		}
		encoded = b
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.perform(func() (*http.Request, error) {
		var rd io.Reader
		if encoded != nil {
			rd = bytes.NewReader(encoded)
		}
		req, err := http.NewRequestWithContext(ctx, method, path, rd)
		if err != nil {
			return nil, err
		}
		if encoded != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		return req, nil
	})
	if err != nil {
		return buf, 0, &Error{Op: op, Err: c.explainTransport(err)}
	}
	defer resp.Body.Close()
	if n := resp.ContentLength; n > 0 && int64(cap(buf)-len(buf)) < n+1 {
		buf = append(buf[:cap(buf)], make([]byte, int(n)+1-(cap(buf)-len(buf)))...)[:len(buf)]
	}
	data, err := readAll(resp.Body, buf)
	if err != nil {
		return data, resp.StatusCode, &Error{Op: op, Err: fmt.Errorf("read response: %w", err)}
	}
	if resp.StatusCode >= 300 {
		return data, resp.StatusCode, decodeError(op, resp.StatusCode, data)
	}
	return data, resp.StatusCode, nil
}

// RequestStats counts the requests a client makes with a context from
// WithRequestStats (all but Bulk's), and the time they took: from sending the request to the
// end of its answer, so the cluster's work, the network's and reading the
// body (an upper bound of the cluster's time). Safe for concurrent use.
type RequestStats struct {
	requests, nanos atomic.Int64
}

type requestStatsKey struct{}

// WithRequestStats returns a context whose requests (on any Client) rs
// counts.
func WithRequestStats(ctx context.Context, rs *RequestStats) context.Context {
	return context.WithValue(ctx, requestStatsKey{}, rs)
}

func (rs *RequestStats) add(d time.Duration) {
	rs.requests.Add(1)
	rs.nanos.Add(int64(d))
}

// Requests is how many requests were counted.
func (rs *RequestStats) Requests() int64 { return rs.requests.Load() }

// Time is how long they took, together.
func (rs *RequestStats) Time() time.Duration { return time.Duration(rs.nanos.Load()) }

// readAll is io.ReadAll appending to buf.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// perform sends the request mk builds; when the request reached no node
// (its connection was refused: that node is down, as in a rolling
// restart), it is built and sent again, to the next of the configured
// nodes, once per node. A refused connection carried nothing out, so this
// is safe for writes too; any other error is returned as it is (the
// relay retries whole rounds itself).
func (c *Client) perform(mk func() (*http.Request, error)) (*http.Response, error) {
	var err error
	for try := 0; try < max(1, len(c.rawURLs)); try++ {
		var req *http.Request
		if req, err = mk(); err != nil {
			return nil, err
		}
		// Stream, not the deprecated Perform: Perform reads the whole body
		// into a buffer of its own before the caller reads it again.
		resp, serr := c.os.Stream(req)
		if err = serr; resp != nil && err == nil {
			return resp, nil
		}
		if resp != nil {
			resp.Body.Close()
		}
		if err == nil {
			err = errors.New("no response")
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" || req.Context().Err() != nil {
			break
		}
	}
	return nil, err
}

func (c *Client) explainTransport(err error) error {
	var ne net.Error
	var oe *net.OpError
	if te := tlsx.Classify(err, tlsx.Client{Peer: c.URLs(), Noun: "the cluster", HasClientCert: c.hasClientCert}); te != nil {
		if te.Problem == tlsx.NotTLS {
			te.Detail = "it answers in plain HTTP"
		}
		return te
	}
	switch {
	case errors.As(err, &oe) && oe.Op == "dial":
		return fmt.Errorf("cannot connect to %s: %w", c.URLs(), err)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer from %s within %s: %w", c.URLs(), c.timeout, err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		// Elasticsearch and OpenSearch with TLS close a plaintext
		// connection without a word; see whether an http:// node speaks TLS.
		for _, u := range c.rawURLs {
			if speaksTLS(u) {
				return &tlsx.Error{Peer: urlx.Redact(u), Problem: tlsx.Required, Detail: "the cluster serves HTTPS only", Err: err}
			}
		}
	}
	return err
}

// speaksTLS reports whether an http:// URL's port completes a TLS handshake.
func speaksTLS(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return tlsx.Speaks(context.Background(), host, u.Hostname())
}

// decodeError reads ES's error body: {"error":{"root_cause":[…],"type","reason"},"status"},
// {"error":"text","status"}, or plain text (OpenSearch's 401) or HTML (a
// proxy's), whose whitespace it folds to one line.
func decodeError(op string, status int, data []byte) error {
	e := &Error{Op: op, Status: status}
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &body) == nil && len(body.Error) > 0 {
		var obj struct {
			Type      string `json:"type"`
			Reason    string `json:"reason"`
			RootCause []struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"root_cause"`
		}
		var text string
		switch {
		case json.Unmarshal(body.Error, &obj) == nil:
			e.Type, e.Reason = obj.Type, obj.Reason
			if len(obj.RootCause) > 0 && obj.RootCause[0].Type != "" {
				e.Type, e.Reason = obj.RootCause[0].Type, obj.RootCause[0].Reason
			}
		case json.Unmarshal(body.Error, &text) == nil:
			e.Reason = text
		}
	}
	if e.Reason == "" {
		// Not ES's JSON: OpenSearch's plain-text 401, or the HTML page of
		// a proxy in front of the cluster (haproxy's 401 has three lines).
		// On one line: the commands print an error as one line.
		e.Reason = strings.Join(strings.Fields(string(data)), " ")
		if len(e.Reason) > 200 {
			e.Reason = e.Reason[:200] + "…"
		}
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Err = ErrUnauthorized
	case status == http.StatusNotFound && (e.Type == "index_not_found_exception" || e.Type == ""):
		e.Err = ErrNotFound
	}
	return e
}

// shardsHeader is the _shards object of broadcast and search responses.
type shardsHeader struct {
	Total      int `json:"total"`
	Successful int `json:"successful"`
	Skipped    int `json:"skipped"`
	Failed     int `json:"failed"`
	Failures   []struct {
		Shard  int    `json:"shard"`
		Index  string `json:"index"`
		Reason struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"reason"`
	} `json:"failures"`
}

func (h shardsHeader) check(op string) error {
	if h.Failed == 0 && h.Successful+h.Skipped == h.Total {
		return nil
	}
	why := fmt.Sprintf("%d of %d shards failed", h.Failed, h.Total)
	if h.Failed == 0 {
		why = fmt.Sprintf("only %d of %d shards answered", h.Successful+h.Skipped, h.Total)
	}
	if len(h.Failures) > 0 {
		f := h.Failures[0]
		why += fmt.Sprintf(" (shard %d of %s: %s: %s)", f.Shard, f.Index, f.Reason.Type, f.Reason.Reason)
	}
	return &Error{Op: op, Status: http.StatusOK, Reason: why, Err: ErrPartial}
}
