package es

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// bulkRequest is what a canned _bulk server received.
type bulkRequest struct {
	method, path, contentType, body string
}

// cannedBulk serves one fixed answer and records the requests it got.
func cannedBulk(tb testing.TB, status int, answer string) (*Client, *[]bulkRequest, *atomic.Int64) {
	tb.Helper()
	var got []bulkRequest
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			got = append(got, bulkRequest{r.Method, r.URL.Path, r.Header.Get("Content-Type"), string(b)})
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	tb.Cleanup(srv.Close)
	c, err := New(Config{URLs: []string{srv.URL}})
	if err != nil {
		tb.Fatal(err)
	}
	return c, &got, &n
}

const fiveActions = `{"index":{"_index":"m","_id":"a","version":2,"version_type":"external"}}
{"x":1}
{"delete":{"_index":"m","_id":"b","version":3,"version_type":"external"}}
{"index":{"_index":"m","_id":"c","version":4,"version_type":"external"}}
{"x":2}
{"index":{"_index":"m","_id":"d","version":4,"version_type":"external"}}
{"x":"not a number"}
{"index":{"_index":"m","_id":"e","version":4,"version_type":"external"}}
{"x":3}
`

// fiveItems answers fiveActions: created, not_found, conflict, mapping
// error with a cause, rejected.
const fiveItems = `{"errors":true,"took":3,"items":[
{"index":{"_index":"m","_id":"a","_version":2,"result":"created","_shards":{"total":1,"successful":1,"failed":0},"_seq_no":0,"_primary_term":1,"status":201}},
{"delete":{"_index":"m","_id":"b","_version":3,"result":"not_found","_shards":{"total":1,"successful":1,"failed":0},"_seq_no":1,"_primary_term":1,"status":404}},
{"index":{"_index":"m","_id":"c","status":409,"error":{"type":"version_conflict_engine_exception","reason":"[c]: version conflict, current version [9] is higher or equal to the one provided [4]","index_uuid":"U","shard":"0","index":"m"}}},
{"index":{"_index":"m","_id":"d","status":400,"error":{"type":"document_parsing_exception","reason":"[1:6] failed to parse field [x] of type [long]","caused_by":{"type":"illegal_argument_exception","reason":"For input string: \"not a number\""}}}},
{"index":{"_index":"m","_id":"e","status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected execution of coordinating operation"}}}
]}`

func TestClient_Bulk(t *testing.T) {
	c, got, _ := cannedBulk(t, 200, fiveItems)
	res, err := c.Bulk(context.Background(), []byte(fiveActions))
	if err != nil {
		t.Fatal(err)
	}
	if len(*got) != 1 {
		t.Fatalf("%d requests, want 1", len(*got))
	}
	req := (*got)[0]
	if req.method != http.MethodPost || req.path != "/_bulk" || req.contentType != "application/x-ndjson" || req.body != fiveActions {
		t.Errorf("request = %s %s (%s), body %q; want POST /_bulk (application/x-ndjson) with the body as given", req.method, req.path, req.contentType, req.body)
	}
	if !res.Errors || res.Took != 3 || len(res.Items) != 5 {
		t.Fatalf("result = %+v", res)
	}
	tests := []struct {
		name      string
		want      BulkItem
		fails     bool
		temporary bool
		text      string
	}{
		{"created", BulkItem{Action: "index", Index: "m", ID: "a", Status: 201, Result: "created", Version: 2, SeqNo: 0, PrimaryTerm: 1}, false, false, ""},
		{"delete found nothing", BulkItem{Action: "delete", Index: "m", ID: "b", Status: 404, Result: "not_found", Version: 3, SeqNo: 1, PrimaryTerm: 1}, false, false, ""},
		{"version conflict", BulkItem{Action: "index", Index: "m", ID: "c", Status: 409, SeqNo: -1, ErrorType: "version_conflict_engine_exception",
			ErrorReason: "[c]: version conflict, current version [9] is higher or equal to the one provided [4]"}, true, false, "HTTP 409 version_conflict_engine_exception"},
		{"mapping error with its cause", BulkItem{Action: "index", Index: "m", ID: "d", Status: 400, SeqNo: -1, ErrorType: "document_parsing_exception",
			ErrorReason: `[1:6] failed to parse field [x] of type [long] (caused by illegal_argument_exception: For input string: "not a number")`}, true, false, "For input string"},
		{"rejected", BulkItem{Action: "index", Index: "m", ID: "e", Status: 429, SeqNo: -1, ErrorType: "es_rejected_execution_exception",
			ErrorReason: "rejected execution of coordinating operation"}, true, true, "bulk index m/e: HTTP 429"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := res.Items[i]
			if got != tt.want {
				t.Errorf("item %d = %+v\nwant      %+v", i, got, tt.want)
			}
			err := got.Err()
			if (err != nil) != tt.fails {
				t.Fatalf("Err() = %v, want failure %v", err, tt.fails)
			}
			if err == nil {
				return
			}
			var ee *Error
			if !errors.As(err, &ee) || ee.Temporary() != tt.temporary || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("Err() = %v (temporary %v); want an *Error saying %q, temporary %v", err, ee != nil && ee.Temporary(), tt.text, tt.temporary)
			}
		})
	}
}

