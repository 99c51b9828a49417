package esemu_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// readReply sends one request to c and decodes its JSON answer.
func readReply(tb testing.TB, c *esemu.Cluster, method, path, body string) (int, map[string]any) {
	tb.Helper()
	req, err := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return resp.StatusCode, out
}

// shardsFailed is _shards.failed of an answer, or -1 without one.
func shardsFailed(m map[string]any) int {
	sh, ok := m["_shards"].(map[string]any)
	if !ok {
		return -1
	}
	n, _ := sh["failed"].(float64)
	return int(n)
}

// TestCluster_FailedCopyFallsOver: as ES's search does, a shard request
// that fails on one copy is sent to the shard's next copy, whatever copy a
// preference starts at, for searches, counts, scrolls and opening a point
// in time; the shard fails only when every copy did; a PIT page, bound to
// its copy, fails at once.
func TestCluster_FailedCopyFallsOver(t *testing.T) {
	c, err := esemu.New(esemu.Config{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if st, _ := readReply(t, c, "PUT", "/ix", `{"settings":{"number_of_shards":1,"number_of_replicas":1}}`); st != 200 {
		t.Fatalf("create index: HTTP %d", st)
	}
	if st, _ := readReply(t, c, "PUT", "/ix/_doc/x?refresh=true", `{"v":1}`); st != 201 {
		t.Fatalf("index x: HTTP %d", st)
	}
	// A PIT search pins no index; its id comes from the open.
	pitPage := func(t *testing.T, open map[string]any) (int, map[string]any) {
		b, _ := json.Marshal(map[string]any{"pit": map[string]any{"id": open["id"]}, "sort": []any{"_shard_doc"}})
		return readReply(t, c, "POST", "/_search", string(b))
	}
	reads := []struct {
		name string
		read func(t *testing.T, pref string) (int, map[string]any)
	}{
		{"search", func(t *testing.T, pref string) (int, map[string]any) {
			return readReply(t, c, "POST", "/ix/_search?preference="+pref, `{}`)
		}},
		{"count", func(t *testing.T, pref string) (int, map[string]any) {
			return readReply(t, c, "GET", "/ix/_count?preference="+pref, "")
		}},
		{"scroll", func(t *testing.T, pref string) (int, map[string]any) {
			return readReply(t, c, "POST", "/ix/_search?scroll=1m&preference="+pref, `{}`)
		}},
		{"pit", func(t *testing.T, pref string) (int, map[string]any) {
			st, open := readReply(t, c, "POST", "/ix/_pit?keep_alive=1m&preference="+pref, "")
			if st != 200 || shardsFailed(open) != 0 {
				return st, open
			}
			return pitPage(t, open)
		}},
	}
	// Preferences that start at either copy: custom strings (their hash
	// picks the first copy), and the shard pinned to each node's copy.
	prefs := []string{"", url.QueryEscape("_shards:0")}
	for _, n := range c.Nodes() {
		prefs = append(prefs, url.QueryEscape("_shards:0|_prefer_nodes:"+n.ID))
	}
	prefs = append(prefs, "a", "b", "c", "d", "e", "f", "g", "h")
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			for _, which := range []string{esemu.CopyPrimary, esemu.CopyReplica} {
				for _, pref := range prefs {
					if err := c.FailShardSearches("ix", 0, which, 1); err != nil {
						t.Fatal(err)
					}
					if st, m := r.read(t, pref); st != 200 || shardsFailed(m) != 0 {
						t.Errorf("%s copy failing, preference %q: HTTP %d, %d shards failed, want 200 from the other copy: %v", which, pref, st, shardsFailed(m), m)
					}
					if err := c.StopFailingShardSearches("ix", 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.FailShardSearches("ix", 0, esemu.CopyAny, 1); err != nil {
				t.Fatal(err)
			}
			if st, m := r.read(t, prefs[1]); st == 200 && shardsFailed(m) == 0 {
				t.Errorf("every copy failing: the read succeeded: %v", m)
			}
			if err := c.StopFailingShardSearches("ix", 0); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("pit page", func(t *testing.T) {
		st, open := readReply(t, c, "POST", "/ix/_pit?keep_alive=1m&preference="+prefs[1], "")
		if st != 200 {
			t.Fatalf("open PIT: HTTP %d: %v", st, open)
		}
		if err := c.FailShardSearches("ix", 0, esemu.CopyAny, 1); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.StopFailingShardSearches("ix", 0) }()
		if st, m := pitPage(t, open); st == 200 && shardsFailed(m) == 0 {
			t.Errorf("the PIT's copy failing: the page succeeded: %v", m)
		}
	})
}

// TestCluster_PreferenceAfterShards: "_shards:N|" may be followed by a
// preference type (_local, _prefer_nodes:…); a custom string after it is a
// 400 naming it on Elasticsearch 7 and OpenSearch, and taken as a custom
// string on Elasticsearch 8+ (as testdata/golden/*/42-preference-custom.json
// recorded); a custom string alone is fine everywhere.
func TestCluster_PreferenceAfterShards(t *testing.T) {
	for _, f := range []esemu.Flavor{esemu.FlavorES7, esemu.FlavorES9, esemu.FlavorOpenSearch2} {
		t.Run(string(f), func(t *testing.T) {
			testPreferenceAfterShards(t, f)
		})
	}
}

func testPreferenceAfterShards(t *testing.T, f esemu.Flavor) {
	c, err := esemu.New(esemu.Config{Flavor: f, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if st, _ := readReply(t, c, "PUT", "/ix", `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`); st != 200 {
		t.Fatalf("create index: HTTP %d", st)
	}
	node := c.Nodes()[1].ID
	customAfterShards, reason := 400, "no Preference for [escf-scan]"
	if f == esemu.FlavorES9 {
		customAfterShards, reason = 200, ""
	}
	tests := []struct {
		name, pref string
		want       int
		reason     string
	}{
		{name: "shards alone", pref: "_shards:1", want: 200},
		{name: "shards then local", pref: "_shards:1|_local", want: 200},
		{name: "shards then prefer nodes", pref: "_shards:1|_prefer_nodes:" + node, want: 200},
		{name: "custom alone", pref: "session-7", want: 200},
		{name: "shards then custom", pref: "_shards:1|escf-scan", want: customAfterShards, reason: reason},
	}
	pit := "/ix/_pit?keep_alive=1m&preference="
	if f.OpenSearch() {
		pit = "/ix/_search/point_in_time?keep_alive=1m&preference="
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/ix/_search?preference=", "/ix/_count?preference=", pit} {
				st, m := readReply(t, c, "POST", path+url.QueryEscape(tt.pref), "")
				if st != tt.want {
					t.Fatalf("POST %s%s: HTTP %d, want %d: %v", path, tt.pref, st, tt.want, m)
				}
				if tt.reason != "" && !strings.Contains(fmt.Sprint(m), tt.reason) {
					t.Fatalf("POST %s%s: %v, want the reason %q", path, tt.pref, m, tt.reason)
				}
			}
		})
	}
}

// TestCluster_FiltersAggregation: an anonymous filters aggregation counts
// each filter's matches, one bucket per filter in order (the empty ones
// too), whether the filters are disjoint ranges on _seq_no (counted by
// binary search), overlapping ones or other queries; the keyed form and
// other parameters are refused as not modeled.
func TestCluster_FiltersAggregation(t *testing.T) {
	c, err := esemu.New(esemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	readReply(t, c, "PUT", "/f", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	var bulk strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&bulk, "{\"index\":{\"_index\":\"f\",\"_id\":\"d%d\"}}\n{}\n", i)
	}
	bulk.WriteString("{\"delete\":{\"_index\":\"f\",\"_id\":\"d3\"}}\n") // seq no 3 is gone
	req, _ := http.NewRequest("POST", c.URL()+"/_bulk?refresh=true", strings.NewReader(bulk.String()))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rng := func(gt, lte int) string { return fmt.Sprintf(`{"range":{"_seq_no":{"gt":%d,"lte":%d}}}`, gt, lte) }
	tests := []struct {
		name    string
		query   string // "" none
		filters []string
		want    []float64
	}{
		{"disjoint ranges", "", []string{rng(-1, 1), rng(1, 5), rng(20, 30), rng(5, 9)}, []float64{2, 3, 0, 4}},
		{"overlapping ranges", "", []string{rng(-1, 5), rng(1, 9)}, []float64{5, 7}},
		{"other queries", "", []string{`{"ids":{"values":["d1","d3","d4"]}}`, `{"match_all":{}}`}, []float64{2, 9}},
		// es.SeqNoCounts: the query is the union of the filters' ranges;
		// a document outside it is counted by no filter.
		{"under a range query", rng(-1, 5), []string{rng(-1, 1), rng(1, 9)}, []float64{2, 3}},
		{"under a bool should of ranges", `{"bool":{"should":[` + rng(-1, 1) + `,` + rng(6, 8) + `],"minimum_should_match":1}}`,
			[]string{rng(-1, 1), rng(1, 9)}, []float64{2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			query := ""
			if tt.query != "" {
				query = `"query":` + tt.query + `,`
			}
			status, body := readReply(t, c, "POST", "/f/_search?preference=_shards:0",
				`{"size":0,"track_total_hits":false,`+query+`"aggs":{"seq":{"filters":{"filters":[`+strings.Join(tt.filters, ",")+`]}}}}`)
			if status != 200 {
				t.Fatalf("status %d: %v", status, body)
			}
			aggs, _ := body["aggregations"].(map[string]any)
			seq, _ := aggs["seq"].(map[string]any)
			buckets, _ := seq["buckets"].([]any)
			var got []float64
			for _, b := range buckets {
				n, _ := b.(map[string]any)["doc_count"].(float64)
				got = append(got, n)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("doc counts %v, want %v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{
		`{"filters":{"a":{"match_all":{}}}}`,
		`{"filters":[{"match_all":{}}],"other_bucket":true}`,
	} {
		status, body := readReply(t, c, "POST", "/f/_search", `{"size":0,"aggs":{"seq":{"filters":`+bad+`}}}`)
		if status != 400 || !strings.Contains(fmt.Sprint(body), "does not model") {
			t.Errorf("filters %s: status %d %v, want a 400 saying it is not modeled", bad, status, body)
		}
	}
}
