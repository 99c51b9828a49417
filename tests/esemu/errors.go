package esemu

import (
	"fmt"
	"net/http"
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
			list[i] = r.object(false)
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

func errParsing(format string, args ...any) *esError {
	return newError(http.StatusBadRequest, "parsing_exception", format, args...)
}

// errNotModeled is the emulator's loud refusal of anything it does not model.
func errNotModeled(format string, args ...any) *esError {
	return newError(http.StatusBadRequest, "illegal_argument_exception",
		"esemu does not model "+format, args...)
}

func errUnrecognizedParams(path string, names []string) *esError {
	if len(names) == 1 {
		return errIllegalArgument("request [%s] contains unrecognized parameter: [%s]", path, names[0])
	}
	list := ""
	for i, n := range names {
		if i > 0 {
			list += ", "
		}
		list += n
	}
	return errIllegalArgument("request [%s] contains unrecognized parameters: [%s]", path, list)
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
