package esemu_test

// The emulator's conformance suite: the cases of Elasticsearch's own REST YAML
// tests (rest-api-spec/src/yamlRestTest/resources/rest-api-spec/test/, the
// data_stream module's tests, and OpenSearch's pit/10_basic.yml) rewritten as
// Go tests over net/http. Every subtest is named "<api>/<file>: <YAML test
// name>" and every failure message starts with that name, so a failure points
// at the YAML case it comes from.
//
// The emulator is loud about what it does not model. Where a YAML case relies
// on something unmodeled (a match query on a source field, a sort on a source
// field such as age or foo, slicing, msearch, docvalue_fields), the case is
// rewritten with an equivalent the emulator models (match_all, ids, term on
// _id; sort on _seq_no; search_after on _seq_no values) and the unmodeled
// original is asserted to get the loud 400 ("esemu does not model ...").
//
// ES-flavor cases run against es-7, es-8 and es-9 where the YAML's version
// gate allows; es-7 documents and hits carry "_type": "_doc".

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// confESFlavors are the Elasticsearch flavors the ES YAML tests run against.
var confESFlavors = []esemu.Flavor{esemu.FlavorES7, esemu.FlavorES8, esemu.FlavorES9}

// confOSFlavors are the OpenSearch flavors.
var confOSFlavors = []esemu.Flavor{esemu.FlavorOpenSearch2, esemu.FlavorOpenSearch3}

// confAllFlavors is every flavor.
var confAllFlavors = append(append([]esemu.Flavor{}, confESFlavors...), confOSFlavors...)

type (
	confObj = map[string]any
	confArr = []any
)

// confEach runs fn as a parallel subtest per flavor.
func confEach(t *testing.T, flavors []esemu.Flavor, fn func(t *testing.T, f esemu.Flavor)) {
	t.Helper()
	for _, f := range flavors {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			fn(t, f)
		})
	}
}

// confCase is one YAML test (or its setup) run against an emulated cluster.
// src names the YAML test; every failure message starts with it.
type confCase struct {
	tb     testing.TB
	src    string
	flavor esemu.Flavor
	url    string
	hc     *http.Client
}

// confStart starts a fresh cluster of the flavor, closed when tb ends.
func confStart(tb testing.TB, f esemu.Flavor, src string) *confCase {
	tb.Helper()
	cl, err := esemu.New(esemu.Config{Flavor: f})
	if err != nil {
		tb.Fatalf("%s: start a %s cluster: %v", src, f, err)
	}
	tb.Cleanup(func() {
		if err := cl.Close(); err != nil {
			tb.Errorf("%s: close the %s cluster: %v", src, f, err)
		}
	})
	return &confCase{tb: tb, src: src, flavor: f, url: cl.URL(), hc: &http.Client{Timeout: 30 * time.Second}}
}

// sub is the same cluster seen from another (sub)test and YAML test name.
func (c *confCase) sub(tb testing.TB, src string) *confCase {
	tb.Helper()
	d := *c
	d.tb, d.src = tb, src
	return &d
}

func (c *confCase) es7() bool { return c.flavor == esemu.FlavorES7 }

// confResp is a response: status, raw body and the body decoded with
// json.Number numbers (nil when it is not JSON).
type confResp struct {
	req    string
	status int
	raw    []byte
	body   any
}

// do sends a request. body is nil, a string sent as is (NDJSON for _bulk),
// or a value sent as JSON.
func (c *confCase) do(method, path string, body any) confResp {
	c.tb.Helper()
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
		if strings.Contains(path, "_bulk") {
			ctype = "application/x-ndjson"
		}
	default:
		data, err := json.Marshal(b)
		if err != nil {
			c.tb.Fatalf("%s: encode the body of %s %s: %v", c.src, method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.tb.Fatalf("%s: build %s %s: %v", c.src, method, path, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.tb.Fatalf("%s: %s %s: %v", c.src, method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.tb.Fatalf("%s: read the response to %s %s: %v", c.src, method, path, err)
	}
	r := confResp{req: method + " " + path, status: resp.StatusCode, raw: raw}
	if len(bytes.TrimSpace(raw)) > 0 {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&r.body); err != nil {
			r.body = nil
		}
	}
	return r
}

// must sends a setup request the YAML test expects to succeed, and stops the
// test when it does not.
func (c *confCase) must(method, path string, body any) confResp {
	c.tb.Helper()
	r := c.do(method, path, body)
	if r.status < 200 || r.status >= 300 {
		c.tb.Fatalf("%s: setup %s: status %d, want 2xx\n  response: %s", c.src, r.req, r.status, confShort(r.raw))
	}
	return r
}

func (c *confCase) fail(r confResp, format string, args ...any) {
	c.tb.Helper()
	c.tb.Errorf("%s: %s: %s\n  response %d: %s", c.src, r.req, fmt.Sprintf(format, args...), r.status, confShort(r.raw))
}

// status asserts the HTTP status.
func (c *confCase) status(r confResp, want int) bool {
	c.tb.Helper()
	if r.status != want {
		c.fail(r, "HTTP status = %d, want %d", r.status, want)
		return false
	}
	return true
}

// match asserts the value at a dotted path ("hits.hits.0._id") equals want,
// compared as JSON.
func (c *confCase) match(r confResp, path string, want any) {
	c.tb.Helper()
	got, ok := confLookup(r.body, path)
	if !ok {
		c.fail(r, "%s is missing, want %s", path, confJSON(confNormalize(want)))
		return
	}
	if w := confNormalize(want); !reflect.DeepEqual(got, w) {
		c.fail(r, "%s = %s, want %s", path, confJSON(got), confJSON(w))
	}
}

// matchRe asserts the string at path matches the pattern.
func (c *confCase) matchRe(r confResp, path, pattern string) {
	c.tb.Helper()
	got, _ := confLookup(r.body, path)
	s, ok := got.(string)
	if !ok || !regexp.MustCompile(pattern).MatchString(s) {
		c.fail(r, "%s = %s, want a match of /%s/", path, confJSON(got), pattern)
	}
}

// isTrue is the YAML runner's is_true: present, not null, and not "", false
// or 0.
func (c *confCase) isTrue(r confResp, path string) {
	c.tb.Helper()
	got, ok := confLookup(r.body, path)
	if !ok || got == nil || confFalsy(got) {
		c.fail(r, "%s = %s, want a true value (is_true)", path, confJSON(got))
	}
}

// isFalse is the YAML runner's is_false: missing, null, "", false or 0.
func (c *confCase) isFalse(r confResp, path string) {
	c.tb.Helper()
	got, ok := confLookup(r.body, path)
	if ok && got != nil && !confFalsy(got) {
		c.fail(r, "%s = %s, want it absent or false (is_false)", path, confJSON(got))
	}
}

// absent asserts the key at path does not exist at all.
func (c *confCase) absent(r confResp, path string) {
	c.tb.Helper()
	if got, ok := confLookup(r.body, path); ok {
		c.fail(r, "%s = %s, want no such field", path, confJSON(got))
	}
}

// length asserts the number of elements of the array or object at path.
func (c *confCase) length(r confResp, path string, want int) {
	c.tb.Helper()
	got, _ := confLookup(r.body, path)
	n := -1
	switch x := got.(type) {
	case []any:
		n = len(x)
	case map[string]any:
		n = len(x)
	}
	if n != want {
		c.fail(r, "length of %s = %d (%s), want %d", path, n, confJSON(got), want)
	}
}

// gte asserts the number at path is >= min; gt that it is > min.
func (c *confCase) gte(r confResp, path string, min float64) {
	c.tb.Helper()
	if n, ok := confNumber(r.body, path); !ok || n < min {
		c.fail(r, "%s = %v, want >= %v", path, n, min)
	}
}

func (c *confCase) gt(r confResp, path string, min float64) {
	c.tb.Helper()
	if n, ok := confNumber(r.body, path); !ok || n <= min {
		c.fail(r, "%s = %v, want > %v", path, n, min)
	}
}

// esError asserts an error response in ES's shape: the HTTP status, the
// body's status, error.type and (when not empty) error.reason.
func (c *confCase) esError(r confResp, status int, typ, reason string) {
	c.tb.Helper()
	c.status(r, status)
	c.match(r, "status", status)
	c.match(r, "error.type", typ)
	if reason != "" {
		c.match(r, "error.reason", reason)
	}
}

// notModeled asserts the emulator's loud refusal of something it does not
// model: HTTP 400, illegal_argument_exception, reason "esemu does not model ...".
func (c *confCase) notModeled(r confResp) {
	c.tb.Helper()
	c.status(r, http.StatusBadRequest)
	c.match(r, "error.type", "illegal_argument_exception")
	got, _ := confLookup(r.body, "error.reason")
	if s, _ := got.(string); !strings.HasPrefix(s, "esemu does not model") {
		c.fail(r, "error.reason = %s, want the loud \"esemu does not model ...\"", confJSON(got))
	}
}

// docType asserts "_type": "_doc" on es-7 and no _type on later versions.
func (c *confCase) docType(r confResp, path string) {
	c.tb.Helper()
	if c.es7() {
		c.match(r, path, "_doc")
	} else {
		c.absent(r, path)
	}
}

// str returns the non-empty string at path (the YAML runner's set), or stops
// the test.
func (c *confCase) str(r confResp, path string) string {
	c.tb.Helper()
	got, _ := confLookup(r.body, path)
	s, ok := got.(string)
	if !ok || s == "" {
		c.tb.Fatalf("%s: %s: %s = %s, want a non-empty string\n  response %d: %s", c.src, r.req, path, confJSON(got), r.status, confShort(r.raw))
	}
	return s
}

// num returns the integer at path, or stops the test.
func (c *confCase) num(r confResp, path string) int64 {
	c.tb.Helper()
	got, _ := confLookup(r.body, path)
	n, ok := got.(json.Number)
	v, err := n.Int64()
	if !ok || err != nil {
		c.tb.Fatalf("%s: %s: %s = %s, want an integer\n  response %d: %s", c.src, r.req, path, confJSON(got), r.status, confShort(r.raw))
	}
	return v
}

func confLookup(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, key := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[key]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func confNumber(v any, path string) (float64, bool) {
	got, _ := confLookup(v, path)
	n, ok := got.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// confFalsy is the YAML runner's notion of false: "", "false" or "0" once
// printed.
func confFalsy(v any) bool {
	switch x := v.(type) {
	case bool:
		return !x
	case string:
		return x == "" || strings.EqualFold(x, "false") || x == "0"
	case json.Number:
		return x.String() == "0"
	}
	return false
}

// confNormalize turns a Go value into what decoding its JSON gives, so it
// compares equal to a decoded response value.
func confNormalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("unencodable %T", v)
	}
	var out any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return fmt.Sprintf("undecodable %s", b)
	}
	return out
}

func confJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

func confShort(raw []byte) string {
	const max = 1500
	if len(raw) > max {
		return string(raw[:max]) + "..."
	}
	return string(raw)
}

// confBulk joins NDJSON lines into a bulk body ending in a newline.
func confBulk(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// ---------------------------------------------------------------------------
// indices.stats

func TestConformance_IndicesStats10Index(t *testing.T) {
	const file = "indices.stats/10_index"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test1", confObj{"settings": confObj{"number_of_shards": 5, "number_of_replicas": 1}})
		c.must("PUT", "/test2", confObj{"settings": confObj{"number_of_shards": 4, "number_of_replicas": 1}})
		c.must("PUT", "/test1/_doc/1", confObj{"foo": "bar"})
		c.must("PUT", "/test2/_doc/1", confObj{"foo": "baz"})
		tests := []struct {
			name         string
			path         string
			total        int
			test1, test2 bool
		}{
			{name: "Index - blank", path: "/_stats", total: 18, test1: true, test2: true},
			{name: "Index - all", path: "/_all/_stats", total: 18, test1: true, test2: true},
			{name: "Index - star", path: "/*/_stats", total: 18, test1: true, test2: true},
			{name: "Index - star, no match", path: "/bla*/_stats", total: 0},
			{name: "Index - one index", path: "/test1/_stats", total: 10, test1: true},
			{name: "Index - multi-index", path: "/test1,test2/_stats", total: 18, test1: true, test2: true},
			{name: "Index - pattern", path: "/*2/_stats", total: 8, test2: true},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("GET", tt.path, nil)
				c.status(r, http.StatusOK)
				c.match(r, "_shards.total", tt.total)
				c.isTrue(r, "_all")
				for _, ix := range []struct {
					name string
					want bool
				}{{"test1", tt.test1}, {"test2", tt.test2}} {
					if ix.want {
						c.isTrue(r, "indices."+ix.name)
						c.isTrue(r, "indices."+ix.name+".uuid")
					} else {
						c.isFalse(r, "indices."+ix.name)
					}
				}
			})
		}
		t.Run(file+": Indices stats unrecognized parameter", func(t *testing.T) {
			c := c.sub(t, file+": Indices stats unrecognized parameter")
			r := c.do("GET", "/_stats/fieldata", nil)
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception",
				"request [/_stats/fieldata] contains unrecognized metric: [fieldata] -> did you mean [fielddata]?")
		})
	})
}

