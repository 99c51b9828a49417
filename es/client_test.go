package es

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/tlsx"
)

// canned serves one fixed answer.
func canned(tb testing.TB, status int, body string) *Client {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	tb.Cleanup(srv.Close)
	c, err := New(Config{URLs: []string{srv.URL}})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

const okShards = `"_shards":{"total":1,"successful":1,"skipped":0,"failed":0}`

func hit(id string, seq int) string {
	return `{"_index":"i","_id":"` + id + `","_version":1,"_seq_no":` + strconv.Itoa(seq) + `,"_primary_term":1,"_score":null,"_source":{"a":1},"sort":[` + strconv.Itoa(seq) + `]}`
}

func TestClient_SearchShard_RefusesPartialOrOddAnswers(t *testing.T) {
	page := ShardPage{Index: "i", Shard: 0, After: 4, UpTo: 9, Size: 3}
	tests := []struct {
		name string
		body string
		want error
		text string
	}{
		{"failed shard", `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":0,"skipped":0,"failed":1,"failures":[{"shard":0,"index":"i","node":"n","reason":{"type":"node_disconnected_exception","reason":"gone"}}]},"hits":{"hits":[]}}`,
			ErrPartial, "node_disconnected_exception"},
		{"timed out", `{"took":1,"timed_out":true,` + okShards + `,"hits":{"hits":[` + hit("a", 5) + `]}}`, ErrPartial, "timed out"},
		{"more than one shard", `{"timed_out":false,"_shards":{"total":2,"successful":2,"skipped":0,"failed":0},"hits":{"hits":[]}}`, ErrMalformed, "2 shards"},
		{"hit above the gcp", `{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("a", 10) + `]}}`, ErrMalformed, "above the global checkpoint"},
		{"hit at or below the cursor", `{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("a", 4) + `]}}`, ErrMalformed, "not above 4"},
		{"hits out of order", `{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("a", 7) + `,` + hit("b", 6) + `]}}`, ErrMalformed, "not above 7"},
		{"no seq no", `{"timed_out":false,` + okShards + `,"hits":{"hits":[{"_index":"i","_id":"a","_version":1,"_source":{}}]}}`, ErrMalformed, "no _seq_no"},
		{"no version", `{"timed_out":false,` + okShards + `,"hits":{"hits":[{"_index":"i","_id":"a","_seq_no":5,"_primary_term":1,"_source":{}}]}}`, ErrMalformed, "no _version"},
		{"no source", `{"timed_out":false,` + okShards + `,"hits":{"hits":[{"_index":"i","_id":"a","_version":1,"_seq_no":5,"_primary_term":1}]}}`, ErrMalformed, "no _source"},
		{"other index", `{"timed_out":false,` + okShards + `,"hits":{"hits":[` + strings.Replace(hit("a", 5), `"_index":"i"`, `"_index":"j"`, 1) + `]}}`, ErrMalformed, `index "j"`},
		{"too many hits", `{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("a", 5) + `,` + hit("b", 6) + `,` + hit("c", 7) + `,` + hit("d", 8) + `]}}`, ErrMalformed, "4 hits for size 3"},
		{"not JSON", `<html>proxy error</html>`, ErrMalformed, "undecodable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := canned(t, 200, tt.body)
			hits, err := c.SearchShard(context.Background(), page)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if hits != nil {
				t.Errorf("a refused answer returned %d hits", len(hits))
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err %q does not say %q", err, tt.text)
			}
		})
	}
	t.Run("good page", func(t *testing.T) {
		c := canned(t, 200, `{"timed_out":false,`+okShards+`,"hits":{"hits":[`+hit("a", 5)+`,`+hit("b", 9)+`]}}`)
		hits, err := c.SearchShard(context.Background(), page)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 2 || hits[0].ID != "a" || hits[0].SeqNo != 5 || hits[1].SeqNo != 9 || string(hits[1].Source) != `{"a":1}` {
			t.Fatalf("hits = %+v", hits)
		}
	})
}

// TestClient_ReadPage_ReusesThePage: pages read into one Page come out
// whole, the second in the first's memory; a refused page leaves none.
func TestClient_ReadPage_ReusesThePage(t *testing.T) {
	bodies := []string{
		`{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("a", 5) + `,` + hit("b", 6) + `]}}`,
		`{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("c", 7) + `]}}`,
		`{"timed_out":false,` + okShards + `,"hits":{"hits":[` + hit("d", 3) + `]}}`,
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(bodies[n]))
		n++
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{URLs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pg Page
	if err := c.ReadPage(ctx, ShardPage{Index: "i", After: 4, UpTo: 9, Size: 2}, &pg); err != nil {
		t.Fatal(err)
	}
	if len(pg.Hits) != 2 || pg.Hits[1].ID != "b" {
		t.Fatalf("page 1: %+v", pg.Hits)
	}
	first := &pg.Hits[0]
	if err := c.ReadPage(ctx, ShardPage{Index: "i", After: 6, UpTo: 9, Size: 2}, &pg); err != nil {
		t.Fatal(err)
	}
	if len(pg.Hits) != 1 || pg.Hits[0].ID != "c" || pg.Hits[0].SeqNo != 7 || string(pg.Hits[0].Source) != `{"a":1}` {
		t.Fatalf("page 2: %+v", pg.Hits)
	}
	if &pg.Hits[0] != first {
		t.Error("page 2 did not reuse page 1's hits")
	}
	if err := c.ReadPage(ctx, ShardPage{Index: "i", After: 7, UpTo: 9, Size: 2}, &pg); !errors.Is(err, ErrMalformed) || pg.Hits != nil {
		t.Fatalf("page 3 (below the cursor): %v, %d hits", err, len(pg.Hits))
	}
}

