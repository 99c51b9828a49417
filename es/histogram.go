package es

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
)

// SeqSpan is the seq nos After < s <= UpTo.
type SeqSpan struct{ After, UpTo int64 }

// MaxHistogramBuckets is the most buckets SeqNoHistogram asks for in one
// request: below search.max_buckets of every engine (10,000 on
// Elasticsearch 7.0–7.8, 65,535 or more since).
const MaxHistogramBuckets = 5000

// MaxHistogramSpans is the most spans one SeqNoHistogram request joins, far
// below indices.query.bool.max_clause_count (1,024 at least).
const MaxHistogramSpans = 512

// SeqNoHistogram counts the live documents of one shard per bucket of
// interval seq nos, over the union of spans: a histogram aggregation on
// _seq_no, size 0, pinned like Count. It returns doc counts by bucket start
// (empty buckets are absent). The spans must be sorted and disjoint, and
// may cover at most MaxHistogramBuckets buckets and MaxHistogramSpans
// spans. A partial, timed-out or malformed answer (a key that is not a
// multiple of interval, or outside the spans) is an error.
func (c *Client) SeqNoHistogram(ctx context.Context, index string, shard int, node string, spans []SeqSpan, interval int64) (map[int64]int64, error) {
	op := fmt.Sprintf("histogram of _seq_no in shard %d of %s", shard, index)
	if interval <= 0 || len(spans) == 0 || len(spans) > MaxHistogramSpans {
		return nil, fmt.Errorf("%s: %d spans at interval %d: want 1..%d spans and an interval above 0", op, len(spans), interval, MaxHistogramSpans)
	}
	var buckets int64
	clauses := make([]any, len(spans))
	for i, s := range spans {
		if s.UpTo <= s.After || (i > 0 && s.After < spans[i-1].UpTo) {
			return nil, fmt.Errorf("%s: span (%d, %d] is empty or out of order", op, s.After, s.UpTo)
		}
		buckets += floorDiv(s.UpTo, interval) - floorDiv(s.After+1, interval) + 1
		clauses[i] = map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": s.After, "lte": s.UpTo}}}
	}
	if buckets > MaxHistogramBuckets {
		return nil, fmt.Errorf("%s: the spans cover %d buckets, more than %d", op, buckets, MaxHistogramBuckets)
	}
	query := clauses[0]
	if len(clauses) > 1 {
		query = map[string]any{"bool": map[string]any{"should": clauses, "minimum_should_match": 1}}
	}
	body := map[string]any{
		"size":             0,
		"track_total_hits": false,
		"query":            query,
		"aggs":             map[string]any{"seq": map[string]any{"histogram": map[string]any{"field": "_seq_no", "interval": interval, "min_doc_count": 1}}},
	}
	type bucket struct {
		Key      *float64 `json:"key"`
		DocCount *int64   `json:"doc_count"`
	}
	got, err := searchOneShard[bucket](ctx, c, op, index, shard, node, body, "the histogram")
	if err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(got))
	for _, b := range got {
		if b.Key == nil || b.DocCount == nil || *b.DocCount < 0 || *b.Key != math.Trunc(*b.Key) || math.Abs(*b.Key) > 1<<53 {
			return nil, &Error{Op: op, Status: 200, Reason: "a histogram bucket without a whole key or a doc count", Err: ErrMalformed}
		}
		key := int64(*b.Key)
		if key%interval != 0 || !spansTouch(spans, key, key+interval-1) {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("histogram bucket %d is not a multiple of %d inside the spans asked for", key, interval), Err: ErrMalformed}
		}
		if _, dup := out[key]; dup {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("histogram bucket %d appears twice", key), Err: ErrMalformed}
		}
		if *b.DocCount > 0 {
			out[key] = *b.DocCount
		}
	}
	return out, nil
}