func TestConformance_IndicesStats11Metric(t *testing.T) {
	const file = "indices.stats/11_metric"
	all := []string{"docs", "store", "indexing", "get", "search", "merges", "refresh", "flush", "warmer",
		"query_cache", "fielddata", "completion", "segments", "translog", "recovery"}
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test1/_doc/1", confObj{"foo": "bar"})
		c.must("PUT", "/test2/_doc/1", confObj{"foo": "baz"})
		tests := []struct {
			name      string
			path      string
			want      []string
			fileSizes bool
		}{
			{name: "Metric - blank", path: "/_stats", want: all},
			{name: "Metric - _all", path: "/_stats/_all", want: all},
			{name: "Metric - one", path: "/_stats/docs", want: []string{"docs"}},
			// The REST metric is "merge"; the section it selects is "merges".
			{name: "Metric - multi", path: "/_stats/store,get,merge", want: []string{"store", "get", "merges"}},
			{name: "Metric - recovery", path: "/_stats/recovery", want: []string{"recovery"}},
			{name: "Metric - _all include_segment_file_sizes", path: "/_stats/_all?include_segment_file_sizes=true", want: all, fileSizes: true},
			{name: "Metric - segments include_segment_file_sizes", path: "/_stats/segments?include_segment_file_sizes=true", want: []string{"segments"}, fileSizes: true},
			{name: "Metric - _all include_unloaded_segments", path: "/_stats/_all?include_unloaded_segments=true", want: all},
			{name: "Metric - segments include_unloaded_segments", path: "/_stats/segments?include_unloaded_segments=true", want: []string{"segments"}},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("GET", tt.path, nil)
				c.status(r, http.StatusOK)
				want := map[string]bool{}
				for _, m := range tt.want {
					want[m] = true
				}
				for _, m := range all {
					if want[m] {
						c.isTrue(r, "_all.total."+m)
					} else {
						c.isFalse(r, "_all.total."+m)
					}
				}
				if tt.fileSizes {
					c.isTrue(r, "_all.total.segments.file_sizes")
				}
			})
		}
		// Not a YAML case, but the same rule the YAML relies on: the REST
		// metric name is "merge" (CommonStatsFlags.Flag.Merge), so "merges"
		// is unrecognized, with ES's suggestion.
		t.Run(file+": metric merges is unrecognized", func(t *testing.T) {
			c := c.sub(t, file+": metric merges is unrecognized")
			r := c.do("GET", "/_stats/merges", nil)
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception",
				"request [/_stats/merges] contains unrecognized metric: [merges] -> did you mean [merge]?")
		})
	})
}

func TestConformance_IndicesStats12Level(t *testing.T) {
	const file = "indices.stats/12_level"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test1/_doc/1", confObj{"foo": "bar"})
		c.must("PUT", "/test2/_doc/1", confObj{"foo": "baz"})
		tests := []struct {
			name    string
			path    string
			indices bool
			shards  bool
		}{
			{name: "Level - blank", path: "/_stats", indices: true},
			{name: "Level - indices", path: "/_stats?level=indices", indices: true},
			{name: "Level - cluster", path: "/_stats?level=cluster"},
			{name: "Level - shards", path: "/_stats?level=shards", indices: true, shards: true},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("GET", tt.path, nil)
				c.status(r, http.StatusOK)
				c.isTrue(r, "_all.total.docs")
				if !tt.indices {
					c.isFalse(r, "indices")
					return
				}
				for _, ix := range []string{"test1", "test2"} {
					c.isTrue(r, "indices."+ix+".total.docs")
					if tt.shards {
						c.isTrue(r, "indices."+ix+".shards")
						c.isTrue(r, "indices."+ix+".shards.0.0.commit.id")
					} else {
						c.isFalse(r, "indices."+ix+".shards")
					}
				}
			})
		}
		t.Run(file+": an unknown level is refused", func(t *testing.T) {
			c := c.sub(t, file+": an unknown level is refused")
			r := c.do("GET", "/_stats?level=bogus", nil)
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception",
				"level parameter must be one of [cluster] or [indices] or [shards] but was [bogus]")
		})
	})
}

func TestConformance_IndicesStats15OpenClosedState(t *testing.T) {
	const file = "indices.stats/15_open_closed_state"
	const name = file + ": Ensure index state is exposed"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			c.must("PUT", "/openindex", nil)
			c.must("PUT", "/closedindex", nil)
			c.must("POST", "/closedindex/_close", nil)
			r := c.do("GET", "/_stats?expand_wildcards=open,closed&forbid_closed_indices=false", nil)
			c.status(r, http.StatusOK)
			c.isTrue(r, "indices.closedindex.uuid")
			if c.es7() {
				// The YAML requires 8.1+: 7.x stats carry no index state.
				c.absent(r, "indices.openindex.status")
				c.absent(r, "indices.closedindex.status")
				return
			}
			c.match(r, "indices.openindex.status", "open")
			c.match(r, "indices.closedindex.status", "close")
		})
	})
}

// ---------------------------------------------------------------------------
// search: sequence numbers

func TestConformance_Search300SequenceNumbers(t *testing.T) {
	const file = "search/300_sequence_numbers"
	// The YAML queries {"match": {"foo": "bar"}}. The emulator does not model
	// match queries; {"term": {"_id": "1"}} selects the same document.
	query := confObj{"term": confObj{"_id": "1"}}
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test_1", nil)
		c.must("PUT", "/test_1/_doc/1", confObj{"foo": "foo"})
		c.must("PUT", "/test_1/_doc/1", confObj{"foo": "bar"})
		c.must("POST", "/test_1/_refresh", nil)

		t.Run(file+": match on a source field is not modeled", func(t *testing.T) {
			c := c.sub(t, file+": match on a source field is not modeled")
			r := c.do("POST", "/_all/_search", confObj{"query": confObj{"match": confObj{"foo": "bar"}}, "seq_no_primary_term": true})
			c.notModeled(r)
		})
		tests := []struct {
			name   string
			path   string
			body   confObj
			wantSN bool
		}{
			{name: "sequence numbers are returned if requested from body", path: "/_all/_search",
				body: confObj{"query": query, "seq_no_primary_term": true}, wantSN: true},
			{name: "sequence numbers are returned if requested from url", path: "/_all/_search?seq_no_primary_term=true",
				body: confObj{"query": query}, wantSN: true},
			{name: "sequence numbers are not returned if not requested", path: "/_all/_search",
				body: confObj{"query": query}},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("POST", tt.path, tt.body)
				c.status(r, http.StatusOK)
				c.match(r, "hits.hits.0._id", "1")
				c.docType(r, "hits.hits.0._type")
				if tt.wantSN {
					c.match(r, "hits.hits.0._seq_no", 1)
					c.gte(r, "hits.hits.0._primary_term", 1)
				} else {
					c.isFalse(r, "hits.hits.0._seq_no")
					c.isFalse(r, "hits.hits.0._primary_term")
				}
			})
		}
	})
}