func TestClient_Errors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		want      error
		temporary bool
		text      string
	}{
		{"index missing", 404, `{"error":{"root_cause":[{"type":"index_not_found_exception","reason":"no such index [x]"}],"type":"index_not_found_exception","reason":"no such index [x]"},"status":404}`,
			ErrNotFound, false, "no such index [x]"},
		{"ES 401", 401, `{"error":{"root_cause":[{"type":"security_exception","reason":"unable to authenticate user [u]"}],"type":"security_exception","reason":"unable to authenticate user [u]"},"status":401}`,
			ErrUnauthorized, false, "security_exception"},
		{"OpenSearch 401 plain text", 401, `Unauthorized`, ErrUnauthorized, false, "Unauthorized"},
		{"a proxy's 401 in HTML (haproxy)", 401, "<html><body><h1>401 Unauthorized</h1>\nYou need a valid user and password to access this content.\n</body></html>\n",
			ErrUnauthorized, false, "HTTP 401: <html><body><h1>401 Unauthorized</h1> You need a valid user and password to access this content. </body></html>"},
		{"429", 429, `{"error":{"type":"es_rejected_execution_exception","reason":"rejected"},"status":429}`, nil, true, "es_rejected_execution_exception"},
		{"503 string error", 503, `{"error":"service unavailable","status":503}`, nil, true, "service unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := canned(t, tt.status, tt.body)
			_, err := c.Stats(context.Background(), []string{"x"})
			var ee *Error
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if ee.Temporary() != tt.temporary {
				t.Errorf("Temporary() = %v, want %v", ee.Temporary(), tt.temporary)
			}
			if ee.Status != tt.status || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v (status %d)", err, ee.Status)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line", err)
			}
		})
	}
	t.Run("stats with a failed shard are not data", func(t *testing.T) {
		c := canned(t, 200, `{"_shards":{"total":2,"successful":1,"failed":1},"indices":{"x":{"uuid":"U","shards":{}}}}`)
		st, err := c.Stats(context.Background(), []string{"x"})
		if !errors.Is(err, ErrPartial) || st != nil {
			t.Fatalf("Stats = %v, %v; want ErrPartial and no stats", st, err)
		}
	})
	t.Run("refresh that failed on a copy", func(t *testing.T) {
		c := canned(t, 200, `{"_shards":{"total":2,"successful":1,"failed":1}}`)
		if err := c.Refresh(context.Background(), "x"); !errors.Is(err, ErrPartial) {
			t.Fatalf("Refresh err = %v, want ErrPartial", err)
		}
	})
	t.Run("refresh with an unassigned replica is fine", func(t *testing.T) {
		c := canned(t, 200, `{"_shards":{"total":2,"successful":1,"failed":0}}`)
		if err := c.Refresh(context.Background(), "x"); err != nil {
			t.Fatalf("Refresh err = %v", err)
		}
	})
	t.Run("connection refused is temporary", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, _ := New(Config{URLs: []string{url}})
		_, err := c.Info(context.Background())
		var ee *Error
		if !errors.As(err, &ee) || !ee.Temporary() || ee.Status != 0 || !strings.Contains(err.Error(), "cannot connect") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestConfig_Validate(t *testing.T) {
	for _, u := range []string{"localhost:9200", "ftp://h", "http://", "://x"} {
		if err := (Config{URLs: []string{u}}).Validate(); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
	err := (Config{URLs: []string{"ftp://u:secret@h"}}).Validate()
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password or is nil: %v", err)
	}
	if err := (Config{URLs: []string{"https://h:9200", "http://10.0.0.1:9200"}}).Validate(); err != nil {
		t.Errorf("good URLs refused: %v", err)
	}
}

func TestClient_TLSErrors(t *testing.T) {
	root := `{"name":"n","cluster_name":"c","cluster_uuid":"u","version":{"number":"9.0.0"}}`
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(root)) })
	tlsSrv := httptest.NewTLSServer(handler)
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	tests := []struct {
		name    string
		cfg     Config
		problem tlsx.Problem // 0: success
	}{
		{"untrusted", Config{URLs: []string{tlsSrv.URL}}, tlsx.Untrusted},
		{"with the CA", Config{URLs: []string{tlsSrv.URL}, CACertPEM: caPEM}, 0},
		{"insecure", Config{URLs: []string{tlsSrv.URL}, InsecureSkipVerify: true}, 0},
		{"https to plain HTTP", Config{URLs: []string{"https://" + strings.TrimPrefix(plain.URL, "http://")}}, tlsx.NotTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { infoTLSProblem(t, tt.cfg, tt.problem) })
	}
	t.Run("config", func(t *testing.T) {
		for _, cfg := range []Config{
			{CACertPEM: caPEM, InsecureSkipVerify: true},
			{CACertPEM: []byte("not PEM")},
			{CACertPEM: caPEM, Transport: http.DefaultTransport},
		} {
			if err := cfg.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", cfg)
			}
		}
	})
}