// spansTouch reports whether [lo, hi] meets one of the spans.
func spansTouch(spans []SeqSpan, lo, hi int64) bool {
	for _, s := range spans {
		if lo <= s.UpTo && hi > s.After {
			return true
		}
	}
	return false
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// seqNoUnion is a query matching the seq nos of spans (non-empty): their
// union as one range or a bool should of at most MaxHistogramSpans ranges,
// else the range from the first seq no to the last.
func seqNoUnion(spans []SeqSpan) any {
	runs := slices.Clone(spans)
	slices.SortFunc(runs, func(a, b SeqSpan) int { return cmp.Compare(a.After, b.After) })
	merged := runs[:1]
	for _, s := range runs[1:] {
		if last := &merged[len(merged)-1]; s.After <= last.UpTo {
			last.UpTo = max(last.UpTo, s.UpTo)
		} else {
			merged = append(merged, s)
		}
	}
	rng := func(s SeqSpan) any {
		return map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": s.After, "lte": s.UpTo}}}
	}
	if len(merged) > MaxHistogramSpans {
		merged = []SeqSpan{{After: merged[0].After, UpTo: merged[len(merged)-1].UpTo}}
	}
	if len(merged) == 1 {
		return rng(merged[0])
	}
	clauses := make([]any, len(merged))
	for i, s := range merged {
		clauses[i] = rng(s)
	}
	return map[string]any{"bool": map[string]any{"should": clauses, "minimum_should_match": 1}}
}

// MaxCountSpans is the most spans one SeqNoCounts request counts: a
// filters aggregation of that many buckets, far below search.max_buckets
// (10,000 on Elasticsearch 7.0–7.8, 65,535 or more since).
const MaxCountSpans = 1024

// SeqNoCounts counts the live documents of one shard in each span: one
// filters aggregation with a range on _seq_no per span, size 0, pinned
// like Count, under a query that matches only the spans' seq nos (their
// union as at most MaxHistogramSpans ranges, else the range from the
// first to the last): an engine that runs the filters document by
// document (OpenSearch 2, whose cost was measured to grow with documents ×
// filters, docs/PERFORMANCE.md) then visits only the documents counted.
// It returns one count per span, in order. The spans may overlap; there must
// be 1..MaxCountSpans of them. A partial, timed-out or malformed answer
// (a bucket count that is not the spans') is an error.
func (c *Client) SeqNoCounts(ctx context.Context, index string, shard int, node string, spans []SeqSpan) ([]int64, error) {
	op := fmt.Sprintf("count _seq_no ranges of shard %d of %s", shard, index)
	if len(spans) == 0 || len(spans) > MaxCountSpans {
		return nil, fmt.Errorf("%s: %d spans: want 1..%d", op, len(spans), MaxCountSpans)
	}
	filters := make([]any, len(spans))
	for i, s := range spans {
		if s.UpTo <= s.After {
			return nil, fmt.Errorf("%s: span (%d, %d] is empty", op, s.After, s.UpTo)
		}
		filters[i] = map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": s.After, "lte": s.UpTo}}}
	}
	body := map[string]any{
		"size":             0,
		"track_total_hits": false,
		"query":            seqNoUnion(spans),
		"aggs":             map[string]any{"seq": map[string]any{"filters": map[string]any{"filters": filters}}},
	}
	type bucket struct {
		DocCount *int64 `json:"doc_count"`
	}
	buckets, err := searchOneShard[bucket](ctx, c, op, index, shard, node, body, "the counts")
	if err != nil {
		return nil, err
	}
	if len(buckets) != len(spans) {
		return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("%d buckets for %d spans", len(buckets), len(spans)), Err: ErrMalformed}
	}
	out := make([]int64, len(spans))
	for i, b := range buckets {
		if b.DocCount == nil || *b.DocCount < 0 || *b.DocCount > spans[i].UpTo-spans[i].After {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("bucket %d has no doc count, or more documents than the span (%d, %d] has seq nos", i, spans[i].After, spans[i].UpTo), Err: ErrMalformed}
		}
		out[i] = *b.DocCount
	}
	return out, nil
}

// searchOneShard sends an aggregation "seq" to one shard of index (on
// node, if given) and returns its buckets, refusing a partial, timed-out
// or other shards' answer; what names the aggregation in errors.
func searchOneShard[B any](ctx context.Context, c *Client, op, index string, shard int, node string, body any, what string) ([]B, error) {
	var r struct {
		TimedOut     *bool        `json:"timed_out"`
		Shards       shardsHeader `json:"_shards"`
		Aggregations struct {
			Seq *struct {
				Buckets []B `json:"buckets"`
			} `json:"seq"`
		} `json:"aggregations"`
	}
	path := "/" + url.PathEscape(index) + "/_search?preference=" + shardPreference(shard, node)
	if err := c.do(ctx, op, http.MethodPost, path, body, &r); err != nil {
		return nil, err
	}
	if err := r.Shards.check(op); err != nil {
		return nil, err
	}
	if r.TimedOut == nil || *r.TimedOut {
		return nil, &Error{Op: op, Status: 200, Reason: "the aggregation timed out (or the answer has no timed_out)", Err: ErrPartial}
	}
	if r.Shards.Total != 1 || r.Aggregations.Seq == nil {
		return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("an answer over %d shards without %s, want shard %d alone", r.Shards.Total, what, shard), Err: ErrMalformed}
	}
	return r.Aggregations.Seq.Buckets, nil
}
