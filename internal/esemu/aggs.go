package esemu

import (
	"encoding/json"
	"math"
	"sort"
)

// seqAgg is an aggregation the emulator models, over every document the
// query matches on the shards searched:
//   - a histogram of _seq_no
//     ({"histogram":{"field":"_seq_no","interval":N,"min_doc_count":M}}: a
//     seq-no density, as issue #17 reads it);
//   - an anonymous filters aggregation ({"filters":{"filters":[q, …]}}: one
//     bucket per filter, in order; the delete scanner's counts of seq-no
//     ranges, issue #26).
//
// Anything else under aggs is refused as not modeled.
type seqAgg struct {
	name        string
	interval    float64 // histogram
	minDocCount int64   // histogram
	filters     []query // filters; nil for a histogram
	// ranges, when every filter is a range on _seq_no and none overlaps
	// another, are the filters' bounds sorted by lo: a document is counted
	// by binary search instead of by every filter.
	ranges []filterRange
}

// filterRange is a filter that is a range on _seq_no: [lo, hi], bucket i.
type filterRange struct {
	lo, hi int64
	i      int
}

// parseAggs reads a search body's aggs (or aggregations).
func parseAggs(raw any, uses *seqNoUse) ([]seqAgg, *esError) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errParsing("Expected [START_OBJECT] under [aggs], but got a [%s]", jsonKind(raw))
	}
	var out []seqAgg
	for name, def := range m {
		d, ok := def.(map[string]any)
		if !ok {
			return nil, errParsing("Expected [START_OBJECT] under [%s], but got a [%s] in [%s]", name, jsonKind(def), name)
		}
		var h seqAgg
		h.name = name
		for typ, body := range d {
			if typ == "filters" {
				f, err := parseFilters(name, body, uses)
				if err != nil {
					return nil, err
				}
				h = f
				continue
			}
			if typ != "histogram" {
				return nil, errNotModeled("aggregation [%s] of type [%s]: it models a histogram on _seq_no and anonymous filters", name, typ)
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
			uses.agg = true
		}
		if len(d) != 1 {
			return nil, errParsing("Missing definition for aggregation [%s]", name)
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// parseFilters reads an anonymous filters aggregation: {"filters":[q, …]}.
func parseFilters(name string, body any, uses *seqNoUse) (seqAgg, *esError) {
	b, ok := body.(map[string]any)
	if !ok {
		return seqAgg{}, errParsing("Expected [START_OBJECT] under [filters], but got a [%s] in [%s]", jsonKind(body), name)
	}
	for k := range b {
		if k != "filters" {
			return seqAgg{}, errNotModeled("filters parameter [%s]", k)
		}
	}
	list, ok := b["filters"].([]any)
	if !ok {
		return seqAgg{}, errNotModeled("filters aggregation [%s] without an array of filters (keyed filters)", name)
	}
	h := seqAgg{name: name, filters: make([]query, len(list))}
	ranges := make([]filterRange, 0, len(list))
	for i, raw := range list {
		q, err := parseQuery(raw, uses)
		if err != nil {
			return seqAgg{}, err
		}
		h.filters[i] = q
		if r, ok := q.(seqRangeQuery); ok && ranges != nil {
			ranges = append(ranges, filterRange{lo: r.lo, hi: r.hi, i: i})
		} else {
			ranges = nil
		}
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].lo < ranges[j].lo })
	for i := 1; i < len(ranges); i++ {
		if ranges[i].lo <= ranges[i-1].hi {
			return h, nil // overlapping: every filter is asked
		}
	}
	h.ranges = ranges
	return h, nil
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

// bucketCounts are one aggregation's doc counts by bucket key (a
// histogram's key; a filter's position).
type bucketCounts map[float64]int64

// collectAggs counts a matching document into each aggregation.
func collectAggs(aggs []seqAgg, counts []bucketCounts, o *op, ix *index) {
	for i, a := range aggs {
		switch {
		case a.filters == nil:
			counts[i][math.Floor(float64(o.seq)/a.interval)*a.interval]++
		case a.ranges != nil:
			j := sort.Search(len(a.ranges), func(j int) bool { return a.ranges[j].lo > o.seq }) - 1
			if j >= 0 && o.seq <= a.ranges[j].hi {
				counts[i][float64(a.ranges[j].i)]++
			}
		default:
			for j, f := range a.filters {
				if f.match(o, ix) {
					counts[i][float64(j)]++
				}
			}
		}
	}
}

func newBucketCounts(n int) []bucketCounts {
	out := make([]bucketCounts, n)
	for i := range out {
		out[i] = bucketCounts{}
	}
	return out
}

// aggsObject renders the shards' merged counts as ES does: a histogram's
// buckets by key, the empty ones between the first and the last filled in
// when min_doc_count is 0, keys as doubles; a filters aggregation's one per
// filter.
func aggsObject(aggs []seqAgg, shards [][]bucketCounts) *orderedMap {
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
		if a.filters != nil {
			// One bucket per filter, in order, the empty ones too.
			buckets := make([]any, len(a.filters))
			for j := range a.filters {
				buckets[j] = obj("doc_count", merged[float64(j)])
			}
			out.set(a.name, obj("buckets", buckets))
			continue
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
