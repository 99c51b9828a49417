package esemu

import (
	"encoding/json"
	"math"
	"sort"
)

// seqHistogram is the one aggregation the emulator models: a histogram of
// _seq_no ({"histogram":{"field":"_seq_no","interval":N,"min_doc_count":M}}),
// over every document the query matches on the shards searched (a seq-no
// density, as issue #17 reads it). Anything else under aggs is refused as
// not modeled.
type seqHistogram struct {
	name        string
	interval    float64
	minDocCount int64
}

// parseAggs reads a search body's aggs (or aggregations).
func parseAggs(raw any) ([]seqHistogram, *esError) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errParsing("Expected [START_OBJECT] under [aggs], but got a [%s]", jsonKind(raw))
	}
	var out []seqHistogram
	for name, def := range m {
		d, ok := def.(map[string]any)
		if !ok {
			return nil, errParsing("Expected [START_OBJECT] under [%s], but got a [%s] in [%s]", name, jsonKind(def), name)
		}
		var h seqHistogram
		h.name = name
		for typ, body := range d {
			if typ != "histogram" {
				return nil, errNotModeled("aggregation [%s] of type [%s]: it models a histogram on _seq_no", name, typ)
			}
			b, ok := body.(map[string]any)
			if !ok {
				return nil, errParsing("Expected [START_OBJECT] under [histogram], but got a [%s] in [%s]", jsonKind(body), name)
			}
			for k, v := range b {
				switch k {
				case "field":
					if f := toString(v); f != "_seq_no" {
						return nil, errNotModeled("histogram on field [%s]: it models _seq_no", f)
					}
				case "interval":
					f, err := toFloat64(v)
					if err != nil {
						return nil, errParsing("[histogram] failed to parse field [interval]")
					}
					if f <= 0 {
						return nil, errIllegalArgument("[interval] must be >0 for histogram aggregation [%s]", name)
					}
					h.interval = f
				case "min_doc_count":
					n, err := toInt64(v)
					if err != nil {
						return nil, errParsing("[histogram] failed to parse field [min_doc_count]")
					}
					if n < 0 {
						return nil, errIllegalArgument("[minDocCount] must be greater than or equal to 0. Found [%d] in [%s]", n, name)
					}
					h.minDocCount = n
				default:
					return nil, errNotModeled("histogram parameter [%s]", k)
				}
			}
			if _, ok := b["field"]; !ok {
				return nil, errNotModeled("histogram without a field: it models _seq_no")
			}
			if h.interval == 0 {
				return nil, errIllegalArgument("[interval] must be >0 for histogram aggregation [%s]", name)
			}
		}
		if len(d) != 1 {
			return nil, errParsing("Missing definition for aggregation [%s]", name)
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "START_ARRAY"
	case string:
		return "VALUE_STRING"
	case bool:
		return "VALUE_BOOLEAN"
	case nil:
		return "VALUE_NULL"
	}
	return "VALUE_NUMBER"
}

func toFloat64(v any) (float64, error) {
	if n, ok := v.(json.Number); ok {
		return n.Float64()
	}
	if f, ok := v.(float64); ok {
		return f, nil
	}
	n, err := toInt64(v)
	return float64(n), err
}

// bucketCounts are one histogram's doc counts by bucket key.
type bucketCounts map[float64]int64

// collect counts seq into each histogram.
func collectAggs(aggs []seqHistogram, counts []bucketCounts, seq int64) {
	for i, a := range aggs {
		counts[i][math.Floor(float64(seq)/a.interval)*a.interval]++
	}
}

func newBucketCounts(n int) []bucketCounts {
	out := make([]bucketCounts, n)
	for i := range out {
		out[i] = bucketCounts{}
	}
	return out
}

// aggsObject renders the shards' merged counts as ES does: buckets by key,
// the empty ones between the first and the last filled in when
// min_doc_count is 0, keys as doubles.
func aggsObject(aggs []seqHistogram, shards [][]bucketCounts) *orderedMap {
	out := newOrderedMap()
	for i, a := range aggs {
		merged := bucketCounts{}
		for _, s := range shards {
			if s == nil {
				continue
			}
			for k, n := range s[i] {
				merged[k] += n
			}
		}
		keys := make([]float64, 0, len(merged))
		for k := range merged {
			keys = append(keys, k)
		}
		sort.Float64s(keys)
		if a.minDocCount == 0 && len(keys) > 1 {
			var all []float64
			for j := 0; keys[0]+float64(j)*a.interval <= keys[len(keys)-1]; j++ {
				all = append(all, keys[0]+float64(j)*a.interval)
			}
			keys = all
		}
		buckets := []any{}
		for _, k := range keys {
			if n := merged[k]; n >= a.minDocCount {
				buckets = append(buckets, obj("key", javaFloat(k), "doc_count", n))
			}
		}
		out.set(a.name, obj("buckets", buckets))
	}
	return out
}