func TestConformance_Search310SequenceNumbersDisabled(t *testing.T) {
	const file = "search/310_sequence_numbers_disabled"
	settings := confObj{"settings": confObj{
		"index.disable_sequence_numbers": true,
		"index.seq_no.index_options":     "doc_values_only",
		"index.number_of_shards":         1,
	}}
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		if f != esemu.FlavorES9 {
			// The YAML is gated on the disable_sequence_numbers capability
			// (ES 9.4+): before it, the setting does not exist.
			name := file + ": the setting is unknown before 9.4"
			t.Run(name, func(t *testing.T) {
				c := confStart(t, f, name)
				r := c.do("PUT", "/test", settings)
				c.esError(r, http.StatusBadRequest, "illegal_argument_exception",
					"unknown setting [index.disable_sequence_numbers] please check that any required plugins are installed, or check the breaking changes documentation for removed settings")
			})
			return
		}
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test", settings)
		c.must("PUT", "/test/_doc/1", confObj{"foo": "bar"})
		c.must("POST", "/test/_refresh", nil)
		const queryReason = "failed to create query: Cannot query field [_seq_no]: _seq_no cannot be queried when [index.disable_sequence_numbers] is [true]"
		tests := []struct {
			name       string
			body       confObj
			rootType   string
			rootReason string
		}{
			{name: "term query on _seq_no is rejected", body: confObj{"query": confObj{"term": confObj{"_seq_no": 0}}},
				rootType: "query_shard_exception", rootReason: queryReason},
			{name: "range query on _seq_no is rejected", body: confObj{"query": confObj{"range": confObj{"_seq_no": confObj{"gte": 0}}}},
				rootType: "query_shard_exception", rootReason: queryReason},
			{name: "sort by _seq_no is rejected", body: confObj{"sort": confArr{confObj{"_seq_no": "asc"}}},
				rootType:   "illegal_argument_exception",
				rootReason: "Cannot query field [_seq_no]: _seq_no cannot be queried when [index.disable_sequence_numbers] is [true]"},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("POST", "/test/_search", tt.body)
				c.status(r, http.StatusBadRequest)
				c.match(r, "error.root_cause.0.type", tt.rootType)
				c.match(r, "error.root_cause.0.reason", tt.rootReason)
			})
		}
		// The YAML (ES main) wants _seq_no and _primary_term absent from
		// the bulk items; Elasticsearch 9.5.3 writes them as -2 and 0
		// (testdata/golden/elasticsearch-9/61-noseq-bulk.json), and the
		// emulator answers as 9.5.
		t.Run(file+": bulk response carries unassigned _seq_no and _primary_term", func(t *testing.T) {
			c := c.sub(t, file+": bulk response carries unassigned _seq_no and _primary_term")
			r := c.do("POST", "/_bulk?refresh=true", confBulk(
				`{"index":{"_index":"test","_id":"2"}}`, `{"foo":"baz"}`,
				`{"index":{"_index":"test","_id":"3"}}`, `{"foo":"qux"}`))
			c.status(r, http.StatusOK)
			c.match(r, "errors", false)
			for _, i := range []string{"0", "1"} {
				c.match(r, "items."+i+".index._seq_no", -2)
				c.match(r, "items."+i+".index._primary_term", 0)
			}
		})
	})
}

// ---------------------------------------------------------------------------
// search: point in time and search_after

// The 350 and 90 YAML tests query {"match": {"foo": "bar"}} (every document)
// and sort on [{age: desc}, {id: desc}]. The emulator models neither a match
// query nor a sort on a source field: the rewrites use match_all and sort on
// _seq_no, descending, and page with search_after on _seq_no values. Docs
// 1, 42 and 172 are indexed in that order, so they have seq nos 0, 1 and 2
// and _seq_no desc returns them in the YAML's order (172, 42, 1).
var (
	confAgeSort    = confArr{confObj{"age": "desc"}, confObj{"id": "desc"}}
	confSeqNoDesc  = confArr{confObj{"_seq_no": "desc"}}
	confMatchFooQ  = confObj{"match": confObj{"foo": "bar"}}
	confMatchAllQ  = confObj{"match_all": confObj{}}
	confPITSetupES = []struct {
		index, id string
		body      confObj
	}{
		{"test", "1", confObj{"id": 1, "foo": "bar", "age": 18}},
		{"test", "42", confObj{"id": 42, "foo": "bar", "age": 18}},
		{"test", "172", confObj{"id": 172, "foo": "bar", "age": 24}},
		{"test2", "45", confObj{"id": 45, "foo": "bar", "age": 19}},
	}
)

// confPITSetup is the setup of search/350_point_in_time.
func confPITSetup(tb testing.TB, f esemu.Flavor, src string) *confCase {
	tb.Helper()
	c := confStart(tb, f, src)
	c.must("PUT", "/test", nil)
	c.must("PUT", "/test2", nil)
	for _, d := range confPITSetupES {
		c.must("PUT", "/"+d.index+"/_doc/"+d.id, d.body)
	}
	c.must("POST", "/test*/_refresh", nil)
	return c
}

func TestConformance_Search350PointInTime(t *testing.T) {
	const file = "search/350_point_in_time"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(file+": basic", func(t *testing.T) {
			c := confPITSetup(t, f, file+": basic")
			r := c.do("POST", "/test/_pit?keep_alive=5m", nil)
			c.status(r, http.StatusOK)
			pit := c.str(r, "id")
			if !c.es7() {
				c.match(r, "_shards.failed", 0)
			}

			// The original request, loud.
			r = c.do("POST", "/_search", confObj{"size": 1, "query": confMatchFooQ, "sort": confAgeSort,
				"pit": confObj{"id": pit, "keep_alive": "1m"}})
			c.notModeled(r)
			r = c.do("POST", "/_search", confObj{"size": 1, "query": confMatchAllQ, "sort": confAgeSort,
				"pit": confObj{"id": pit, "keep_alive": "1m"}})
			c.notModeled(r)

			r = c.do("POST", "/_search", confObj{"size": 1, "query": confMatchAllQ, "sort": confSeqNoDesc,
				"pit": confObj{"id": pit, "keep_alive": "1m"}})
			c.status(r, http.StatusOK)
			c.isTrue(r, "pit_id")
			c.match(r, "hits.total.value", 3)
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._index", "test")
			c.match(r, "hits.hits.0._id", "172")
			c.match(r, "hits.hits.0.sort.0", 2)
			// Without search_after, ES adds the _shard_doc tiebreaker.
			c.length(r, "hits.hits.0.sort", 2)

			// A document indexed after the PIT opened stays invisible to it.
			c.must("PUT", "/test/_doc/100", confObj{"id": 100, "foo": "bar", "age": 23})
			c.must("POST", "/test/_refresh", nil)

			pages := []struct {
				after  int
				wantID string
				sort0  int
			}{{after: 2, wantID: "42", sort0: 1}, {after: 1, wantID: "1", sort0: 0}, {after: 0}}
			for _, p := range pages {
				// search_after gives one value for one sort: ES then adds no
				// tiebreaker (SearchRequest.rewrite).
				r = c.do("POST", "/_search", confObj{"size": 1, "query": confMatchAllQ, "sort": confSeqNoDesc,
					"search_after": confArr{p.after}, "pit": confObj{"id": pit}})
				c.status(r, http.StatusOK)
				c.match(r, "hits.total.value", 3)
				if p.wantID == "" {
					c.length(r, "hits.hits", 0)
					continue
				}
				c.length(r, "hits.hits", 1)
				c.match(r, "hits.hits.0._index", "test")
				c.match(r, "hits.hits.0._id", p.wantID)
				c.match(r, "hits.hits.0.sort", confArr{p.sort0})
			}

			r = c.do("DELETE", "/_pit", confObj{"id": pit})
			c.status(r, http.StatusOK)
			c.match(r, "succeeded", true)
			c.match(r, "num_freed", 1)
		})

		t.Run(file+": point-in-time with slicing", func(t *testing.T) {
			c := confPITSetup(t, f, file+": point-in-time with slicing")
			pit := c.str(c.must("POST", "/test/_pit?keep_alive=5m", nil), "id")
			r := c.do("POST", "/_search", confObj{"slice": confObj{"id": 0, "max": 2}, "size": 1,
				"query": confMatchAllQ, "sort": confSeqNoDesc, "pit": confObj{"id": pit}})
			c.notModeled(r)
			c.must("DELETE", "/_pit", confObj{"id": pit})
		})

		t.Run(file+": wildcard", func(t *testing.T) {
			c := confPITSetup(t, f, file+": wildcard")
			pit := c.str(c.must("POST", "/t*/_pit?keep_alive=5m", nil), "id")
			// By age desc the YAML gets 172 (test) then 45 (test2). By
			// _seq_no desc the first page is 172 and 42 (seq 2 and 1), and
			// the second, after the first page's full sort values, reaches
			// test2's 45 behind test's 1 (both seq 0; the _shard_doc
			// tiebreaker puts test's shard first).
			r := c.do("POST", "/_search", confObj{"size": 2, "query": confMatchAllQ, "sort": confSeqNoDesc,
				"pit": confObj{"id": pit, "keep_alive": "1m"}})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total.value", 4)
			c.length(r, "hits.hits", 2)
			c.match(r, "hits.hits.0._index", "test")
			c.match(r, "hits.hits.0._id", "172")
			c.match(r, "hits.hits.1._index", "test")
			c.match(r, "hits.hits.1._id", "42")
			last, _ := confLookup(r.body, "hits.hits.1.sort")
			r = c.do("POST", "/_search", confObj{"size": 2, "query": confMatchAllQ, "sort": confSeqNoDesc,
				"search_after": last, "pit": confObj{"id": pit}})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total.value", 4)
			c.length(r, "hits.hits", 2)
			c.match(r, "hits.hits.0._index", "test")
			c.match(r, "hits.hits.0._id", "1")
			c.match(r, "hits.hits.1._index", "test2")
			c.match(r, "hits.hits.1._id", "45")
			c.must("DELETE", "/_pit", confObj{"id": pit})
		})

		t.Run(file+": msearch", func(t *testing.T) {
			c := confPITSetup(t, f, file+": msearch")
			pit := c.str(c.must("POST", "/t*/_pit?keep_alive=5m", nil), "id")
			r := c.do("POST", "/_msearch", confBulk(`{}`, `{"query":{"match_all":{}},"pit":{"id":"`+pit+`"}}`))
			c.notModeled(r)
			// The YAML's second msearch names an index next to a PIT, a
			// bad_request; the same holds for a single search.
			r = c.do("POST", "/test/_search", confObj{"query": confMatchAllQ, "pit": confObj{"id": pit}})
			c.esError(r, http.StatusBadRequest, "action_request_validation_exception",
				"Validation Failed: 1: [indices] cannot be used with point in time. Do not specify any index with point in time.;")
			c.must("DELETE", "/_pit", confObj{"id": pit})
		})
	})
}