// TestClient_Resolve_MissingName: a concrete name that exists nowhere is
// ErrNotFound on every engine: Elasticsearch 8+ answers 404, Elasticsearch
// 7 and OpenSearch 200 with empty lists (the golden responses of
// internal/esemu hold both). A pattern matching nothing is not an error.
func TestClient_Resolve_MissingName(t *testing.T) {
	empty := `{"indices":[],"aliases":[],"data_streams":[]}`
	notFound := `{"error":{"root_cause":[{"type":"index_not_found_exception","reason":"no such index [nope]"}],"type":"index_not_found_exception","reason":"no such index [nope]"},"status":404}`
	tests := []struct {
		name, expr, body string
		status           int
		wantNotFound     bool
	}{
		{name: "ES 8+: 404", expr: "nope", status: 404, body: notFound, wantNotFound: true},
		{name: "ES 7 and OpenSearch: 200, nothing", expr: "nope", status: 200, body: empty, wantNotFound: true},
		{name: "two names, nothing", expr: "nope,neither", status: 200, body: empty, wantNotFound: true},
		{name: "pattern matching nothing", expr: "nope-*", status: 200, body: empty},
		{name: "name with an exclusion", expr: "logs,-logs-debug", status: 200, body: empty},
		{name: "date math", expr: "<logs-{now/d}>", status: 200, body: empty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := canned(t, tt.status, tt.body).Resolve(context.Background(), tt.expr, false)
			if got := IsNotFound(err); got != tt.wantNotFound {
				t.Fatalf("Resolve(%q) = %v: not found %v, want %v", tt.expr, err, got, tt.wantNotFound)
			}
			if !tt.wantNotFound && err != nil {
				t.Fatalf("Resolve(%q) = %v, want no error", tt.expr, err)
			}
		})
	}
}

// TestClient_Info_TriesEveryNode: with several URLs, a node that is down
// fails no request (a relay starting during a rolling restart reads the
// cluster's info, the targets and their settings): a refused connection is
// sent to the next node; only when none answers is it an error.
func TestClient_Info_TriesEveryNode(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"n0","cluster_name":"c","cluster_uuid":"u","version":{"number":"8.19.21","build_flavor":"default"},"tagline":"You Know, for Search"}`))
	}))
	t.Cleanup(up.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, urls := range [][]string{{downURL, up.URL}, {up.URL, downURL}} {
		c, err := New(Config{URLs: urls})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ { // the client takes the nodes in turn
			info, err := c.Info(context.Background())
			if err != nil || info.Version != "8.19.21" {
				t.Fatalf("Info with %v (try %d) = %+v, %v; want the up node's answer", urls, i, info, err)
			}
		}
	}
	c, err := New(Config{URLs: []string{downURL, downURL}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot connect") {
		t.Fatalf("Info with every node down = %v, want cannot connect", err)
	}
}

// TestClient_Pin: a pinned client sends every request to one node, the
// nodes taken in turn; what Info learnt (the engine, for the PIT paths)
// holds for the pinned clients too.
func TestClient_Pin(t *testing.T) {
	hits := make([]int, 2)
	var srvs []*httptest.Server
	for i := range hits {
		i := i
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i]++
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"name":"n","cluster_name":"c","cluster_uuid":"u","version":{"number":"2.19.6","distribution":"opensearch"},"tagline":"The OpenSearch Project: https://opensearch.org/"}`))
		}))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	c, err := New(Config{URLs: []string{srvs[0].URL, srvs[1].URL}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 4; round++ {
		p := c.Pin()
		before := append([]int(nil), hits...)
		for i := 0; i < 3; i++ {
			if _, err := p.Info(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		moved := 0
		for i := range hits {
			if hits[i] != before[i] {
				moved++
				if hits[i]-before[i] != 3 {
					t.Fatalf("round %d: node %d got %d of the pinned client's 3 requests", round, i, hits[i]-before[i])
				}
			}
		}
		if moved != 1 {
			t.Fatalf("round %d: the pinned client's requests went to %d nodes, want 1", round, moved)
		}
		if !p.openSearchPaths() {
			t.Fatal("a pinned client does not know the engine its parent's Info learnt")
		}
	}
	if hits[0] == 0 || hits[1] == 0 {
		t.Fatalf("successive pins did not take the nodes in turn: %v", hits)
	}
	single, err := New(Config{URLs: []string{srvs[0].URL}})
	if err != nil {
		t.Fatal(err)
	}
	if single.Pin() != single {
		t.Fatal("with one URL, Pin should return the client itself")
	}
}
