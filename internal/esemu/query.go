package esemu

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// query is a parsed query clause. match reports whether a document matches;
// scoring whether it contributes a score (query context) — filter-only trees
// score 0 as in ES.
type query interface {
	match(o *op, ix *index) bool
	scoring() bool
}

type matchAllQuery struct{}

func (matchAllQuery) match(*op, *index) bool { return true }
func (matchAllQuery) scoring() bool          { return true }

type matchNoneQuery struct{}

func (matchNoneQuery) match(*op, *index) bool { return false }
func (matchNoneQuery) scoring() bool          { return true }

// termsQuery matches a metadata field (_id, _index, _routing) against values.
type termsQuery struct {
	field  string
	values map[string]bool
}

func (q termsQuery) match(o *op, ix *index) bool {
	switch q.field {
	case "_id":
		return q.values[o.id]
	case "_index":
		return q.values[ix.name]
	case "_routing":
		return o.routing != "" && q.values[o.routing]
	}
	return false
}
func (termsQuery) scoring() bool { return true }

// seqRangeQuery is a range on _seq_no, normalised to [lo, hi].
type seqRangeQuery struct{ lo, hi int64 }

func (q seqRangeQuery) match(o *op, _ *index) bool { return o.seq >= q.lo && o.seq <= q.hi }
func (seqRangeQuery) scoring() bool                { return true }

type boolQuery struct {
	must, filter, should, mustNot []query
	minShould                     int
}

func (q *boolQuery) match(o *op, ix *index) bool {
	for _, c := range q.must {
		if !c.match(o, ix) {
			return false
		}
	}
	for _, c := range q.filter {
		if !c.match(o, ix) {
			return false
		}
	}
	for _, c := range q.mustNot {
		if c.match(o, ix) {
			return false
		}
	}
	if len(q.should) > 0 {
		n := 0
		for _, c := range q.should {
			if c.match(o, ix) {
				n++
			}
		}
		min := q.minShould
		if min == 0 && len(q.must) == 0 && len(q.filter) == 0 {
			min = 1
		}
		if n < min {
			return false
		}
	}
	return true
}

func (q *boolQuery) scoring() bool { return len(q.must) > 0 || len(q.should) > 0 }

type constantScoreQuery struct{ inner query }

func (q constantScoreQuery) match(o *op, ix *index) bool { return q.inner.match(o, ix) }
func (constantScoreQuery) scoring() bool                 { return true }

// filterOnly wraps a clause used in filter context: it matches the same
// documents but does not score.
type filterOnly struct{ inner query }

func (q filterOnly) match(o *op, ix *index) bool { return q.inner.match(o, ix) }
func (filterOnly) scoring() bool                 { return false }

// seqNoQueryError is raised per shard when an index has sequence numbers
// disabled and the query reads _seq_no.
type seqNoUse struct{ query, sort, agg bool }

// parseQuery parses a query clause. uses collects whether _seq_no is read.
func parseQuery(raw any, uses *seqNoUse) (query, *esError) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, errParsing("[_na] query malformed, must start with start_object")
	}
	if len(m) != 1 {
		if len(m) == 0 {
			return matchAllQuery{}, nil
		}
		keys := sortedKeys(m)
		return nil, errParsing("[%s] malformed query, expected [END_OBJECT] but found [FIELD_NAME]", keys[0])
	}
	for name, body := range m {
		switch name {
		case "match_all":
			if err := onlyKeys(name, body, "boost", "_name"); err != nil {
				return nil, err
			}
			return matchAllQuery{}, nil
		case "match_none":
			return matchNoneQuery{}, nil
		case "ids":
			b, ok := body.(map[string]any)
			if !ok {
				return nil, errParsing("[ids] query malformed, no start_object after query name")
			}
			if err := onlyKeys(name, b, "values", "boost", "_name"); err != nil {
				return nil, err
			}
			vals, err := stringList(b["values"], "ids", "values")
			if err != nil {
				return nil, err
			}
			return termsQuery{field: "_id", values: vals}, nil
		case "term", "terms":
			return parseTerm(name, body, uses)
		case "range":
			return parseRange(body, uses)
		case "bool":
			return parseBool(body, uses)
		case "constant_score":
			b, ok := body.(map[string]any)
			if !ok {
				return nil, errParsing("[constant_score] query malformed, no start_object after query name")
			}
			if err := onlyKeys(name, b, "filter", "boost", "_name"); err != nil {
				return nil, err
			}
			inner, err := parseQuery(b["filter"], uses)
			if err != nil {
				return nil, err
			}
			return constantScoreQuery{inner}, nil
		default:
			return nil, errNotModeled("query [%s]: it models match_all, match_none, ids, term/terms on _id, _index, _routing and _seq_no, range on _seq_no, bool and constant_score", name)
		}
	}
	panic("unreachable")
}