func TestConformance_Search90SearchAfter(t *testing.T) {
	const file = "search/90_search_after"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(file+": search with search_after parameter", func(t *testing.T) {
			c := confStart(t, f, file+": search with search_after parameter")
			c.must("PUT", "/test", nil)
			for _, d := range confPITSetupES[:3] {
				c.must("PUT", "/test/_doc/"+d.id, d.body)
			}
			c.must("POST", "/test/_refresh", nil)
			const path = "/test/_search?rest_total_hits_as_int=true"

			r := c.do("POST", path, confObj{"size": 1, "query": confMatchFooQ, "sort": confAgeSort})
			c.notModeled(r)
			r = c.do("POST", path, confObj{"size": 1, "query": confMatchAllQ, "sort": confAgeSort})
			c.notModeled(r)

			pages := []struct {
				after  confArr
				wantID string
				sort   int
			}{{wantID: "172", sort: 2}, {after: confArr{2}, wantID: "42", sort: 1},
				{after: confArr{1}, wantID: "1", sort: 0}, {after: confArr{0}}}
			for _, p := range pages {
				body := confObj{"size": 1, "query": confMatchAllQ, "sort": confSeqNoDesc}
				if p.after != nil {
					body["search_after"] = p.after
				}
				r = c.do("POST", path, body)
				c.status(r, http.StatusOK)
				c.match(r, "hits.total", 3)
				if p.wantID == "" {
					c.length(r, "hits.hits", 0)
					continue
				}
				c.length(r, "hits.hits", 1)
				c.match(r, "hits.hits.0._index", "test")
				c.docType(r, "hits.hits.0._type")
				c.match(r, "hits.hits.0._id", p.wantID)
				c.match(r, "hits.hits.0.sort", confArr{p.sort})
			}
		})

		t.Run(file+": date", func(t *testing.T) {
			// Sorting on a date field of the source is not modeled.
			c := confStart(t, f, file+": date")
			c.must("PUT", "/test", confObj{"mappings": confObj{"properties": confObj{
				"timestamp": confObj{"type": "date", "format": "yyyy-MM-dd HH:mm:ss.SSS"}}}})
			c.must("POST", "/test/_bulk?refresh=true", confBulk(`{"index":{}}`, `{"timestamp":"2019-10-21 00:30:04.828"}`,
				`{"index":{}}`, `{"timestamp":"2019-10-21 08:30:04.828"}`))
			r := c.do("POST", "/test/_search?rest_total_hits_as_int=true", confObj{"size": 1, "sort": confArr{confObj{"timestamp": "desc"}}})
			c.notModeled(r)
		})

		// Not a YAML case: a sort on _score with a plain order string
		// ({"_score": "asc"}) is valid SortBuilder syntax.
		t.Run(file+": sort on _score with an order string", func(t *testing.T) {
			c := confStart(t, f, file+": sort on _score with an order string")
			c.must("PUT", "/test/_doc/1?refresh=true", confObj{"id": 1})
			r := c.do("POST", "/test/_search", confObj{"sort": confArr{confObj{"_score": "asc"}}})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total.value", 1)
		})

		t.Run(file+": _shard_doc sort", func(t *testing.T) {
			c := confStart(t, f, file+": _shard_doc sort")
			c.must("PUT", "/test", nil)
			c.must("PUT", "/test/_doc/1", confObj{"id": 1, "foo": "bar", "age": 18})
			r := c.do("POST", "/test/_search", confObj{"size": 1, "sort": confArr{"_shard_doc"}, "search_after": confArr{0}})
			c.esError(r, http.StatusBadRequest, "action_request_validation_exception",
				"Validation Failed: 1: [_shard_doc] sort field cannot be used without [point in time];")
		})
	})
}

// ---------------------------------------------------------------------------
// index and delete: versioning

func TestConformance_Index30CAS(t *testing.T) {
	const name = "index/30_cas: Compare And Swap Sequence Numbers"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			r := c.do("PUT", "/test_1/_doc/1", confObj{"foo": "bar"})
			c.status(r, http.StatusCreated)
			c.match(r, "_version", 1)
			c.docType(r, "_type")
			seq, term := c.num(r, "_seq_no"), c.num(r, "_primary_term")

			r = c.do("GET", "/test_1/_doc/1", nil)
			c.status(r, http.StatusOK)
			c.match(r, "_seq_no", seq)
			c.match(r, "_primary_term", term)

			r = c.do("PUT", fmt.Sprintf("/test_1/_doc/1?if_seq_no=10000&if_primary_term=%d", term), confObj{"foo": "bar2"})
			c.esError(r, http.StatusConflict, "version_conflict_engine_exception", fmt.Sprintf(
				"[1]: version conflict, required seqNo [10000], primary term [%d]. current document has seqNo [%d] and primary term [%d]", term, seq, term))
			c.match(r, "error.index", "test_1")
			c.match(r, "error.shard", "0")

			r = c.do("PUT", fmt.Sprintf("/test_1/_doc/1?if_seq_no=%d&if_primary_term=1000", seq), confObj{"foo": "bar2"})
			c.esError(r, http.StatusConflict, "version_conflict_engine_exception", fmt.Sprintf(
				"[1]: version conflict, required seqNo [%d], primary term [1000]. current document has seqNo [%d] and primary term [%d]", seq, seq, term))

			r = c.do("PUT", fmt.Sprintf("/test_1/_doc/1?if_seq_no=%d&if_primary_term=%d", seq, term), confObj{"foo": "bar2"})
			c.status(r, http.StatusOK)
			c.match(r, "_version", 2)
			c.match(r, "result", "updated")
		})
	})
}

// confVersionStep is one write of a versioning YAML test: the request, then
// the expected status and _version, or the conflict reason.
type confVersionStep struct {
	method   string
	path     string
	status   int
	version  int
	conflict string
}

func confRunVersionSteps(tb testing.TB, c *confCase, steps []confVersionStep) {
	tb.Helper()
	for _, s := range steps {
		var body any
		if s.method == "PUT" {
			body = confObj{"foo": "bar"}
		}
		r := c.do(s.method, s.path, body)
		if s.conflict != "" {
			c.esError(r, http.StatusConflict, "version_conflict_engine_exception", s.conflict)
			continue
		}
		c.status(r, s.status)
		c.match(r, "_version", s.version)
	}
}

func TestConformance_IndexExternalVersions(t *testing.T) {
	tests := []struct {
		name  string
		steps []confVersionStep
	}{
		{name: "index/35_external_version: External version", steps: []confVersionStep{
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=0", status: 201, version: 0},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=5", status: 200, version: 5},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=5",
				conflict: "[1]: version conflict, current version [5] is higher or equal to the one provided [5]"},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=0",
				conflict: "[1]: version conflict, current version [5] is higher or equal to the one provided [0]"},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=6", status: 200, version: 6},
		}},
		{name: "index/36_external_gte_version: External GTE version", steps: []confVersionStep{
			{method: "PUT", path: "/test_1/_doc/1?version_type=external_gte&version=0", status: 201, version: 0},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external_gte&version=5", status: 200, version: 5},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external_gte&version=0",
				conflict: "[1]: version conflict, current version [5] is higher than the one provided [0]"},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external_gte&version=5", status: 200, version: 5},
			{method: "PUT", path: "/test_1/_doc/1?version_type=external_gte&version=6", status: 200, version: 6},
		}},
		{name: "delete/25_external_version: External version", steps: []confVersionStep{
			{method: "PUT", path: "/test_1/_doc/1?version_type=external&version=5", status: 201, version: 5},
			{method: "DELETE", path: "/test_1/_doc/1?version_type=external&version=4",
				conflict: "[1]: version conflict, current version [5] is higher or equal to the one provided [4]"},
			{method: "DELETE", path: "/test_1/_doc/1?version_type=external&version=6", status: 200, version: 6},
		}},
	}
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				confRunVersionSteps(t, confStart(t, f, tt.name), tt.steps)
			})
		}
	})
}

func TestConformance_Delete20CAS(t *testing.T) {
	const name = "delete/20_cas: Internal version"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			r := c.do("PUT", "/test_1/_doc/1", confObj{"foo": "bar"})
			c.status(r, http.StatusCreated)
			c.match(r, "_seq_no", 0)

			r = c.do("DELETE", "/test_1/_doc/1?if_seq_no=2&if_primary_term=1", nil)
			c.esError(r, http.StatusConflict, "version_conflict_engine_exception",
				"[1]: version conflict, required seqNo [2], primary term [1]. current document has seqNo [0] and primary term [1]")

			r = c.do("DELETE", "/test_1/_doc/1?if_seq_no=0&if_primary_term=1", nil)
			c.status(r, http.StatusOK)
			c.match(r, "_seq_no", 1)
			c.match(r, "result", "deleted")
			c.docType(r, "_type")
		})
	})
}

func TestConformance_Delete60Missing(t *testing.T) {
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		for _, name := range []string{"delete/60_missing: Missing document with catch", "delete/60_missing: Missing document with ignore"} {
			t.Run(name, func(t *testing.T) {
				// catch: missing and ignore: 404 both expect HTTP 404; the
				// body is a normal delete response with result not_found.
				c := confStart(t, f, name)
				r := c.do("DELETE", "/test_1/_doc/1", nil)
				c.status(r, http.StatusNotFound)
				c.match(r, "result", "not_found")
				c.match(r, "_index", "test_1")
			})
		}
	})
}

// ---------------------------------------------------------------------------
// indices.refresh, indices.resolve_index, data streams

func TestConformance_IndicesRefresh10Basic(t *testing.T) {
	const file = "indices.refresh/10_basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		for _, ix := range []string{"test_1", "test_2"} {
			c.must("PUT", "/"+ix, confObj{"settings": confObj{"index": confObj{"number_of_replicas": 0, "number_of_shards": 5}}})
		}
		r := c.must("GET", "/_cluster/health?wait_for_status=green", nil)
		c.match(r, "status", "green")
		tests := []struct {
			name  string
			path  string
			total int
		}{
			{name: "Indices refresh test _all", path: "/_all/_refresh", total: 10},
			{name: "Indices refresh test empty array", path: "/_refresh", total: 10},
			{name: "Indices refresh test no-match wildcard", path: "/bla*/_refresh", total: 0},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("POST", tt.path, nil)
				c.status(r, http.StatusOK)
				c.match(r, "_shards", confObj{"total": tt.total, "successful": tt.total, "failed": 0})
			})
		}
	})
}

// confResolveSetup creates the indices and aliases of the resolve index tests:
// test_index1 (aliases test_alias, test_blias, test_clias), test_index2
// (test_alias, closed) and test_index3 (test_blias).
func confResolveSetup(tb testing.TB, c *confCase) {
	tb.Helper()
	c.must("PUT", "/test_index1", confObj{"aliases": confObj{"test_alias": confObj{}, "test_blias": confObj{}, "test_clias": confObj{}}})
	c.must("PUT", "/test_index2", confObj{"aliases": confObj{"test_alias": confObj{}}})
	c.must("POST", "/test_index2/_close", nil)
	c.must("PUT", "/test_index3", confObj{"aliases": confObj{"test_blias": confObj{}}})
}

// confResolveAliases asserts the aliases part every resolve index test shares.
func confResolveAliases(tb testing.TB, c *confCase, r confResp) {
	tb.Helper()
	c.length(r, "aliases", 3)
	c.match(r, "aliases.0", confObj{"name": "test_alias", "indices": confArr{"test_index1", "test_index2"}})
	c.match(r, "aliases.1", confObj{"name": "test_blias", "indices": confArr{"test_index1", "test_index3"}})
	c.match(r, "aliases.2", confObj{"name": "test_clias", "indices": confArr{"test_index1"}})
}

