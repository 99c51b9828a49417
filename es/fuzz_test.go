package es

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Fuzz targets of the client's parsers: a search page as the cluster
// answers it (SearchShard) and the cluster URLs (Config.Validate, New).
// The hit → event mapping, field by field, is fuzzed in package relay
// (FuzzHitToEvent). Run one with
//
//	go test -run '^$' -fuzz '^FuzzSearchShard$' -fuzztime 60s ./es/

// cannedKey carries the answer a cannedTransport gives to one request.
type cannedKey struct{}

type cannedAnswer struct {
	status int
	body   []byte
}

// cannedTransport answers each request with the cannedAnswer in its
// context: no network, no server, one client for a whole fuzzing run.
type cannedTransport struct{}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	a, _ := r.Context().Value(cannedKey{}).(cannedAnswer)
	return &http.Response{StatusCode: a.status, Status: http.StatusText(a.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: r}, nil
}

var (
	fuzzClientOnce sync.Once
	fuzzClient     *Client
	fuzzClientErr  error
)

// cannedClient is a client whose every request gets the answer in its
// context (see withAnswer).
func cannedClient(tb testing.TB) *Client {
	tb.Helper()
	fuzzClientOnce.Do(func() {
		fuzzClient, fuzzClientErr = New(Config{URLs: []string{"http://fuzz.invalid:9200"}, Transport: cannedTransport{}})
	})
	if fuzzClientErr != nil {
		tb.Fatal(fuzzClientErr)
	}
	return fuzzClient
}

func withAnswer(ctx context.Context, status int, body []byte) context.Context {
	return context.WithValue(ctx, cannedKey{}, cannedAnswer{status: status, body: body})
}

var fuzzStatuses = []int{200, 200, 200, 200, 201, 400, 401, 403, 404, 429, 500, 503}