// seqTermsQuery is a term or terms query on _seq_no.
type seqTermsQuery struct{ values map[int64]bool }

func (q seqTermsQuery) match(o *op, _ *index) bool { return q.values[o.seq] }
func (seqTermsQuery) scoring() bool                { return true }

func parseSeqTerms(name string, v any, uses *seqNoUse) (query, *esError) {
	uses.query = true
	var list []any
	if name == "term" {
		if o, ok := v.(map[string]any); ok {
			v = o["value"]
		}
		list = []any{v}
	} else {
		l, ok := v.([]any)
		if !ok {
			return nil, errParsing("[terms] query malformed: [_seq_no] must be an array")
		}
		list = l
	}
	q := seqTermsQuery{values: map[int64]bool{}}
	for _, x := range list {
		n, err := toInt64(x)
		if err != nil {
			return nil, errParsing("[%s] query malformed: value [%v] for [_seq_no] is not a long", name, x)
		}
		q.values[n] = true
	}
	return q, nil
}

func parseTerm(name string, body any, uses *seqNoUse) (query, *esError) {
	b, ok := body.(map[string]any)
	if !ok || len(b) == 0 {
		return nil, errParsing("[%s] query malformed, no start_object after query name", name)
	}
	var field string
	var v any
	for k, x := range b {
		if k == "boost" || k == "_name" {
			continue
		}
		if field != "" {
			return nil, errParsing("[%s] query doesn't support multiple fields, found [%s] and [%s]", name, field, k)
		}
		field, v = k, x
	}
	switch field {
	case "_id", "_index", "_routing":
	case "_seq_no":
		return parseSeqTerms(name, v, uses)
	default:
		return nil, errNotModeled("%s query on field [%s]: only _id, _index, _routing and _seq_no", name, field)
	}
	if name == "term" {
		if o, ok := v.(map[string]any); ok {
			v = o["value"]
		}
		s, err := scalarString(v)
		if err != nil {
			return nil, errParsing("[term] query malformed: %v", err)
		}
		return termsQuery{field: field, values: map[string]bool{s: true}}, nil
	}
	vals, err := stringList(v, "terms", field)
	if err != nil {
		return nil, err
	}
	return termsQuery{field: field, values: vals}, nil
}

func parseRange(body any, uses *seqNoUse) (query, *esError) {
	b, ok := body.(map[string]any)
	if !ok || len(b) != 1 {
		return nil, errParsing("[range] query malformed, no start_object after query name")
	}
	for field, spec := range b {
		if field != "_seq_no" {
			return nil, errNotModeled("range query on field [%s]: only _seq_no", field)
		}
		uses.query = true
		s, ok := spec.(map[string]any)
		if !ok {
			return nil, errParsing("[range] query malformed, no start_object after query name")
		}
		q := seqRangeQuery{lo: math.MinInt64, hi: math.MaxInt64}
		includeLower, includeUpper := true, true
		var from, to *int64
		for k, v := range s {
			switch k {
			case "gt", "gte", "lt", "lte", "from", "to":
				if v == nil {
					continue
				}
				n, err := toInt64(v)
				if err != nil {
					return nil, errParsing("[range] query malformed: value [%v] of [%s] for [_seq_no] is not a long: %v", v, k, err)
				}
				switch k {
				case "gt":
					q.lo = max64(q.lo, satAdd(n, 1))
				case "gte":
					q.lo = max64(q.lo, n)
				case "lt":
					q.hi = min64(q.hi, satAdd(n, -1))
				case "lte":
					q.hi = min64(q.hi, n)
				case "from":
					from = &n
				case "to":
					to = &n
				}
			case "include_lower":
				includeLower = v == true
			case "include_upper":
				includeUpper = v == true
			case "boost", "_name":
			default:
				return nil, errNotModeled("range query option [%s]", k)
			}
		}
		if from != nil {
			lo := *from
			if !includeLower {
				lo = satAdd(lo, 1)
			}
			q.lo = max64(q.lo, lo)
		}
		if to != nil {
			hi := *to
			if !includeUpper {
				hi = satAdd(hi, -1)
			}
			q.hi = min64(q.hi, hi)
		}
		return q, nil
	}
	panic("unreachable")
}

