package es

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestClient_SeqNoCounts_RefusesPartialOrOddAnswers: a count of seq-no
// ranges is data only from one whole shard, in time, with one bucket per
// span and no more documents in a bucket than its span has seq nos.
func TestClient_SeqNoCounts_RefusesPartialOrOddAnswers(t *testing.T) {
	spans := []SeqSpan{{After: -1, UpTo: 63}, {After: 63, UpTo: 127}}
	agg := func(buckets string) string {
		return `{"took":1,"timed_out":false,` + okShards + `,"hits":{"hits":[]},"aggregations":{"seq":{"buckets":[` + buckets + `]}}}`
	}
	tests := []struct {
		name string
		body string
		want error
		text string
	}{
		{"failed shard", `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":0,"skipped":0,"failed":1,"failures":[{"shard":0,"index":"i","node":"n","reason":{"type":"node_disconnected_exception","reason":"gone"}}]},"hits":{"hits":[]}}`,
			ErrPartial, "node_disconnected_exception"},
		{"timed out", strings.Replace(agg(`{"doc_count":1},{"doc_count":2}`), `"timed_out":false`, `"timed_out":true`, 1), ErrPartial, "timed out"},
		{"no timed_out", strings.Replace(agg(`{"doc_count":1},{"doc_count":2}`), `"timed_out":false,`, ``, 1), ErrPartial, "timed out"},
		{"more than one shard", `{"timed_out":false,"_shards":{"total":2,"successful":2,"skipped":0,"failed":0},"aggregations":{"seq":{"buckets":[{"doc_count":1},{"doc_count":2}]}}}`, ErrMalformed, "2 shards"},
		{"no aggregation", `{"timed_out":false,` + okShards + `,"hits":{"hits":[]}}`, ErrMalformed, "without the counts"},
		{"a bucket short", agg(`{"doc_count":1}`), ErrMalformed, "1 buckets for 2 spans"},
		{"a bucket too many", agg(`{"doc_count":1},{"doc_count":2},{"doc_count":0}`), ErrMalformed, "3 buckets for 2 spans"},
		{"no doc count", agg(`{"doc_count":1},{}`), ErrMalformed, "bucket 1"},
		{"negative", agg(`{"doc_count":-1},{"doc_count":2}`), ErrMalformed, "bucket 0"},
		{"more documents than seq nos", agg(`{"doc_count":65},{"doc_count":2}`), ErrMalformed, "bucket 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := canned(t, 200, tt.body)
			got, err := c.SeqNoCounts(context.Background(), "i", 0, "n1", spans)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got != nil {
				t.Errorf("a refused answer returned counts %v", got)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err %q does not say %q", err, tt.text)
			}
		})
	}
	t.Run("good answer", func(t *testing.T) {
		c := canned(t, 200, agg(`{"doc_count":64},{"doc_count":0}`))
		got, err := c.SeqNoCounts(context.Background(), "i", 0, "n1", spans)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{64, 0}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("counts %v, want %v", got, want)
		}
	})
	t.Run("bad spans are not sent", func(t *testing.T) {
		c := canned(t, 500, `{}`)
		for _, bad := range [][]SeqSpan{nil, {{After: 5, UpTo: 5}}, make([]SeqSpan, MaxCountSpans+1)} {
			if _, err := c.SeqNoCounts(context.Background(), "i", 0, "", bad); err == nil || errors.Is(err, ErrMalformed) {
				t.Errorf("%d spans: err = %v, want a refusal before any request", len(bad), err)
			}
		}
	})
}

// TestWithRequestStats: requests made with the context are counted, with
// their time; others are not.
func TestWithRequestStats(t *testing.T) {
	c := canned(t, 200, `{"count":3,`+okShards+`}`)
	var rs RequestStats
	ctx := WithRequestStats(context.Background(), &rs)
	for i := 0; i < 2; i++ {
		if _, err := c.Count(ctx, "i", 0, "", -1, 5); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Count(context.Background(), "i", 0, "", -1, 5); err != nil {
		t.Fatal(err)
	}
	if got := rs.Requests(); got != 2 || rs.Time() <= 0 {
		t.Fatalf("counted %d requests in %s, want 2 in some time", got, rs.Time())
	}
}

// TestSeqNoUnion: SeqNoCounts's query matches exactly the seq nos of its
// spans: touching or overlapping spans joined, disjoint ones as a bool
// should, more runs than MaxHistogramSpans as the range from the first
// seq no to the last.
func TestSeqNoUnion(t *testing.T) {
	rng := func(after, upTo int64) string {
		return fmt.Sprintf(`{"range":{"_seq_no":{"gt":%d,"lte":%d}}}`, after, upTo)
	}
	many := make([]SeqSpan, MaxHistogramSpans+1)
	for i := range many {
		many[i] = SeqSpan{After: int64(10 * i), UpTo: int64(10*i + 5)}
	}
	tests := []struct {
		name  string
		spans []SeqSpan
		want  string
	}{
		{"one", []SeqSpan{{-1, 63}}, rng(-1, 63)},
		{"touching, out of order", []SeqSpan{{63, 127}, {-1, 63}}, rng(-1, 127)},
		{"overlapping", []SeqSpan{{-1, 100}, {50, 80}, {90, 200}}, rng(-1, 200)},
		{"disjoint", []SeqSpan{{500, 600}, {-1, 63}, {127, 191}},
			`{"bool":{"minimum_should_match":1,"should":[` + rng(-1, 63) + `,` + rng(127, 191) + `,` + rng(500, 600) + `]}}`},
		{"too many runs", many, rng(0, int64(10*MaxHistogramSpans+5))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(seqNoUnion(tt.spans))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tt.want {
				t.Errorf("query %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestInfo_CountsFilterByFilter: Elasticsearch from 7.11 counts a filters
// aggregation filter by filter; OpenSearch, in any mode, does not.
func TestInfo_CountsFilterByFilter(t *testing.T) {
	tests := []struct {
		name string
		info Info
		want bool
	}{
		{"Elasticsearch 7.10.2", Info{Version: "7.10.2", Distribution: ""}, false},
		{"Elasticsearch 7.11.0", Info{Version: "7.11.0"}, true},
		{"Elasticsearch 7.17.29", Info{Version: "7.17.29"}, true},
		{"Elasticsearch 9.5.3", Info{Version: "9.5.3"}, true},
		{"OpenSearch 2.19.6", Info{Version: "2.19.6", Distribution: "opensearch"}, false},
		{"OpenSearch 3.9.0", Info{Version: "3.9.0", Distribution: "opensearch"}, false},
		{"OpenSearch in compatibility mode", Info{Version: "7.10.2", CompatibilityMode: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.info.CountsFilterByFilter(); got != tt.want {
				t.Errorf("CountsFilterByFilter() = %v, want %v", got, tt.want)
			}
		})
	}
}