func TestConformance_IndicesResolveIndex10Basic(t *testing.T) {
	const file = "indices.resolve_index/10_basic_resolve_index"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		confResolveSetup(t, c)
		t.Run(file+": Resolve index with indices and aliases", func(t *testing.T) {
			c := c.sub(t, file+": Resolve index with indices and aliases")
			r := c.do("GET", "/_resolve/index/*", nil)
			c.status(r, http.StatusOK)
			c.length(r, "indices", 2)
			c.match(r, "indices.0.name", "test_index1")
			c.match(r, "indices.0.aliases", confArr{"test_alias", "test_blias", "test_clias"})
			c.match(r, "indices.0.attributes", confArr{"open"})
			c.match(r, "indices.1.name", "test_index3")
			c.match(r, "indices.1.aliases", confArr{"test_blias"})
			c.match(r, "indices.1.attributes.0", "open")
			confResolveAliases(t, c, r)
			c.length(r, "data_streams", 0)
			if f == esemu.FlavorES9 {
				c.match(r, "indices.0.mode", "standard")
			} else {
				c.absent(r, "indices.0.mode")
			}
		})
		t.Run(file+": Resolve index with hidden and closed indices", func(t *testing.T) {
			c := c.sub(t, file+": Resolve index with hidden and closed indices")
			r := c.do("GET", "/_resolve/index/*,-.security*?expand_wildcards=all", nil)
			c.status(r, http.StatusOK)
			c.length(r, "indices", 3)
			c.match(r, "indices.0.name", "test_index1")
			c.match(r, "indices.0.aliases", confArr{"test_alias", "test_blias", "test_clias"})
			c.match(r, "indices.0.attributes.0", "open")
			c.match(r, "indices.1.name", "test_index2")
			c.match(r, "indices.1.aliases.0", "test_alias")
			c.match(r, "indices.1.attributes", confArr{"closed"})
			c.match(r, "indices.2.name", "test_index3")
			c.match(r, "indices.2.aliases.0", "test_blias")
			c.match(r, "indices.2.attributes.0", "open")
			confResolveAliases(t, c, r)
			c.length(r, "data_streams", 0)
		})
	})
}

// confDSIndex matches a backing index name with or without the date (7.11+
// have it).
func confDSIndex(ds string, gen int) string {
	return fmt.Sprintf(`^\.ds-%s-(\d{4}\.\d{2}\.\d{2}-)?%06d$`, regexp.QuoteMeta(ds), gen)
}

func TestConformance_DataStream70Rollover(t *testing.T) {
	const name = "data_stream/70_rollover_data_streams: Roll over a data stream"
	const ds = "data-stream-for-rollover"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			c.must("PUT", "/_index_template/my-template", confObj{"index_patterns": confArr{"data-*"}, "data_stream": confObj{}})
			r := c.do("PUT", "/_data_stream/"+ds, nil)
			c.status(r, http.StatusOK)
			c.match(r, "acknowledged", true)

			r = c.do("POST", "/"+ds+"/_rollover", nil)
			c.status(r, http.StatusOK)
			c.matchRe(r, "old_index", confDSIndex(ds, 1))
			c.matchRe(r, "new_index", confDSIndex(ds, 2))
			c.match(r, "rolled_over", true)
			c.match(r, "dry_run", false)

			r = c.do("GET", "/_data_stream/"+ds, nil)
			c.status(r, http.StatusOK)
			idx0 := c.str(r, "data_streams.0.indices.0.index_name")
			r = c.do("HEAD", "/"+idx0, nil)
			c.status(r, http.StatusOK)

			r = c.do("GET", "/_data_stream/*", nil)
			c.status(r, http.StatusOK)
			c.match(r, "data_streams.0.name", ds)
			c.match(r, "data_streams.0.timestamp_field.name", "@timestamp")
			c.match(r, "data_streams.0.generation", 2)
			c.length(r, "data_streams.0.indices", 2)
			c.matchRe(r, "data_streams.0.indices.0.index_name", confDSIndex(ds, 1))
			c.matchRe(r, "data_streams.0.indices.1.index_name", confDSIndex(ds, 2))

			r = c.do("DELETE", "/_data_stream/"+ds, nil)
			c.status(r, http.StatusOK)
			c.match(r, "acknowledged", true)
		})
	})
}

func TestConformance_DataStream80ResolveIndex(t *testing.T) {
	const file = "data_stream/80_resolve_index_data_streams"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		setup := func(tb testing.TB, src string) *confCase {
			tb.Helper()
			c := confStart(tb, f, src)
			for i, ds := range []string{"simple-data-stream1", "simple-data-stream2"} {
				c.must("PUT", fmt.Sprintf("/_index_template/my-template%d", i+1), confObj{"index_patterns": confArr{ds}, "data_stream": confObj{}})
			}
			c.must("PUT", "/_data_stream/simple-data-stream1", nil)
			c.must("PUT", "/_data_stream/simple-data-stream2", nil)
			c.must("POST", "/simple-data-stream2/_rollover", nil)
			confResolveSetup(tb, c)
			return c
		}
		streams := func(tb testing.TB, c *confCase, r confResp) {
			tb.Helper()
			c.length(r, "data_streams", 2)
			c.match(r, "data_streams.0.name", "simple-data-stream1")
			c.matchRe(r, "data_streams.0.backing_indices.0", confDSIndex("simple-data-stream1", 1))
			c.match(r, "data_streams.0.timestamp_field", "@timestamp")
			c.match(r, "data_streams.1.name", "simple-data-stream2")
			c.matchRe(r, "data_streams.1.backing_indices.0", confDSIndex("simple-data-stream2", 1))
			c.matchRe(r, "data_streams.1.backing_indices.1", confDSIndex("simple-data-stream2", 2))
			c.match(r, "data_streams.1.timestamp_field", "@timestamp")
			for _, ds := range []string{"simple-data-stream1", "simple-data-stream2"} {
				d := c.do("DELETE", "/_data_stream/"+ds, nil)
				c.status(d, http.StatusOK)
				c.match(d, "acknowledged", true)
			}
		}

		t.Run(file+": Resolve index with indices, aliases, and data streams", func(t *testing.T) {
			c := setup(t, file+": Resolve index with indices, aliases, and data streams")
			r := c.do("GET", "/_resolve/index/*", nil)
			c.status(r, http.StatusOK)
			c.length(r, "indices", 2)
			c.match(r, "indices.0.name", "test_index1")
			c.match(r, "indices.0.aliases", confArr{"test_alias", "test_blias", "test_clias"})
			c.match(r, "indices.0.attributes.0", "open")
			c.match(r, "indices.1.name", "test_index3")
			c.match(r, "indices.1.aliases.0", "test_blias")
			c.match(r, "indices.1.attributes.0", "open")
			confResolveAliases(t, c, r)
			streams(t, c, r)
		})

		t.Run(file+": Resolve index with hidden and closed indices", func(t *testing.T) {
			c := setup(t, file+": Resolve index with hidden and closed indices")
			r := c.do("GET", "/_resolve/index/*,-.ml*,-.ds-ilm-history*,-ilm-history*?expand_wildcards=all", nil)
			c.status(r, http.StatusOK)
			c.length(r, "indices", 6)
			backing := []struct {
				ds  string
				gen int
			}{{"simple-data-stream1", 1}, {"simple-data-stream2", 1}, {"simple-data-stream2", 2}}
			for i, b := range backing {
				p := fmt.Sprintf("indices.%d.", i)
				c.matchRe(r, p+"name", confDSIndex(b.ds, b.gen))
				c.match(r, p+"attributes", confArr{"hidden", "open"})
				c.match(r, p+"data_stream", b.ds)
			}
			c.match(r, "indices.3.name", "test_index1")
			c.match(r, "indices.3.aliases", confArr{"test_alias", "test_blias", "test_clias"})
			c.match(r, "indices.3.attributes.0", "open")
			c.match(r, "indices.4.name", "test_index2")
			c.match(r, "indices.4.aliases.0", "test_alias")
			c.match(r, "indices.4.attributes.0", "closed")
			c.match(r, "indices.5.name", "test_index3")
			c.match(r, "indices.5.aliases.0", "test_blias")
			c.match(r, "indices.5.attributes.0", "open")
			confResolveAliases(t, c, r)
			streams(t, c, r)
		})
	})
}

// ---------------------------------------------------------------------------
// bulk, update, get