func parseBool(body any, uses *seqNoUse) (query, *esError) {
	b, ok := body.(map[string]any)
	if !ok {
		return nil, errParsing("[bool] query malformed, no start_object after query name")
	}
	q := &boolQuery{}
	for k, v := range b {
		var dst *[]query
		filterCtx := false
		switch k {
		case "must":
			dst = &q.must
		case "filter":
			dst, filterCtx = &q.filter, true
		case "should":
			dst = &q.should
		case "must_not":
			dst, filterCtx = &q.mustNot, true
		case "minimum_should_match":
			n, err := toInt64(v)
			if err != nil {
				return nil, errNotModeled("minimum_should_match [%v]: only an integer", v)
			}
			q.minShould = int(n)
			continue
		case "boost", "_name", "adjust_pure_negative":
			continue
		default:
			return nil, errParsing("[bool] query does not support [%s]", k)
		}
		clauses := []any{v}
		if list, ok := v.([]any); ok {
			clauses = list
		}
		for _, c := range clauses {
			sub, err := parseQuery(c, uses)
			if err != nil {
				return nil, err
			}
			if filterCtx {
				sub = filterOnly{sub}
			}
			*dst = append(*dst, sub)
		}
	}
	return q, nil
}

// seqBounds returns bounds [lo, hi] every match of q lies in, so a shard only
// walks that part of its seq-ordered view.
func seqBounds(q query) (int64, int64) {
	switch x := q.(type) {
	case seqRangeQuery:
		return x.lo, x.hi
	case filterOnly:
		return seqBounds(x.inner)
	case constantScoreQuery:
		return seqBounds(x.inner)
	case matchNoneQuery:
		return 0, -1
	case *boolQuery:
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		for _, list := range [][]query{x.must, x.filter} {
			for _, c := range list {
				l, h := seqBounds(c)
				lo, hi = max64(lo, l), min64(hi, h)
			}
		}
		return lo, hi
	}
	return math.MinInt64, math.MaxInt64
}

func onlyKeys(name string, body any, allowed ...string) *esError {
	m, ok := body.(map[string]any)
	if !ok {
		return errParsing("[%s] query malformed, no start_object after query name", name)
	}
	for k := range m {
		found := false
		for _, a := range allowed {
			found = found || a == k
		}
		if !found {
			return errParsing("[%s] query does not support [%s]", name, k)
		}
	}
	return nil
}

func stringList(v any, query, field string) (map[string]bool, *esError) {
	list, ok := v.([]any)
	if !ok {
		return nil, errParsing("[%s] query malformed: [%s] must be an array", query, field)
	}
	out := make(map[string]bool, len(list))
	for _, x := range list {
		s, err := scalarString(x)
		if err != nil {
			return nil, errParsing("[%s] query malformed: %v", query, err)
		}
		out[s] = true
	}
	return out, nil
}

func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("expected a value, got %T", v)
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) {
			return 0, fmt.Errorf("not an integer")
		}
		return int64(f), nil
	case float64:
		if x != math.Trunc(x) {
			return 0, fmt.Errorf("not an integer")
		}
		return int64(x), nil
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(strings.TrimSpace(x), 10, 64)
	}
	return 0, fmt.Errorf("not a number")
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