// FuzzSearchShard: whatever a cluster (or a proxy in front of it) answers a
// shard search, SearchShard never panics and either returns a typed *Error
// (ErrMalformed or ErrPartial for a 2xx, the HTTP status otherwise; never
// with hits) or a page that keeps its promises: at most Size hits, _seq_no
// strictly increasing within (After, UpTo], every hit with an _id and a
// JSON _source, and as many hits as the answer listed.
func FuzzSearchShard(f *testing.F) {
	page := func(hits ...string) []byte {
		return []byte(`{"took":1,"timed_out":false,` + okShards + `,"hits":{"total":{"value":0,"relation":"eq"},"max_score":null,"hits":[` + strings.Join(hits, ",") + `]}}`)
	}
	f.Add(page(hit("a", 5), hit("b", 9)), int64(4), int64(9), uint8(3), uint8(0))
	f.Add(page(hit("a", 0)), int64(-1), int64(0), uint8(1), uint8(0))
	f.Add(page(), int64(-1), int64(-1), uint8(10), uint8(0))
	f.Add(page(hit("a", 7), hit("b", 6)), int64(4), int64(9), uint8(3), uint8(0))
	f.Add(page(`{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1,"_source":null}`), int64(4), int64(9), uint8(3), uint8(0))
	f.Add(page(`{"_index":"i","_version":1,"_seq_no":5,"_primary_term":1,"_source":{}}`), int64(4), int64(9), uint8(3), uint8(0))
	f.Add(page(`{"_index":"i","_id":"a","_version":1,"_seq_no":9223372036854775807,"_primary_term":1,"_source":{}}`), int64(9223372036854775806), int64(9223372036854775807), uint8(3), uint8(0))
	f.Add(page(`{"_index":"i","_id":"a","_version":1,"_seq_no":99999999999999999999,"_primary_term":1,"_source":{}}`), int64(4), int64(9), uint8(3), uint8(0))
	f.Add(page(`{"_index":"i","_id":"a","_version":1,"_seq_no":-3,"_primary_term":1,"_source":{}}`), int64(-5), int64(9), uint8(3), uint8(0))
	f.Add([]byte(`{"took":1,"timed_out":false,"_shards":{"total":1,"successful":0,"skipped":0,"failed":1,"failures":[{"shard":0,"index":"i","reason":{"type":"x","reason":"y"}}]},"hits":{"hits":[]}}`), int64(4), int64(9), uint8(3), uint8(0))
	f.Add([]byte(`{"error":{"root_cause":[{"type":"index_not_found_exception","reason":"no such index [i]"}],"type":"index_not_found_exception","reason":"no such index [i]"},"status":404}`), int64(4), int64(9), uint8(3), uint8(8))
	f.Add([]byte(`{"error":"text","status":429}`), int64(4), int64(9), uint8(3), uint8(9))
	f.Add([]byte(`<html>502 Bad Gateway</html>`), int64(4), int64(9), uint8(3), uint8(0))
	f.Add([]byte(``), int64(4), int64(9), uint8(3), uint8(10))
	f.Add([]byte(`null`), int64(4), int64(9), uint8(3), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, after, upTo int64, size, statusSel uint8) {
		c := cannedClient(t)
		status := fuzzStatuses[int(statusSel)%len(fuzzStatuses)]
		p := ShardPage{Index: "i", Shard: 0, After: after, UpTo: upTo, Size: int(size)}
		hits, err := c.SearchShard(withAnswer(context.Background(), status, body), p)
		if err != nil {
			if hits != nil {
				t.Fatalf("an error (%v) came with %d hits", err, len(hits))
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if !strings.HasPrefix(err.Error(), "search shard 0 of i: ") {
				t.Fatalf("error %q does not say what was attempted", err)
			}
			switch {
			case status >= 300:
				if e.Status != status {
					t.Fatalf("HTTP %d became an *Error with status %d", status, e.Status)
				}
				if want := status == 429 || status >= 500; e.Temporary() != want {
					t.Fatalf("HTTP %d: Temporary() = %v", status, e.Temporary())
				}
				if (status == 401 || status == 403) != errors.Is(err, ErrUnauthorized) {
					t.Fatalf("HTTP %d: ErrUnauthorized %v", status, errors.Is(err, ErrUnauthorized))
				}
			case !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrPartial):
				t.Fatalf("a %d answer was refused with %v: want ErrMalformed or ErrPartial", status, err)
			}
			return
		}
		if status >= 300 {
			t.Fatalf("HTTP %d was taken for a page", status)
		}
		if len(hits) > p.Size {
			t.Fatalf("%d hits for size %d", len(hits), p.Size)
		}
		last := after
		for i, h := range hits {
			if h.SeqNo <= last || h.SeqNo > upTo {
				t.Fatalf("hit %d: _seq_no %d after %d, outside (%d, %d]", i, h.SeqNo, last, after, upTo)
			}
			last = h.SeqNo
			if h.ID == "" {
				t.Fatalf("hit %d has no _id", i)
			}
			if !json.Valid(h.Source) || string(h.Source) == "null" {
				t.Fatalf("hit %d: _source %q is not a document", i, h.Source)
			}
		}
		var r struct {
			Hits struct {
				Hits []json.RawMessage `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("accepted an answer that does not decode: %v", err)
		}
		if len(r.Hits.Hits) != len(hits) {
			t.Fatalf("the answer lists %d hits, SearchShard returned %d", len(r.Hits.Hits), len(hits))
		}
	})
}

// esURLTexts is the fixed text of the URL errors: a password that is a
// substring of it proves nothing.
const esURLTexts = `bad Elasticsearch URL: (want http://host:9200 or https://host:9200) scheme no host (want http://host:9200) ` +
	`invalid URL escape invalid port after host invalid character in host name net/url: invalid userinfo invalid control character in URL ` +
	`missing protocol scheme first path segment in URL cannot contain colon Elasticsearch client for xxxxx`

// FuzzConfig: Config.Validate and New never panic; an accepted URL is
// http(s) with a host, New accepts it, and its redacted form (URLs, what
// messages show) is still a valid URL. In a URL prefix + user + ":" +
// password + "@" + rest, the password never shows in an error or in URLs,
// however the URL around it is broken (no scheme, a '/' or '@' in the
// password, a bad port).
func FuzzConfig(f *testing.F) {
	f.Add("http://localhost:9200", "http://", "elastic", "s3cr3t-pw", "localhost:9200")
	f.Add("https://elastic:changeme@es.example.com:9243/prefix/", "https://", "elastic", "p@ssw0rd", "es:9200")
	f.Add("http://[::1]:9200", "https://", "elastic", "with space", "es:9200")
	f.Add("localhost:9200", "http://", "elastic", "Abc/Def+ghi==", "es:9200")
	f.Add("ftp://h", "http://", "elastic", "1234/5678", "es/")
	f.Add("http://", "http://", "elastic", "bad%zzescape", "es")
	f.Add("http://h:port", "http://", "elastic", "s3cr3t-pw", "es:port")
	f.Add("http://h%zz", "://", "elastic", "s3cr3t-pw", "es")
	f.Add("", "http://", "elastic", "@leading-at", "es")
	f.Add("http://u:p@ss word@h", "http://", "u:x", "s3cr3t-pw", "h#frag")
	f.Add("https://üñí.example", "", "elastic", "s3cr3t-pw", "es:9200")
	f.Add("http://h/", "http:", "elastic", "s3cr3t-pw", "es:9200")
	f.Fuzz(func(t *testing.T, raw, prefix, user, pass, rest string) {
		// Any URL.
		if err := (Config{URLs: []string{raw}}).Validate(); err == nil {
			u, _ := url.Parse(raw)
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("Validate accepted %q", raw)
			}
			c, err := New(Config{URLs: []string{raw}})
			if err != nil {
				t.Fatalf("Validate accepted %q, New refused it: %v", raw, err)
			}
			if err := (Config{URLs: []string{c.URLs()}}).Validate(); err != nil {
				t.Fatalf("%q is valid, its redacted form %q is not: %v", raw, c.URLs(), err)
			}
		}

		// A URL with a password.
		withPass := prefix + user + ":" + pass + "@" + rest
		around := prefix + user + ":" + "@" + rest
		around += strconv.Quote(around) // what %q makes of it: "\x00" + "00" has "0000"
		leak := func(where, s string) {
			cands := []string{pass, url.PathEscape(pass), url.QueryEscape(pass)}
			if dec, err := url.PathUnescape(pass); err == nil {
				cands = append(cands, dec)
			}
			for _, p := range cands {
				if len(p) >= 4 && !strings.Contains(around, p) && !strings.Contains(esURLTexts, p) && strings.Contains(s, p) {
					t.Fatalf("password %q of %q shows in %s: %s", pass, withPass, where, s)
				}
			}
		}
		if err := (Config{URLs: []string{withPass}}).Validate(); err != nil {
			leak("the Validate error", err.Error())
			return
		}
		c, err := New(Config{URLs: []string{withPass}})
		if err != nil {
			leak("the New error", err.Error())
			return
		}
		leak("URLs()", c.URLs())
	})
}