func TestConformance_Bulk10Basic(t *testing.T) {
	const file = "bulk/10_basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(file+": Array of objects", func(t *testing.T) {
			c := confStart(t, f, file+": Array of objects")
			r := c.do("POST", "/_bulk?refresh=true", confBulk(
				`{"index":{"_index":"test_index","_id":"test_id"}}`, `{"f1":"v1","f2":42}`,
				`{"index":{"_index":"test_index","_id":"test_id2"}}`, `{"f1":"v2","f2":47}`))
			c.status(r, http.StatusOK)
			// BulkResponse field order: 7.x writes took first, 8.x+ errors.
			want := `{"errors":`
			if c.es7() {
				want = `{"took":`
			}
			if !bytes.HasPrefix(r.raw, []byte(want)) {
				c.fail(r, "the bulk response starts with %.12s, want %s", r.raw, want)
			}
			c.docType(r, "items.0.index._type")
			r = c.do("GET", "/test_index/_count", nil)
			c.status(r, http.StatusOK)
			c.match(r, "count", 2)
		})

		emptyID := []struct {
			name  string
			lines []string
			count int
		}{
			{name: "Empty _id", lines: []string{
				`{"index":{"_index":"test","_id":""}}`, `{"f":1}`,
				`{"index":{"_index":"test","_id":"id"}}`, `{"f":2}`,
				`{"index":{"_index":"test"}}`, `{"f":3}`}, count: 2},
			{name: "Empty _id with op_type create", lines: []string{
				`{"index":{"_index":"test","_id":""}}`, `{"f":1}`,
				`{"index":{"_index":"test","_id":"id"}}`, `{"f":2}`,
				`{"index":{"_index":"test"}}`, `{"f":3}`,
				`{"create":{"_index":"test"}}`, `{"f":4}`,
				`{"index":{"_index":"test","op_type":"create"}}`, `{"f":5}`}, count: 4},
		}
		for _, tt := range emptyID {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := confStart(t, f, file+": "+tt.name)
				r := c.do("POST", "/_bulk?refresh=true", confBulk(tt.lines...))
				c.status(r, http.StatusOK)
				c.match(r, "errors", true)
				c.match(r, "items.0.index.status", 400)
				c.match(r, "items.0.index.error.type", "illegal_argument_exception")
				c.match(r, "items.0.index.error.reason", "if _id is specified it must not be empty")
				c.match(r, "items.1.index.result", "created")
				c.match(r, "items.2.index.result", "created")
				if tt.count == 4 {
					c.match(r, "items.3.create.result", "created")
					// An index action with op_type create answers as "create".
					c.match(r, "items.4.create.result", "created")
					c.match(r, "items.4.create.status", 201)
				}
				r = c.do("GET", "/test/_count", nil)
				c.status(r, http.StatusOK)
				c.match(r, "count", tt.count)
			})
		}

		t.Run(file+": empty action", func(t *testing.T) {
			c := confStart(t, f, file+": empty action")
			r := c.do("POST", "/_bulk", confBulk(`{"index": {"_index": "test_index", "_id": "test_id"}}`, `{"f1": "v1", "f2": 42}`, `{}`))
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception",
				"Malformed action/metadata line [3], expected FIELD_NAME but found [END_OBJECT]")
		})

		const notAlias = "no such index [new_index_not_created] and [require_alias] request flag is [true] and [new_index_not_created] is not an alias"
		requireAlias := []struct {
			name  string
			path  string
			lines []string
			items int
		}{
			{name: "When setting require_alias flag per request", path: "/_bulk?refresh=true", lines: []string{
				`{"index":{"_index":"new_index_not_created","require_alias":true}}`, `{"f":1}`,
				`{"index":{"_index":"new_index_created"}}`, `{"f":2}`,
				`{"index":{"_index":"test_require_alias","require_alias":true}}`, `{"f":3}`,
				`{"create":{"_index":"test_require_alias"}}`, `{"f":4}`}, items: 4},
			{name: "When setting require_alias flag", path: "/_bulk?refresh=true&require_alias=true", lines: []string{
				`{"index":{"_index":"new_index_not_created"}}`, `{"f":1}`,
				`{"index":{"_index":"new_index_created","require_alias":false}}`, `{"f":2}`,
				`{"index":{"_index":"test_require_alias"}}`, `{"f":3}`}, items: 3},
		}
		for _, tt := range requireAlias {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := confStart(t, f, file+": "+tt.name)
				c.must("PUT", "/backing_index", confObj{"mappings": confObj{}, "aliases": confObj{"test_require_alias": confObj{}}})
				r := c.do("POST", tt.path, confBulk(tt.lines...))
				c.status(r, http.StatusOK)
				c.match(r, "errors", true)
				c.match(r, "items.0.index.status", 404)
				c.match(r, "items.0.index.error.type", "index_not_found_exception")
				c.match(r, "items.0.index.error.reason", notAlias)
				c.match(r, "items.1.index.result", "created")
				c.match(r, "items.2.index.result", "created")
				c.match(r, "items.2.index._index", "backing_index")
				if tt.items == 4 {
					c.match(r, "items.3.create.result", "created")
				}
				r = c.do("GET", "/new_index_not_created", nil)
				c.esError(r, http.StatusNotFound, "index_not_found_exception", "no such index [new_index_not_created]")
			})
		}

		t.Run(file+": Return item-level error when no write index defined for an alias", func(t *testing.T) {
			c := confStart(t, f, file+": Return item-level error when no write index defined for an alias")
			c.must("PUT", "/test_index1", nil)
			c.must("PUT", "/test_index2", nil)
			c.must("PUT", "/test_index1/_alias/test_index", nil)
			c.must("PUT", "/test_index2/_alias/test_index", nil)
			r := c.do("POST", "/_bulk", confBulk(`{"index": {"_index": "test_index"}}`, `{"field": "test"}`))
			c.status(r, http.StatusOK)
			c.match(r, "errors", true)
			c.match(r, "items.0.index.status", 400)
			c.match(r, "items.0.index.error.type", "illegal_argument_exception")
			c.match(r, "items.0.index.error.reason", "no write index is defined for alias [test_index]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index")
		})
	})
}

func TestConformance_Update10Doc(t *testing.T) {
	const name = "update/10_doc: Partial document"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			c.must("PUT", "/test_1/_doc/1", confObj{"foo": "bar", "count": 1, "nested": confObj{"one": 1, "two": 2}})
			r := c.do("POST", "/test_1/_update/1", confObj{"doc": confObj{"foo": "baz", "nested": confObj{"one": 3}}})
			c.status(r, http.StatusOK)
			c.match(r, "_index", "test_1")
			c.match(r, "_id", "1")
			c.match(r, "_version", 2)
			c.match(r, "result", "updated")
			c.docType(r, "_type")

			r = c.do("GET", "/test_1/_doc/1", nil)
			c.status(r, http.StatusOK)
			c.match(r, "_source.foo", "baz")
			c.match(r, "_source.count", 1)
			c.match(r, "_source.nested.one", 3)
			c.match(r, "_source.nested.two", 2)
		})
	})
}

func TestConformance_Get10Basic(t *testing.T) {
	const name = "get/10_basic: Basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			id := url.PathEscape("中文")
			c.must("PUT", "/test_1/_doc/"+id, confObj{"foo": "Hello: 中文"})
			r := c.do("GET", "/test_1/_doc/"+id, nil)
			c.status(r, http.StatusOK)
			c.match(r, "_index", "test_1")
			// The stored YAML is the 7.x one, which asserts _type: _doc.
			c.docType(r, "_type")
			c.match(r, "_id", "中文")
			c.match(r, "_source", confObj{"foo": "Hello: 中文"})
			c.match(r, "found", true)
		})
	})
}

// ---------------------------------------------------------------------------
// scroll, count

func TestConformance_Scroll10Basic(t *testing.T) {
	const file = "scroll/10_basic"
	// The YAML sorts with the URL parameter sort=foo, a source field the
	// emulator does not sort on; docs 42 and 43 are indexed in that order,
	// so sort=_seq_no gives the same order.
	const first = "/test_scroll/_search?rest_total_hits_as_int=true&size=1&scroll=1m&sort=_seq_no"
	matchAll := confObj{"query": confMatchAllQ}
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		setup := func(tb testing.TB, src string, settings confObj) *confCase {
			tb.Helper()
			c := confStart(tb, f, src)
			c.must("PUT", "/test_scroll", settings)
			c.must("PUT", "/test_scroll/_doc/42", confObj{"foo": 1})
			c.must("PUT", "/test_scroll/_doc/43", confObj{"foo": 2})
			c.must("POST", "/_refresh", nil)
			return c
		}
		basic := []struct {
			name     string
			settings confObj
		}{
			{name: "Basic scroll"},
			{name: "Basic scroll with 1 shard", settings: confObj{"settings": confObj{"index": confObj{"number_of_shards": 1}}}},
		}
		for _, tt := range basic {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := setup(t, file+": "+tt.name, tt.settings)
				r := c.do("POST", strings.Replace(first, "_seq_no", "foo", 1), matchAll)
				c.notModeled(r)

				r = c.do("POST", first, matchAll)
				c.status(r, http.StatusOK)
				id := c.str(r, "_scroll_id")
				c.match(r, "hits.total", 2)
				c.length(r, "hits.hits", 1)
				c.match(r, "hits.hits.0._id", "42")

				c.must("PUT", "/test_scroll/_doc/44", confObj{"foo": 3})
				c.must("POST", "/_refresh", nil)

				r = c.do("POST", "/_search/scroll?rest_total_hits_as_int=true", confObj{"scroll_id": id, "scroll": "1m"})
				c.status(r, http.StatusOK)
				c.match(r, "hits.total", 2)
				c.length(r, "hits.hits", 1)
				c.match(r, "hits.hits.0._id", "43")

				r = c.do("GET", "/_search/scroll?rest_total_hits_as_int=true&scroll=1m&scroll_id="+url.QueryEscape(id), nil)
				c.status(r, http.StatusOK)
				c.match(r, "hits.total", 2)
				c.length(r, "hits.hits", 0)

				r = c.do("DELETE", "/_search/scroll/"+url.PathEscape(id), nil)
				c.status(r, http.StatusOK)
				c.match(r, "succeeded", true)
				c.match(r, "num_freed", 1)
			})
		}

		t.Run(file+": Body params override query string", func(t *testing.T) {
			c := setup(t, file+": Body params override query string", nil)
			id := c.str(c.must("POST", first, matchAll), "_scroll_id")
			c.must("PUT", "/test_scroll/_doc/44", confObj{"foo": 3})
			c.must("POST", "/_refresh", nil)
			r := c.do("POST", "/_search/scroll?rest_total_hits_as_int=true&scroll_id=invalid_scroll_id", confObj{"scroll_id": id, "scroll": "1m"})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", 2)
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._id", "43")
			c.must("DELETE", "/_search/scroll/"+url.PathEscape(id), nil)
		})

		invalid := []struct {
			name   string
			body   confObj
			reason string
		}{
			{name: "Scroll cannot used the request cache", body: matchAll,
				reason: "Validation Failed: 1: [request_cache] cannot be used in a scroll context;"},
			{name: "Scroll with size 0", body: confObj{"query": confMatchAllQ, "size": 0},
				reason: "Validation Failed: 1: [size] cannot be [0] in a scroll context;2: [request_cache] cannot be used in a scroll context;"},
		}
		for _, tt := range invalid {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := confStart(t, f, file+": "+tt.name)
				c.must("PUT", "/test_scroll", nil)
				r := c.do("POST", "/test_scroll/_search?rest_total_hits_as_int=true&scroll=1m&request_cache=true", tt.body)
				c.esError(r, http.StatusBadRequest, "action_request_validation_exception", tt.reason)
			})
		}

		t.Run(file+": Scroll max_score is null", func(t *testing.T) {
			c := setup(t, file+": Scroll max_score is null", nil)
			r := c.do("POST", first, matchAll)
			c.status(r, http.StatusOK)
			id := c.str(r, "_scroll_id")
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.max_score", nil)
			r = c.do("GET", "/_search/scroll?rest_total_hits_as_int=true&scroll=1m&scroll_id="+url.QueryEscape(id), nil)
			c.status(r, http.StatusOK)
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.max_score", nil)
		})

		t.Run(file+": Scroll with new response format", func(t *testing.T) {
			c := setup(t, file+": Scroll with new response format", nil)
			r := c.do("POST", "/test_scroll/_search?size=1&scroll=1m&sort=_seq_no", matchAll)
			c.status(r, http.StatusOK)
			id := c.str(r, "_scroll_id")
			c.match(r, "hits.total", confObj{"value": 2, "relation": "eq"})
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._id", "42")
			r = c.do("POST", "/_search/scroll", confObj{"scroll_id": id, "scroll": "1m"})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", confObj{"value": 2, "relation": "eq"})
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._id", "43")
			r = c.do("GET", "/_search/scroll?scroll=1m&scroll_id="+url.QueryEscape(id), nil)
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", confObj{"value": 2, "relation": "eq"})
			c.length(r, "hits.hits", 0)
			c.must("DELETE", "/_search/scroll/"+url.PathEscape(id), nil)
		})

		// Not YAML cases: the other scroll checks of SearchRequest.validate
		// (7.0+), in its order.
		scrollChecks := []struct {
			name   string
			path   string
			reason string
		}{
			{name: "from is refused in a scroll context", path: "/test_scroll/_search?scroll=1m&size=1&from=1",
				reason: "Validation Failed: 1: using [from] is not allowed in a scroll context;"},
			{name: "track_total_hits=false is refused in a scroll context", path: "/test_scroll/_search?scroll=1m&track_total_hits=false&from=1",
				reason: "Validation Failed: 1: disabling [track_total_hits] is not allowed in a scroll context;2: using [from] is not allowed in a scroll context;"},
		}
		for _, tt := range scrollChecks {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := setup(t, file+": "+tt.name, nil)
				r := c.do("POST", tt.path, matchAll)
				c.esError(r, http.StatusBadRequest, "action_request_validation_exception", tt.reason)
			})
		}
	})
}

