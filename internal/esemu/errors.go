package esemu

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// esError is an exception the way Elasticsearch renders it: a type, a reason,
// extra metadata fields, an optional cause, and the HTTP status it maps to.
type esError struct {
	status int
	typ    string
	reason string
	// meta holds extra fields in the order ES prints them (index_uuid, shard,
	// index, resource.type, ...).
	meta     []kv
	causedBy *esError
	// rootCauses overrides the default root_cause list (the error itself, or
	// its deepest cause).
	rootCauses []*esError
	// extra holds fields printed after the standard ones at the top level of
	// the error object only (phase, grouped, failed_shards).
	extra []kv
	// plain, when set, is sent as a bare JSON string: {"error":"...","status":N}.
	plain bool
}

type kv struct {
	k string
	v any
}

func (e *esError) Error() string { return fmt.Sprintf("%s: %s", e.typ, e.reason) }

func newError(status int, typ, format string, args ...any) *esError {
	return &esError{status: status, typ: typ, reason: fmt.Sprintf(format, args...)}
}

func (e *esError) with(k string, v any) *esError {
	e.meta = append(e.meta, kv{k, v})
	return e
}

// indexMeta adds the index_uuid, shard and index fields ES attaches to
// exceptions about one shard (shard < 0 leaves the shard out).
func (e *esError) indexMeta(idx, uuid string, shard int) *esError {
	if uuid == "" {
		uuid = "_na_"
	}
	e.meta = append(e.meta, kv{"index_uuid", uuid})
	if shard >= 0 {
		e.meta = append(e.meta, kv{"shard", fmt.Sprint(shard)})
	}
	e.meta = append(e.meta, kv{"index", idx})
	return e
}