func TestClient_Bulk_IndexAnsweredAsCreate(t *testing.T) {
	c, _, _ := cannedBulk(t, 200, `{"took":1,"errors":false,"items":[{"create":{"_index":"m","_type":"_doc","_id":"a","_version":1,"result":"created","status":201}}]}`)
	res, err := c.Bulk(context.Background(), []byte(`{"index":{"_index":"m","_id":"a","op_type":"create"}}`+"\n{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Items[0]; got.Action != "create" || got.Err() != nil || got.SeqNo != -1 {
		t.Fatalf("item = %+v", got)
	}
}

func TestClient_Bulk_RequestFailures(t *testing.T) {
	const oneAction = `{"delete":{"_index":"m","_id":"a"}}` + "\n"
	tests := []struct {
		name      string
		status    int
		answer    string
		want      error
		temporary bool
		text      string
	}{
		{"429", 429, `{"error":{"root_cause":[{"type":"es_rejected_execution_exception","reason":"rejected"}],"type":"es_rejected_execution_exception","reason":"rejected"},"status":429}`,
			nil, true, "HTTP 429 es_rejected_execution_exception"},
		{"503", 503, `{"error":"unavailable","status":503}`, nil, true, "HTTP 503"},
		{"401", 401, `Unauthorized`, ErrUnauthorized, false, "Unauthorized"},
		{"413 from a proxy", 413, `<html>Request Entity Too Large</html>`, nil, false, "HTTP 413"},
		{"fewer items than actions", 200, `{"took":1,"errors":false,"items":[]}`, ErrMalformed, false, "0 items for 1 actions"},
		{"no items", 200, `{"acknowledged":true}`, ErrMalformed, false, "no items"},
		{"item for another action", 200, `{"items":[{"index":{"_index":"m","_id":"a","status":201}}]}`, ErrMalformed, false, `answers "index" to action "delete"`},
		{"item for another id", 200, `{"items":[{"delete":{"_index":"m","_id":"z","status":200}}]}`, ErrMalformed, false, `_id "z" answers the action for _id "a"`},
		{"item without status", 200, `{"items":[{"delete":{"_index":"m","_id":"a"}}]}`, ErrMalformed, false, "no status"},
		{"item with two actions", 200, `{"items":[{"delete":{"status":200},"index":{"status":200}}]}`, ErrMalformed, false, "2 keys"},
		{"not JSON", 200, `<html>proxy</html>`, ErrMalformed, false, "undecodable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, _ := cannedBulk(t, tt.status, tt.answer)
			res, err := c.Bulk(context.Background(), []byte(oneAction))
			var ee *Error
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if ee.Temporary() != tt.temporary || ee.Status != tt.status || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v (status %d, temporary %v); want status %d, temporary %v, saying %q", err, ee.Status, ee.Temporary(), tt.status, tt.temporary, tt.text)
			}
			if res.Items != nil {
				t.Errorf("a failed request returned %d items", len(res.Items))
			}
		})
	}
	t.Run("connection refused is temporary", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, _ := New(Config{URLs: []string{url}})
		_, err := c.Bulk(context.Background(), []byte(oneAction))
		var ee *Error
		if !errors.As(err, &ee) || !ee.Temporary() || !strings.Contains(err.Error(), "cannot connect") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestClient_Bulk_RefusesBadBodies(t *testing.T) {
	tests := []struct {
		name string
		body string
		text string
	}{
		{"empty", "", "empty body"},
		{"no final newline", `{"delete":{"_index":"m","_id":"a"}}`, "end with a newline"},
		{"blank lines only", "\n\n", "no action"},
		{"source without action", `{"x":1}` + "\n", "line 1 is not an action"},
		{"unknown action", `{"upsert":{"_id":"a"}}` + "\n{}\n", `action "upsert"`},
		{"index without source", `{"index":{"_index":"m","_id":"a"}}` + "\n", "without a source line"},
		{"two actions on a line", `{"index":{},"delete":{}}` + "\n{}\n", "line 1 is not an action"},
		{"not JSON", "index m a\n", "line 1 is not an action"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, n := cannedBulk(t, 200, `{"items":[]}`)
			_, err := c.Bulk(context.Background(), []byte(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want one saying %q", err, tt.text)
			}
			var ee *Error
			if errors.As(err, &ee) {
				t.Errorf("a bad body gave an *Error (Temporary %v): callers would retry it", ee.Temporary())
			}
			if n.Load() != 0 {
				t.Errorf("a bad body was sent")
			}
		})
	}
}