func TestConformance_Count10Basic(t *testing.T) {
	const file = "count/10_basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test", nil)
		c.must("PUT", "/test/_doc/1", confObj{"foo": "bar"})
		c.must("POST", "/test/_refresh", nil)

		t.Run(file+": count with body", func(t *testing.T) {
			c := c.sub(t, file+": count with body")
			r := c.do("POST", "/test/_count", confObj{"query": confObj{"match": confObj{"foo": "bar"}}})
			c.notModeled(r)
			// match foo:bar matches doc 1 and match foo:test nothing; ids
			// queries select the same.
			r = c.do("POST", "/test/_count", confObj{"query": confObj{"ids": confObj{"values": confArr{"1"}}}})
			c.status(r, http.StatusOK)
			c.match(r, "count", 1)
			r = c.do("POST", "/test/_count", confObj{"query": confObj{"ids": confObj{"values": confArr{"test"}}}})
			c.status(r, http.StatusOK)
			c.match(r, "count", 0)
		})
		t.Run(file+": count with empty body", func(t *testing.T) {
			c := c.sub(t, file+": count with empty body")
			r := c.do("POST", "/test/_count", confObj{})
			c.status(r, http.StatusOK)
			c.match(r, "count", 1)
			r = c.do("GET", "/test/_count", nil)
			c.status(r, http.StatusOK)
			c.match(r, "count", 1)
			c.match(r, "_shards.failed", 0)
		})
		t.Run(file+": count body without query element", func(t *testing.T) {
			c := c.sub(t, file+": count body without query element")
			r := c.do("POST", "/test/_count", confObj{"match": confObj{"foo": "bar"}})
			c.esError(r, http.StatusBadRequest, "parsing_exception", "request does not support [match]")
		})
		t.Run(file+": test negative terminate_after throws IAE", func(t *testing.T) {
			c := c.sub(t, file+": test negative terminate_after throws IAE")
			r := c.do("GET", "/index1/_count?terminate_after=-1", nil)
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception", "terminateAfter must be > 0")
		})
	})
}

// ---------------------------------------------------------------------------
// cluster.health, indices.rollover, info

func TestConformance_ClusterHealth10Basic(t *testing.T) {
	const file = "cluster.health/10_basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		// common asserts what the "basic test" cases share.
		common := func(tb testing.TB, c *confCase, r confResp) {
			tb.Helper()
			c.status(r, http.StatusOK)
			c.isTrue(r, "cluster_name")
			c.isFalse(r, "timed_out")
			c.gte(r, "number_of_nodes", 1)
			c.gte(r, "number_of_data_nodes", 1)
			c.match(r, "relocating_shards", 0)
			c.match(r, "initializing_shards", 0)
			c.match(r, "unassigned_shards", 0)
			c.gte(r, "number_of_pending_tasks", 0)
			// unassigned_primary_shards is gated on the unassigned_pri_shard_count
			// capability (8.x); 7.x has no such field.
			if c.es7() {
				c.absent(r, "unassigned_primary_shards")
			} else {
				c.match(r, "unassigned_primary_shards", 0)
			}
		}
		t.Run(file+": cluster health basic test", func(t *testing.T) {
			c := confStart(t, f, file+": cluster health basic test")
			r := c.do("GET", "/_cluster/health", nil)
			common(t, c, r)
			c.match(r, "active_primary_shards", 0)
			c.match(r, "active_shards", 0)
		})
		oneIndex := []struct {
			name string
			path string
		}{
			{name: "cluster health basic test, one index", path: "/_cluster/health?wait_for_status=green&wait_for_no_relocating_shards=true"},
			{name: "cluster health basic test, one index with wait for active shards", path: "/_cluster/health?wait_for_active_shards=1&wait_for_no_relocating_shards=true"},
			{name: "cluster health basic test, one index with wait for all active shards", path: "/_cluster/health?wait_for_active_shards=all&wait_for_no_relocating_shards=true"},
		}
		for _, tt := range oneIndex {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := confStart(t, f, file+": "+tt.name)
				c.must("PUT", "/test_index", confObj{"settings": confObj{"index": confObj{"number_of_replicas": 0}}})
				r := c.do("GET", tt.path, nil)
				common(t, c, r)
				c.gt(r, "active_primary_shards", 0)
				c.gt(r, "active_shards", 0)
			})
		}
		t.Run(file+": cluster health basic test, one index with wait for no initializing shards", func(t *testing.T) {
			c := confStart(t, f, file+": cluster health basic test, one index with wait for no initializing shards")
			c.must("PUT", "/test_index?wait_for_active_shards=0", confObj{"settings": confObj{"index": confObj{"number_of_replicas": 0}}})
			r := c.do("GET", "/_cluster/health?wait_for_no_initializing_shards=true", nil)
			c.status(r, http.StatusOK)
			c.match(r, "initializing_shards", 0)
		})
		t.Run(file+": cluster health levels", func(t *testing.T) {
			c := confStart(t, f, file+": cluster health levels")
			c.must("PUT", "/test_index", nil)
			r := c.do("GET", "/_cluster/health?level=indices", nil)
			c.status(r, http.StatusOK)
			c.isTrue(r, "indices")
			c.isFalse(r, "indices.test_index.shards")
			if c.es7() {
				c.absent(r, "indices.test_index.unassigned_primary_shards")
			} else {
				c.match(r, "indices.test_index.unassigned_primary_shards", 0)
			}
			r = c.do("GET", "/_cluster/health?level=shards", nil)
			c.status(r, http.StatusOK)
			c.isTrue(r, "indices")
			c.isTrue(r, "indices.test_index.shards")
			if c.es7() {
				c.absent(r, "indices.test_index.shards.0.unassigned_primary_shards")
			}
		})
		t.Run(file+": cluster health with closed index", func(t *testing.T) {
			// Since 7.2 closed indices are replicated: closing index-2 keeps
			// its unassigned replicas, and the cluster, yellow.
			c := confStart(t, f, file+": cluster health with closed index")
			c.must("PUT", "/index-1", confObj{"settings": confObj{"index": confObj{"number_of_replicas": 0}}})
			r := c.do("GET", "/_cluster/health?wait_for_status=green", nil)
			c.status(r, http.StatusOK)
			c.match(r, "status", "green")
			c.must("PUT", "/index-2", confObj{"settings": confObj{"index": confObj{"number_of_replicas": 50}}})
			health := []struct {
				path string
				want string
			}{
				{path: "/_cluster/health?wait_for_status=yellow&wait_for_no_relocating_shards=true", want: "yellow"},
				{path: "/_cluster/health/index-*", want: "yellow"},
				{path: "/_cluster/health/index-1", want: "green"},
				{path: "/_cluster/health/index-2", want: "yellow"},
			}
			for _, h := range health {
				r = c.do("GET", h.path, nil)
				c.status(r, http.StatusOK)
				c.match(r, "status", h.want)
			}
			r = c.do("POST", "/index-2/_close", nil)
			c.status(r, http.StatusOK)
			c.match(r, "acknowledged", true)
			health[0].path = "/_cluster/health?wait_for_status=yellow"
			for _, h := range health {
				r = c.do("GET", h.path, nil)
				c.status(r, http.StatusOK)
				c.match(r, "status", h.want)
			}
		})
	})
}

func TestConformance_IndicesRollover10Basic(t *testing.T) {
	const file = "indices.rollover/10_basic"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		setup := func(tb testing.TB, src string) *confCase {
			tb.Helper()
			c := confStart(tb, f, src)
			c.must("PUT", "/logs-1?wait_for_active_shards=1", confObj{"aliases": confObj{"logs_index": confObj{}, "logs_search": confObj{}}})
			return c
		}
		maxDocs1 := confObj{"conditions": confObj{"max_docs": 1}}

		t.Run(file+": Rollover index via API", func(t *testing.T) {
			c := setup(t, file+": Rollover index via API")
			c.must("PUT", "/logs-1/_doc/1?refresh=true", confObj{"foo": "hello world"})
			r := c.do("GET", "/logs_search/_doc/1", nil)
			c.status(r, http.StatusOK)
			c.match(r, "_index", "logs-1")
			c.match(r, "_id", "1")
			c.match(r, "_source", confObj{"foo": "hello world"})

			r = c.do("POST", "/logs_search/_rollover?wait_for_active_shards=1", maxDocs1)
			c.status(r, http.StatusOK)
			c.match(r, "old_index", "logs-1")
			c.match(r, "new_index", "logs-000002")
			c.match(r, "rolled_over", true)
			c.match(r, "dry_run", false)
			c.match(r, "conditions", confObj{"[max_docs: 1]": true})

			r = c.do("HEAD", "/logs-000002", nil)
			c.status(r, http.StatusOK)

			c.must("PUT", "/logs-000002/_doc/2", confObj{"foo": "hello world"})
			c.must("POST", "/_refresh", nil)
			r = c.do("GET", "/logs_search/_search?rest_total_hits_as_int=true", nil)
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", 1)
			c.match(r, "hits.hits.0._index", "logs-000002")
		})

		t.Run(file+": Rollover no condition matched", func(t *testing.T) {
			c := setup(t, file+": Rollover no condition matched")
			r := c.do("POST", "/logs_search/_rollover?wait_for_active_shards=1", maxDocs1)
			c.status(r, http.StatusOK)
			c.match(r, "old_index", "logs-1")
			c.match(r, "new_index", "logs-000002")
			c.match(r, "rolled_over", false)
			c.match(r, "dry_run", false)
			c.match(r, "conditions", confObj{"[max_docs: 1]": false})
		})

		t.Run(file+": Rollover with dry-run but target index exists", func(t *testing.T) {
			c := setup(t, file+": Rollover with dry-run but target index exists")
			c.must("PUT", "/logs-000002", nil)
			for _, dry := range []string{"true", "false"} {
				r := c.do("POST", "/logs_search/_rollover?wait_for_active_shards=1&dry_run="+dry, maxDocs1)
				c.status(r, http.StatusBadRequest)
				c.match(r, "error.type", "resource_already_exists_exception")
				c.matchRe(r, "error.reason", `^index \[logs-000002/[^\]]+\] already exists$`)
			}
			r := c.do("POST", "/logs_search/_rollover/"+url.PathEscape("invalid|index|name")+"?dry_run=true&wait_for_active_shards=1", maxDocs1)
			c.status(r, http.StatusBadRequest)
			c.match(r, "error.type", "invalid_index_name_exception")
		})

		if f != esemu.FlavorES7 { // gte_v8.4.0
			t.Run(file+": Will not rollover with only min_* conditions", func(t *testing.T) {
				c := setup(t, file+": Will not rollover with only min_* conditions")
				c.must("PUT", "/logs-1/_doc/1?refresh=true", confObj{"foo": "hello world"})
				r := c.do("POST", "/logs_search/_rollover?wait_for_active_shards=1", confObj{"conditions": confObj{"min_age": "0s", "min_docs": 1}})
				c.esError(r, http.StatusBadRequest, "action_request_validation_exception",
					"Validation Failed: 1: at least one max_* rollover condition must be set when using min_* conditions;")
			})
		}

		t.Run(file+": Rolling over an unknown target should return 404", func(t *testing.T) {
			c := confStart(t, f, file+": Rolling over an unknown target should return 404")
			r := c.do("POST", "/non_existent/_rollover", nil)
			c.match(r, "error.reason", "rollover target [non_existent] does not exist")
			if c.es7() {
				// The YAML is gated on return-404-on-missing-target: before
				// it, MetadataRolloverService threw IllegalArgumentException.
				c.esError(r, http.StatusBadRequest, "illegal_argument_exception", "")
			} else {
				c.status(r, http.StatusNotFound)
			}
		})
	})
	// OpenSearch forked before the 404: its MetadataRolloverService.validate
	// still throws IllegalArgumentException.
	confEach(t, confOSFlavors, func(t *testing.T, f esemu.Flavor) {
		const name = file + ": Rolling over an unknown target (OpenSearch: 400)"
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			r := c.do("POST", "/non_existent/_rollover", nil)
			c.esError(r, http.StatusBadRequest, "illegal_argument_exception", "rollover target [non_existent] does not exist")
		})
	})
}