// body renders the error object (without the outer {"error":...,"status"}).
func (e *esError) object(top bool) *orderedMap {
	m := newOrderedMap()
	if top {
		roots := e.rootCauses
		if roots == nil {
			r := e
			for r.causedBy != nil {
				r = r.causedBy
			}
			roots = []*esError{r}
		}
		list := make([]any, len(roots))
		for i, r := range roots {
			// ES renders root causes with rest.exception.skip_cause.
			rc := *r
			rc.causedBy = nil
			list[i] = rc.object(false)
		}
		m.set("root_cause", list)
	}
	m.set("type", e.typ)
	m.set("reason", nullable(e.reason))
	for _, x := range e.meta {
		m.set(x.k, x.v)
	}
	if top {
		for _, x := range e.extra {
			m.set(x.k, x.v)
		}
	}
	if e.causedBy != nil {
		m.set("caused_by", e.causedBy.object(false))
	}
	return m
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// response is the full body ES sends for the error.
func (e *esError) response() any {
	m := newOrderedMap()
	if e.plain {
		m.set("error", e.reason)
	} else {
		m.set("error", e.object(true))
	}
	m.set("status", e.status)
	return m
}

// Constructors for the errors the emulator raises, with ES's texts.

func errIndexNotFound(name string) *esError {
	return newError(http.StatusNotFound, "index_not_found_exception", "no such index [%s]", name).
		with("resource.type", "index_or_alias").with("resource.id", name).
		with("index_uuid", "_na_").with("index", name)
}

func errIndexClosed(name, uuid string) *esError {
	return newError(http.StatusBadRequest, "index_closed_exception", "closed").
		with("index_uuid", uuid).with("index", name)
}

func errIllegalArgument(format string, args ...any) *esError {
	return newError(http.StatusBadRequest, "illegal_argument_exception", format, args...)
}

// errUnknownSetting refuses a setting the flavor does not have: an
// illegal_argument_exception, a settings_exception from OpenSearch 3.
func errUnknownSetting(f Flavor, key string) *esError {
	typ := "illegal_argument_exception"
	if i := f.info(); i.openSearch && i.major >= 3 {
		typ = "settings_exception"
	}
	return newError(http.StatusBadRequest, typ, "unknown setting [%s] please check that any required plugins are installed, "+
		"or check the breaking changes documentation for removed settings", key)
}

func errParsing(format string, args ...any) *esError {
	return newError(http.StatusBadRequest, "parsing_exception", format, args...)
}

// errNotModeled is the emulator's loud refusal of anything it does not model.
func errNotModeled(format string, args ...any) *esError {
	return newError(http.StatusBadRequest, "illegal_argument_exception",
		"esemu does not model "+format, args...)
}

// errUnrecognizedParams is BaseRestHandler's refusal of unknown URL
// parameters; candidates are the parameters the endpoint accepts.
func errUnrecognizedParams(path string, names, candidates []string) *esError {
	return errIllegalArgument("%s", unrecognized(path, "parameter", names, candidates))
}

// unrecognized renders BaseRestHandler.unrecognized: "request [<path>]
// contains unrecognized <detail>(s): [a] -> did you mean [x]?, [b]". The
// invalid names are sorted; the suggestions are the candidates whose
// similarity (Lucene's LevenshteinDistance: 1 - edits / longer length) is
// above 0.5, best first, then by name.
func unrecognized(path, detail string, invalids, candidates []string) string {
	invalids = append([]string(nil), invalids...)
	sort.Strings(invalids)
	s := ""
	if len(invalids) > 1 {
		s = "s"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "request [%s] contains unrecognized %s%s: ", path, detail, s)
	for i, inv := range invalids {
		type scored struct {
			score float64
			name  string
		}
		var sugg []scored
		for _, cand := range candidates {
			if d := levenshteinSimilarity(inv, cand); d > 0.5 {
				sugg = append(sugg, scored{d, cand})
			}
		}
		sort.Slice(sugg, func(x, y int) bool {
			if sugg[x].score != sugg[y].score {
				return sugg[x].score > sugg[y].score
			}
			return sugg[x].name < sugg[y].name
		})
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%s]", inv)
		switch len(sugg) {
		case 0:
		case 1:
			fmt.Fprintf(&b, " -> did you mean [%s]?", sugg[0].name)
		default:
			names := make([]string, len(sugg))
			for j, x := range sugg {
				names[j] = x.name
			}
			fmt.Fprintf(&b, " -> did you mean any of [%s]?", strings.Join(names, ", "))
		}
	}
	return b.String()
}

// levenshteinSimilarity is Lucene's LevenshteinDistance.getDistance.
func levenshteinSimilarity(a, b string) float64 {
	x, y := []rune(a), []rune(b)
	if len(x) == 0 || len(y) == 0 {
		if len(x) == len(y) {
			return 1
		}
		return 0
	}
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(cur[j-1]+1, prev[j]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return 1 - float64(prev[len(y)])/float64(max(len(x), len(y)))
}

func errVersionConflict(idx, uuid string, shard int, reason string) *esError {
	return newError(http.StatusConflict, "version_conflict_engine_exception", "%s", reason).
		indexMeta(idx, uuid, shard)
}

func errDocumentMissing(idx, uuid string, shard int, id string) *esError {
	return newError(http.StatusNotFound, "document_missing_exception", "[%s]: document missing", id).
		indexMeta(idx, uuid, shard)
}

func errUnavailableShards(idx string, shard int, why string) *esError {
	return newError(http.StatusServiceUnavailable, "unavailable_shards_exception",
		"[%s][%d] %s", idx, shard, why)
}

func errRejected(what string) *esError {
	return newError(http.StatusTooManyRequests, "es_rejected_execution_exception",
		"rejected execution of %s on EsThreadPoolExecutor[name = esemu-0/write, queue capacity = 10000] (injected by esemu)", what)
}

func errSearchContextMissing(id string) *esError {
	return newError(http.StatusNotFound, "search_context_missing_exception", "No search context found for id [%s]", id)
}