func TestConformance_Info10Info(t *testing.T) {
	const name = "info/10_info: Info"
	confEach(t, confAllFlavors, func(t *testing.T, f esemu.Flavor) {
		t.Run(name, func(t *testing.T) {
			c := confStart(t, f, name)
			r := c.do("GET", "/", nil)
			c.status(r, http.StatusOK)
			for _, p := range []string{"name", "cluster_name", "cluster_uuid", "tagline", "version", "version.number"} {
				c.isTrue(r, p)
			}
			c.match(r, "version.number", f.Version())
			if f.OpenSearch() {
				// OpenSearch: version.distribution and no build_flavor.
				c.match(r, "version.distribution", "opensearch")
				c.absent(r, "version.build_flavor")
				c.match(r, "tagline", "The OpenSearch Project: https://opensearch.org/")
				return
			}
			c.match(r, "version.build_flavor", "default")
			c.match(r, "tagline", "You Know, for Search")
		})
	})
}

// ---------------------------------------------------------------------------
// search/10_source_filtering

func TestConformance_Search10SourceFiltering(t *testing.T) {
	const file = "search/10_source_filtering"
	confEach(t, confESFlavors, func(t *testing.T, f esemu.Flavor) {
		c := confStart(t, f, file+": setup")
		c.must("PUT", "/test", confObj{"mappings": confObj{"properties": confObj{"bigint": confObj{"type": "keyword"}}}})
		// Raw JSON keeps the long exact.
		c.must("PUT", "/test_1/_doc/1", `{ "include": { "field1": "v1", "field2": "v2" }, "count": 1, "bigint": 72057594037927936, "d": 3.14 }`)
		c.must("POST", "/_refresh", nil)

		type check struct {
			path string
			want any // nil: is_false
		}
		tests := []struct {
			name   string
			path   string
			body   confObj
			checks []check
		}{
			{name: "_source: true", body: confObj{"_source": true, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.count", 1}}},
			{name: "_source: false", body: confObj{"_source": false, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source", nil}}},
			{name: "no filtering", body: confObj{"query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.count", 1}}},
			{name: "_source in body", body: confObj{"_source": "include.field1", "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", nil}}},
			{name: "_source_includes and _source in body", path: "?_source_includes=include.field1",
				body:   confObj{"_source": "include.field2", "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", nil}}},
			{name: "_source_includes", path: "?_source_includes=include.field1", body: confObj{"query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", nil}}},
			{name: "_source_excludes", path: "?_source_excludes=count", body: confObj{"query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include", confObj{"field1": "v1", "field2": "v2"}}, {"hits.hits.0._source.count", nil}}},
			{name: "_source field1 field2", body: confObj{"_source": confArr{"include.field1", "include.field2"}, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", "v2"}, {"hits.hits.0._source.count", nil}}},
			{name: "_source.include field1 field2", body: confObj{"_source": confObj{"includes": confArr{"include.field1", "include.field2"}}, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", "v2"}, {"hits.hits.0._source.count", nil}}},
			{name: "_source includes and excludes", body: confObj{"_source": confObj{"includes": "include", "excludes": "*.field2"}, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.include.field1", "v1"}, {"hits.hits.0._source.include.field2", nil}}},
			{name: "_source include on bigint", body: confObj{"_source": confObj{"includes": "bigint"}, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.bigint", json.Number("72057594037927936")}, {"hits.hits.0._source.include.field2", nil}}},
			{name: "_source filtering on bigint", body: confObj{"_source": confArr{"bigint"}, "query": confMatchAllQ},
				checks: []check{{"hits.hits.0._source.bigint", json.Number("72057594037927936")}}},
		}
		for _, tt := range tests {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				r := c.do("POST", "/_search"+tt.path, tt.body)
				c.status(r, http.StatusOK)
				c.length(r, "hits.hits", 1)
				for _, ch := range tt.checks {
					if ch.want == nil {
						c.isFalse(r, ch.path)
					} else {
						c.match(r, ch.path, ch.want)
					}
				}
			})
		}
		// stored_fields and docvalue_fields are not modeled.
		loud := []struct {
			name string
			path string
			body confObj
		}{
			{name: "fields in body", body: confObj{"stored_fields": confArr{"include.field2"}, "query": confMatchAllQ}},
			{name: "fields in body with source", body: confObj{"stored_fields": confArr{"include.field2", "_source"}, "query": confMatchAllQ}},
			{name: "docvalue_fields", body: confObj{"docvalue_fields": confArr{"count"}}},
			{name: "docvalue_fields as url param", path: "?docvalue_fields=count"},
		}
		for _, tt := range loud {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				c := c.sub(t, file+": "+tt.name)
				var body any
				if tt.body != nil {
					body = tt.body
				}
				c.notModeled(c.do("POST", "/_search"+tt.path, body))
			})
		}
	})
}

// ---------------------------------------------------------------------------
// OpenSearch pit/10_basic

func TestConformance_OpenSearchPIT10Basic(t *testing.T) {
	const file = "pit/10_basic (OpenSearch)"
	confEach(t, confOSFlavors, func(t *testing.T, f esemu.Flavor) {
		setup := func(tb testing.TB, src string) (*confCase, string) {
			tb.Helper()
			c := confStart(tb, f, src)
			c.must("PUT", "/test_pit", nil)
			c.must("PUT", "/test_pit/_doc/42", confObj{"foo": 1})
			c.must("PUT", "/test_pit/_doc/43", confObj{"foo": 2})
			c.must("POST", "/_refresh", nil)
			r := c.do("POST", "/test_pit/_search/point_in_time?allow_partial_pit_creation=true&keep_alive=23h", nil)
			c.status(r, http.StatusOK)
			c.match(r, "_shards.failed", 0)
			c.isTrue(r, "creation_time")
			return c, c.str(r, "pit_id")
		}
		listed := func(tb testing.TB, c *confCase, pit string) {
			tb.Helper()
			r := c.do("GET", "/_search/point_in_time/_all", nil)
			c.status(r, http.StatusOK)
			c.match(r, "pits.0.pit_id", pit)
			// 23h; a later search's shorter keep_alive does not shorten it.
			c.match(r, "pits.0.keep_alive", 82800000)
		}

		t.Run(file+": Create PIT, Search with PIT ID and Delete", func(t *testing.T) { // OpenSearch 2.4+
			c, pit := setup(t, file+": Create PIT, Search with PIT ID and Delete")
			// The YAML sorts with sort=foo, a source field; docs 42 and 43
			// were indexed in that order, so sort=_seq_no is equivalent.
			r := c.do("POST", "/_search?rest_total_hits_as_int=true&size=1&sort=foo", confObj{"query": confMatchAllQ, "pit": confObj{"id": pit}})
			c.notModeled(r)
			const path = "/_search?rest_total_hits_as_int=true&size=1&sort=_seq_no"
			r = c.do("POST", path, confObj{"query": confMatchAllQ, "pit": confObj{"id": pit}})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", 2)
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._id", "42")

			c.must("PUT", "/test_pit/_doc/44", confObj{"foo": 3})
			c.must("POST", "/_refresh", nil)

			r = c.do("POST", path, confObj{"query": confMatchAllQ, "pit": confObj{"id": pit, "keep_alive": "10m"}})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", 2)
			c.length(r, "hits.hits", 1)
			c.match(r, "hits.hits.0._id", "42")

			r = c.do("POST", "/test_pit/_search?rest_total_hits_as_int=true&size=1&sort=_seq_no", confObj{"query": confMatchAllQ})
			c.status(r, http.StatusOK)
			c.match(r, "hits.total", 3)
			c.length(r, "hits.hits", 1)

			listed(t, c, pit)

			r = c.do("DELETE", "/_search/point_in_time", confObj{"pit_id": confArr{pit}})
			c.status(r, http.StatusOK)
			c.match(r, "pits.0.pit_id", pit)
			c.match(r, "pits.0.successful", true)
		})

		if f == esemu.FlavorOpenSearch3 { // skip: version " - 2.9.99"
			t.Run(file+": Delete all", func(t *testing.T) {
				c, pit := setup(t, file+": Delete all")
				listed(t, c, pit)
				r := c.do("DELETE", "/_search/point_in_time/_all", nil)
				c.status(r, http.StatusOK)
				c.match(r, "pits.0.pit_id", pit)
				c.match(r, "pits.0.successful", true)
				r = c.do("DELETE", "/_search/point_in_time/_all", nil)
				c.status(r, http.StatusOK)
				c.match(r, "pits", confArr{})
				c.length(r, "pits", 0)
			})
		}
	})
}
