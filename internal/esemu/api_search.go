package esemu

import (
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// searchBodyKeys are the search body keys ES knows; modeled ones are true.
var searchBodyKeys = map[string]bool{
	"query": true, "from": true, "size": true, "sort": true, "search_after": true, "_source": true,
	"seq_no_primary_term": true, "version": true, "track_total_hits": true, "pit": true, "timeout": true,
	"track_scores": true, "post_filter": true, "explain": true, "profile": true,
	"aggs": true, "aggregations": true, "highlight": false, "suggest": false, "collapse": false, "rescore": false,
	"script_fields": false, "docvalue_fields": false, "fields": false, "stored_fields": false, "min_score": false,
	"terminate_after": false, "indices_boost": false, "slice": false, "runtime_mappings": false, "knn": false,
	"rank": false, "retriever": false, "stats": false, "ext": false,
}

// parseSearch reads a search request from URL parameters and body.
func (c *Cluster) parseSearch(r *request) (*searchReq, *esError) {
	req := &searchReq{from: 0, size: 10, trackTotal: 10000, query: matchAllQuery{}}
	b, e := r.jsonBody()
	if e != nil {
		return nil, e
	}
	for k := range b {
		modeled, known := searchBodyKeys[k]
		if !known {
			return nil, errParsing("Unknown key for a START_OBJECT in [%s].", k)
		}
		if !modeled {
			return nil, errNotModeled("search option [%s]", k)
		}
	}
	if v, ok := b["explain"]; ok && v == true {
		return nil, errNotModeled("search option [explain]")
	}
	if v, ok := b["profile"]; ok && v == true {
		return nil, errNotModeled("search option [profile]")
	}
	if q, ok := b["query"]; ok {
		if req.query, e = parseQuery(q, &req.uses); e != nil {
			return nil, e
		}
	}
	for _, k := range []string{"aggs", "aggregations"} {
		if a, ok := b[k]; ok {
			if req.aggs, e = parseAggs(a, &req.uses); e != nil {
				return nil, e
			}
		}
	}
	if q, ok := b["post_filter"]; ok {
		if req.postFilter, e = parseQuery(q, &req.uses); e != nil {
			return nil, e
		}
	}
	intField := func(name string, v any) (int, *esError) {
		n, err := toInt64(v)
		if err != nil {
			return 0, errParsing("[%s] must be an integer, got [%v]", name, v)
		}
		return int(n), nil
	}
	if v, ok := b["from"]; ok {
		if req.from, e = intField("from", v); e != nil {
			return nil, e
		}
	}
	if v, ok := b["size"]; ok {
		if req.size, e = intField("size", v); e != nil {
			return nil, e
		}
	}
	if r.has("from") {
		if req.from, e = r.intParam("from", 0); e != nil {
			return nil, e
		}
	}
	if r.has("size") {
		if req.size, e = r.intParam("size", 10); e != nil {
			return nil, e
		}
	}
	if req.from < 0 {
		return nil, errIllegalArgument("[from] parameter cannot be negative, found [%d]", req.from)
	}
	if req.size < 0 {
		return nil, errIllegalArgument("[size] parameter cannot be negative, found [%d]", req.size)
	}
	for _, p := range strings.Fields(pSearchUnmodeled) {
		if r.has(p) {
			return nil, errNotModeled("search parameter [%s]", p)
		}
	}
	if v, ok := b["sort"]; ok {
		if req.sort, e = parseSort(v, &req.uses); e != nil {
			return nil, e
		}
	}
	if r.has("sort") {
		// RestSearchAction: sort=field[:asc|:desc],... adds to the body's sorts.
		var items []any
		for _, s := range strings.Split(r.param("sort"), ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if i := strings.LastIndex(s, ":"); i >= 0 {
				items = append(items, map[string]any{s[:i]: s[i+1:]})
			} else {
				items = append(items, s)
			}
		}
		keys, e := parseSort(items, &req.uses)
		if e != nil {
			return nil, e
		}
		req.sort = append(req.sort, keys...)
	}
	if v, ok := b["search_after"]; ok {
		list, isList := v.([]any)
		if !isList {
			return nil, errParsing("[search_after] must be an array")
		}
		req.searchAfter = list
	}
	if v, ok := b["_source"]; ok {
		if req.source, e = parseSourceFilter(v); e != nil {
			return nil, e
		}
	}
	if r.has("_source") || r.has("_source_includes") || r.has("_source_excludes") {
		if req.source, e = sourceFilterFromParams(r); e != nil {
			return nil, e
		}
	}
	boolField := func(name string, dst *bool) *esError {
		if v, ok := b[name]; ok {
			bv, isBool := v.(bool)
			if !isBool {
				return errParsing("[%s] must be a boolean", name)
			}
			*dst = bv
		}
		if r.has(name) {
			bv, e := r.boolParam(name, false)
			if e != nil {
				return e
			}
			*dst = bv
		}
		return nil
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"seq_no_primary_term", &req.seqNoPT}, {"version", &req.version}, {"track_scores", &req.trackScores}} {
		if e := boolField(f.name, f.dst); e != nil {
			return nil, e
		}
	}
	if req.totalAsInt, e = r.boolParam("rest_total_hits_as_int", false); e != nil {
		return nil, e
	}
	var tth any
	if v, ok := b["track_total_hits"]; ok {
		tth = v
	}
	if r.has("track_total_hits") {
		tth = r.param("track_total_hits")
	}
	switch x := tth.(type) {
	case nil:
	case bool:
		req.trackTotal = -1
		if x {
			req.trackTotal = math.MaxInt32
		}
	case string:
		switch x {
		case "true":
			req.trackTotal = math.MaxInt32
		case "false":
			req.trackTotal = -1
		default:
			n, err := strconv.Atoi(x)
			if err != nil {
				return nil, errIllegalArgument("Failed to parse int parameter [track_total_hits] with value [%s]", x)
			}
			req.trackTotal = n
		}
	default:
		n, err := toInt64(x)
		if err != nil {
			return nil, errParsing("[track_total_hits] must be a boolean or an integer")
		}
		req.trackTotal = int(n)
	}
	// RestSearchAction: rest_total_hits_as_int turns an unset
	// track_total_hits into true; only an explicit inexact one is refused.
	if req.totalAsInt && tth != nil && req.trackTotal != -1 && req.trackTotal != math.MaxInt32 {
		return nil, errIllegalArgument("[rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got %d", req.trackTotal)
	}
	if req.totalAsInt && req.trackTotal != -1 {
		req.trackTotal = math.MaxInt32
	}
	if p, ok := b["pit"]; ok {
		pm, isMap := p.(map[string]any)
		if !isMap {
			return nil, errParsing("[pit] must be an object")
		}
		req.pit = toString(pm["id"])
		if ka, ok := pm["keep_alive"]; ok {
			d, err := parseTimeValue(toString(ka))
			if err != nil {
				return nil, errIllegalArgument("failed to parse [keep_alive] with value [%v]", ka)
			}
			req.pitKeepAlive = d
		}
		if req.pit == "" {
			return nil, errParsing("[pit] requires [id]")
		}
	}
	if r.has("scroll") {
		d, err := parseTimeValue(r.param("scroll"))
		if err != nil {
			return nil, errIllegalArgument("failed to parse setting [scroll] with value [%s] as a time value", r.param("scroll"))
		}
		req.scroll = d
	}
	if req.allowPartial, e = r.boolParam("allow_partial_search_results", true); e != nil {
		return nil, e
	}
	// Request-level validation, as SearchRequest.validate does.
	var errs []string
	if req.searchAfter != nil {
		if req.from > 0 {
			errs = append(errs, "`from` parameter must be set to 0 when `search_after` is used.")
		}
		if req.scroll > 0 {
			errs = append(errs, "`search_after` cannot be used in a scroll context.")
		}
	}
	if req.scroll > 0 {
		if tth != nil && req.trackTotal != math.MaxInt32 {
			errs = append(errs, "disabling [track_total_hits] is not allowed in a scroll context")
		}
		if req.from > 0 {
			errs = append(errs, "using [from] is not allowed in a scroll context")
		}
		if req.size == 0 {
			errs = append(errs, "[size] cannot be [0] in a scroll context")
		}
		if v, _ := r.boolParam("request_cache", false); v && r.has("request_cache") {
			errs = append(errs, "[request_cache] cannot be used in a scroll context")
		}
		if req.pit != "" {
			errs = append(errs, "using [point in time] is not allowed in a scroll context")
		}
	}
	if req.pit != "" {
		if r.vars["index"] != "" {
			errs = append(errs, "[indices] cannot be used with point in time. Do not specify any index with point in time.")
		}
		if r.has("routing") {
			errs = append(errs, "[routing] cannot be used with point in time. Do not specify any routing with point in time.")
		}
		if r.has("preference") {
			errs = append(errs, "[preference] cannot be used with point in time. Do not specify any preference with point in time.")
		}
	}
	hasShardDoc := false
	for _, k := range req.sort {
		hasShardDoc = hasShardDoc || k.field == "_shard_doc"
	}
	if hasShardDoc && req.pit == "" {
		errs = append(errs, "[_shard_doc] sort field cannot be used without [point in time]")
	}
	if len(errs) > 0 {
		msg := "Validation Failed: "
		for i, e := range errs {
			msg += strconv.Itoa(i+1) + ": " + e + ";"
		}
		return nil, newError(http.StatusBadRequest, "action_request_validation_exception", "%s", msg)
	}
	if hasShardDoc && c.info.openSearch && c.info.major < 3 {
		return nil, errNotModeled("sort [_shard_doc] on %s: OpenSearch 2.x has no _shard_doc", c.info.number)
	}
	if req.pit != "" && req.sort != nil && !hasShardDoc && !c.info.openSearch &&
		(req.searchAfter == nil || len(req.searchAfter) == len(req.sort)+1) {
		// ES adds the _shard_doc tiebreaker to a sorted PIT search, unless
		// search_after leaves it out (SearchRequest.rewrite).
		req.sort = append(req.sort, sortKey{field: "_shard_doc"})
	}
	if req.searchAfter != nil {
		if req.sort == nil {
			return nil, errIllegalArgument("Sort must contain at least one field.")
		}
		if len(req.searchAfter) != len(req.sort) {
			return nil, errIllegalArgument("search_after has %d value(s) but sort has %d.", len(req.searchAfter), len(req.sort))
		}
		for i, v := range req.searchAfter {
			if _, err := toInt64(v); err != nil && req.sort[i].field != "_score" {
				return nil, errIllegalArgument("Failed to parse search_after value for field [%s].", req.sort[i].field)
			}
			if n, err := toInt64(v); err == nil && req.sort[i].field != "_score" {
				req.searchAfter[i] = n
			} else {
				req.searchAfter[i] = toFloat(v)
			}
		}
	}
	return req, nil
}

// parseSort reads the sort clause: "_seq_no", {"_seq_no":"asc"},
// {"_seq_no":{"order":"desc"}}, or an array of them.
func parseSort(v any, uses *seqNoUse) ([]sortKey, *esError) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var out []sortKey
	for _, item := range list {
		var k sortKey
		switch x := item.(type) {
		case string:
			k.field = x
		case map[string]any:
			if len(x) != 1 {
				return nil, errParsing("[sort] options must name exactly one field")
			}
			for f, spec := range x {
				k.field = f
				switch s := spec.(type) {
				case string:
					k.desc = s == "desc"
					if s != "asc" && s != "desc" {
						return nil, errIllegalArgument("Unknown SortOrder [%s]", s)
					}
				case map[string]any:
					for opt, ov := range s {
						switch opt {
						case "order":
							o := toString(ov)
							if o != "asc" && o != "desc" {
								return nil, errIllegalArgument("Unknown SortOrder [%s]", o)
							}
							k.desc = o == "desc"
						case "unmapped_type", "missing", "numeric_type", "format":
						default:
							return nil, errNotModeled("sort option [%s]", opt)
						}
					}
				default:
					return nil, errParsing("[sort] malformed")
				}
			}
		default:
			return nil, errParsing("[sort] malformed")
		}
		switch k.field {
		case "_score":
			if _, isStr := item.(string); isStr {
				k.desc = true
			} else if m, ok := item.(map[string]any); ok {
				spec, _ := m["_score"].(map[string]any) // a string order is no map: no panic
				if _, hasOrder := spec["order"]; !hasOrder {
					if _, isStrOrder := m["_score"].(string); !isStrOrder {
						k.desc = true
					}
				}
			}
		case "_seq_no":
			uses.sort = true
		case "_doc", "_shard_doc":
		default:
			return nil, errNotModeled("sort on field [%s]: it sorts on _seq_no, _doc, _shard_doc and _score", k.field)
		}
		out = append(out, k)
	}
	return out, nil
}

// searchTargets returns the shards a non-PIT request reads.
func (c *Cluster) searchTargets(r *request, forSearch bool) ([]target, *esError) {
	indices, _, e := c.indicesForRequest(r, defaultExpand(), false)
	if e != nil {
		return nil, e
	}
	pref, e := c.parsePreference(r.param("preference"))
	if e != nil {
		return nil, e
	}
	var routing []string
	if v := r.param("routing"); v != "" {
		routing = strings.Split(v, ",")
	}
	return targetsFor(indices, pref, routing), nil
}

// runShards executes the request on every target and returns per-shard
// results in target order.
func (c *Cluster) runShards(targets []target, req *searchReq, pref preference, limit, countLimit int) []shardResult {
	out := make([]shardResult, len(targets))
	for i, t := range targets {
		s := t.s
		s.mu.Lock()
		cp, f := c.readCopy(t, pref, func(cp *shardCopy) *shardFailure { return c.shardQueryFailure(t, cp, req) })
		if f != nil {
			s.mu.Unlock()
			out[i].failure = f
			continue
		}
		cp.counters.queries.Add(1)
		cp.lastSearch = time.Now()
		var aggs []bucketCounts
		if len(req.aggs) > 0 {
			aggs = newBucketCounts(len(req.aggs))
		}
		hits, total := searchView(view{sparse: cp.bySeq}, t, req, limit, countLimit, aggs)
		s.mu.Unlock()
		out[i] = shardResult{hits: hits, total: total, aggs: aggs}
	}
	return out
}

// shardQueryFailure is why the query phase on copy cp of target t fails, or
// nil: no started copy, an injected failure, _seq_no read on an index with
// sequence numbers disabled, or a result window too large. s.mu is held.
func (c *Cluster) shardQueryFailure(t target, cp *shardCopy, req *searchReq) *shardFailure {
	if f := c.checkShardRead(t, cp); f != nil {
		return f
	}
	e := seqNoFailure(t.ix, req.uses)
	if e == nil {
		e = resultWindowCheck(t.ix, req)
	}
	if e != nil {
		return &shardFailure{shard: t.s.num, index: t.ix.name, node: c.nodeID(cp.node), reason: e}
	}
	return nil
}

func resultWindowCheck(ix *index, req *searchReq) *esError {
	max := ix.settings.maxResultWindow
	if req.scroll > 0 {
		if req.size > max {
			return errIllegalArgument("Batch size is too large, size must be less than or equal to: [%d] but was [%d]. Scroll batch sizes cost as much memory as result windows so they are controlled by the [index.max_result_window] index level setting.", max, req.size)
		}
		return nil
	}
	if req.from+req.size > max {
		return errIllegalArgument("Result window is too large, from + size must be less than or equal to: [%d] but was [%d]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting.", max, req.from+req.size)
	}
	return nil
}

// searchPhaseError is the error for a search whose shards all failed (or any
// failed when partial results are not allowed).
func searchPhaseError(phase, reason string, failures []*shardFailure) *esError {
	type key struct{ typ, reason, index string }
	seen := map[key]bool{}
	var grouped []any
	var roots []*esError
	status := 0
	for _, f := range failures {
		k := key{f.reason.typ, f.reason.reason, f.index}
		if st := f.reason.status; status == 0 || (st >= 502 && st <= 504) {
			status = st
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		grouped = append(grouped, f.object())
		roots = append(roots, f.reason)
	}
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	e := newError(status, "search_phase_execution_exception", "%s", reason)
	e.rootCauses = roots
	e.extra = []kv{{"phase", phase}, {"grouped", true}, {"failed_shards", grouped}}
	// ES's cause is the first failure's guessed root cause, dropped when
	// it is that failure's own cause (an ElasticsearchException such as
	// query_shard_exception); a plain Java exception is wrapped in a new
	// ElasticsearchException of the same name, so it stays, twice nested.
	if len(roots) > 0 && javaExceptions[roots[0].typ] {
		r := roots[0]
		e.causedBy = &esError{status: r.status, typ: r.typ, reason: r.reason, causedBy: r}
	}
	return e
}

// javaExceptions are the exception types that are not ElasticsearchExceptions.
var javaExceptions = map[string]bool{"illegal_argument_exception": true, "illegal_state_exception": true,
	"number_format_exception": true, "null_pointer_exception": true}

func apiSearch(c *Cluster, r *request) (reply, *esError) {
	start := time.Now()
	req, e := c.parseSearch(r)
	if e != nil {
		return reply{}, e
	}
	if len(req.aggs) > 0 && (req.pit != "" || req.scroll > 0) {
		return reply{}, errNotModeled("aggregations in a scroll or point-in-time search")
	}
	if req.pit != "" {
		return c.searchPIT(r, req, start)
	}
	targets, e := c.searchTargets(r, true)
	if e != nil {
		return reply{}, e
	}
	pref, _ := c.parsePreference(r.param("preference"))
	if req.scroll > 0 {
		return c.openScroll(r, req, targets, pref, start)
	}
	countLimit := 0
	if req.trackTotal > 0 {
		countLimit = req.trackTotal + 1
		if req.trackTotal == math.MaxInt32 {
			countLimit = math.MaxInt32
		}
	}
	results := c.runShards(targets, req, pref, req.from+req.size, countLimit)
	return c.searchReply(r, req, len(targets), results, start, "", "")
}

// searchReply merges shard results into a search response.
func (c *Cluster) searchReply(r *request, req *searchReq, nShards int, results []shardResult, start time.Time, scrollID, pitID string) (reply, *esError) {
	var failures []*shardFailure
	var all []hit
	total := 0
	for _, res := range results {
		if res.failure != nil {
			failures = append(failures, res.failure)
			continue
		}
		all = append(all, res.hits...)
		total += res.total
	}
	if nShards > 0 && len(failures) == nShards {
		return reply{}, searchPhaseError("query", "all shards failed", failures)
	}
	if len(failures) > 0 && !req.allowPartial {
		return reply{}, searchPhaseError("query", "Partial shards failure", failures)
	}
	sort.SliceStable(all, func(i, j int) bool { return lessHit(req.sort)(all[i], all[j]) })
	if req.from < len(all) {
		all = all[req.from:]
	} else {
		all = nil
	}
	if len(all) > req.size {
		all = all[:req.size]
	}
	timedOut := false
	if r.fault.TimedOut {
		timedOut = true
		all = all[:len(all)/2]
	}
	body := c.searchBody(req, all, total, nShards, failures, start, scrollID, pitID, timedOut)
	if len(req.aggs) > 0 {
		shardAggs := make([][]bucketCounts, len(results))
		for i, res := range results {
			shardAggs[i] = res.aggs
		}
		body.set("aggregations", aggsObject(req.aggs, shardAggs))
	}
	return reply{status: 200, body: body}, nil
}

// hitJSON is a search hit in ES's field order.
type hitJSON struct {
	Index       string          `json:"_index"`
	Type        string          `json:"_type,omitempty"`
	ID          string          `json:"_id"`
	Version     *int64          `json:"_version,omitempty"`
	SeqNo       *int64          `json:"_seq_no,omitempty"`
	PrimaryTerm *int64          `json:"_primary_term,omitempty"`
	Score       *javaFloat      `json:"_score"`
	Routing     string          `json:"_routing,omitempty"`
	Source      json.RawMessage `json:"_source,omitempty"`
	Sort        []any           `json:"sort,omitempty"`
}

func (c *Cluster) searchBody(req *searchReq, hits []hit, total, nShards int, failures []*shardFailure, start time.Time, scrollID, pitID string, timedOut bool) *orderedMap {
	body := newOrderedMap()
	if scrollID != "" {
		body.set("_scroll_id", scrollID)
	}
	if pitID != "" {
		body.set("pit_id", pitID)
	}
	body.set("took", time.Since(start).Milliseconds()).set("timed_out", timedOut)
	if len(req.aggs) > 0 && req.size == 0 && req.trackTotal < 0 && c.info.openSearch && c.info.major >= 3 {
		// OpenSearch 3 computes such a histogram without collecting hits
		// and says so (recorded for size 0 without a total; other cases
		// are not known).
		body.set("terminated_early", true)
	}
	sh := obj("total", nShards, "successful", nShards-len(failures), "skipped", 0, "failed", len(failures))
	if len(failures) > 0 {
		list := make([]any, len(failures))
		for i, f := range failures {
			list[i] = f.object()
		}
		sh.set("failures", list)
	}
	body.set("_shards", sh)
	hitsObj := newOrderedMap()
	if req.trackTotal >= 0 {
		if req.totalAsInt {
			hitsObj.set("total", total)
		} else if total > req.trackTotal {
			hitsObj.set("total", obj("value", req.trackTotal, "relation", "gte"))
		} else {
			hitsObj.set("total", obj("value", total, "relation", "eq"))
		}
	}
	scored := req.sort == nil || req.trackScores
	var maxScore *javaFloat
	list := make([]hitJSON, len(hits))
	seven := c.info.major == 7 && !c.info.openSearch
	for i, h := range hits {
		hj := hitJSON{Index: h.ix.name, ID: h.o.id, Routing: h.o.routing}
		if seven {
			hj.Type = "_doc"
		}
		if req.version {
			v := h.o.version
			hj.Version = &v
		}
		if req.seqNoPT && !h.ix.settings.seqNoDisabled {
			s, t := h.o.seq, h.o.term
			hj.SeqNo, hj.PrimaryTerm = &s, &t
		}
		if scored {
			sc := javaFloat(h.score)
			hj.Score = &sc
			if maxScore == nil || sc > *maxScore {
				maxScore = &sc
			}
		}
		if src := req.source.apply(h.o.source); src != nil {
			hj.Source = src
		}
		hj.Sort = h.sortVals
		list[i] = hj
	}
	if maxScore != nil {
		hitsObj.set("max_score", *maxScore)
	} else {
		hitsObj.set("max_score", nil)
	}
	hitsObj.set("hits", list)
	body.set("hits", hitsObj)
	return body
}

func apiCount(c *Cluster, r *request) (reply, *esError) {
	req := &searchReq{query: matchAllQuery{}, trackTotal: math.MaxInt32}
	// RestCountAction checks terminate_after before anything else.
	if n, e := r.intParam("terminate_after", 0); e != nil {
		return reply{}, e
	} else if n < 0 {
		return reply{}, errIllegalArgument("terminateAfter must be > 0")
	} else if n > 0 {
		return reply{}, errNotModeled("count parameter [terminate_after]")
	}
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	for k, v := range b {
		if k != "query" {
			return reply{}, errParsing("request does not support [%s]", k)
		}
		if req.query, e = parseQuery(v, &req.uses); e != nil {
			return reply{}, e
		}
	}
	targets, e := c.searchTargets(r, false)
	if e != nil {
		return reply{}, e
	}
	pref, _ := c.parsePreference(r.param("preference"))
	results := c.runShards(targets, req, pref, 0, math.MaxInt32)
	var failures []*shardFailure
	count := 0
	for _, res := range results {
		if res.failure != nil {
			failures = append(failures, res.failure)
			continue
		}
		count += res.total
	}
	if len(targets) > 0 && len(failures) == len(targets) {
		return reply{}, searchPhaseError("query", "all shards failed", failures)
	}
	sh := obj("total", len(targets), "successful", len(targets)-len(failures), "skipped", 0, "failed", len(failures))
	if len(failures) > 0 {
		list := make([]any, len(failures))
		for i, f := range failures {
			list[i] = f.object()
		}
		sh.set("failures", list)
	}
	return reply{status: 200, body: obj("count", count, "_shards", sh)}, nil
}

// openScroll runs the first page of a scroll and keeps the rest.
func (c *Cluster) openScroll(r *request, req *searchReq, targets []target, pref preference, start time.Time) (reply, *esError) {
	sc := &searchContext{id: contextID("scroll"), keepAlive: req.scroll, req: req, created: time.Now()}
	sc.keepUntil(time.Now().Add(req.scroll))
	var failures []*shardFailure
	for _, t := range targets {
		s := t.s
		s.mu.Lock()
		cp, f := c.readCopy(t, pref, func(cp *shardCopy) *shardFailure { return c.shardQueryFailure(t, cp, req) })
		cs := &ctxShard{t: t, cp: cp}
		if f != nil {
			cs.failure = f
		} else {
			cp.counters.scrolls.Add(1)
			cs.snap = cp.snapshot()
			cs.hits, _ = searchView(view{dense: cs.snap}, t, req, math.MaxInt32, 0, nil)
			sc.total += len(cs.hits)
		}
		s.mu.Unlock()
		if cs.failure != nil {
			failures = append(failures, cs.failure)
		}
		sc.shards = append(sc.shards, cs)
	}
	if len(targets) > 0 && len(failures) == len(targets) {
		return reply{}, searchPhaseError("query", "all shards failed", failures)
	}
	c.putContext(sc)
	// from applies to the first page only.
	if req.from > 0 {
		c.scrollPage(sc, req.from)
	}
	return c.scrollReply(r, sc, start)
}

// scrollPage takes the next n hits of a scroll in sort order.
func (c *Cluster) scrollPage(sc *searchContext, n int) []hit {
	var cands []hit
	for _, cs := range sc.shards {
		if cs.failure != nil {
			continue
		}
		end := cs.pos + n
		if end > len(cs.hits) {
			end = len(cs.hits)
		}
		cands = append(cands, cs.hits[cs.pos:end]...)
	}
	sort.SliceStable(cands, func(i, j int) bool { return lessHit(sc.req.sort)(cands[i], cands[j]) })
	if len(cands) > n {
		cands = cands[:n]
	}
	for _, h := range cands {
		for _, cs := range sc.shards {
			if cs.t.reqIdx == h.reqIdx {
				cs.pos++
			}
		}
	}
	return cands
}

func (c *Cluster) scrollReply(r *request, sc *searchContext, start time.Time) (reply, *esError) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var failures []*shardFailure
	for _, cs := range sc.shards {
		if cs.failure == nil {
			s := cs.t.s
			s.mu.Lock()
			if !cs.cp.started {
				cs.failure = &shardFailure{shard: s.num, index: cs.t.ix.name, node: c.nodeID(cs.cp.node),
					reason: errSearchContextMissing(sc.id)}
			} else if f := c.checkShardRead(cs.t, cs.cp); f != nil {
				cs.failure = f
			}
			s.mu.Unlock()
		}
		if cs.failure != nil {
			failures = append(failures, cs.failure)
		}
	}
	hits := c.scrollPage(sc, sc.req.size)
	timedOut := false
	if r.fault.TimedOut {
		timedOut = true
		hits = hits[:len(hits)/2]
	}
	req := *sc.req
	return reply{status: 200, body: c.searchBody(&req, hits, sc.total, len(sc.shards), failures, start, sc.id, "", timedOut)}, nil
}

func apiScroll(c *Cluster, r *request) (reply, *esError) {
	start := time.Now()
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	id := r.vars["scroll_id"]
	if v := r.param("scroll_id"); v != "" {
		id = v
	}
	keep := r.param("scroll")
	for k, v := range b {
		switch k {
		case "scroll_id":
			id = toString(v)
		case "scroll":
			keep = toString(v)
		case "rest_total_hits_as_int":
		default:
			return reply{}, errParsing("Unknown parameter [%s] in request body or parameter is of the wrong type[%T] ", k, v)
		}
	}
	if id == "" {
		return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: scrollId is missing;")
	}
	sc := c.getContext(id, false)
	if sc == nil {
		f := &shardFailure{shard: -1, reason: errSearchContextMissing(id)}
		err := searchPhaseError("query", "all shards failed", []*shardFailure{f})
		err.status = http.StatusNotFound
		return reply{}, err
	}
	var d time.Duration
	if keep != "" {
		var err error
		if d, err = parseTimeValue(keep); err != nil {
			return reply{}, errIllegalArgument("failed to parse setting [scroll] with value [%s] as a time value", keep)
		}
	}
	totalAsInt, e := r.boolParam("rest_total_hits_as_int", false)
	if e != nil {
		return reply{}, e
	}
	sc.mu.Lock()
	if d > sc.keepAlive { // ReaderContext keeps the longest keep-alive
		sc.keepAlive = d
	}
	sc.keepUntil(time.Now().Add(sc.keepAlive))
	if totalAsInt {
		sc.req.totalAsInt = true
	}
	sc.mu.Unlock()
	return c.scrollReply(r, sc, start)
}

func apiClearScroll(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	var ids []string
	if v := r.vars["scroll_id"]; v != "" {
		ids = strings.Split(v, ",")
	}
	switch x := b["scroll_id"].(type) {
	case string:
		ids = append(ids, x)
	case []any:
		for _, v := range x {
			ids = append(ids, toString(v))
		}
	}
	freed := 0
	for _, id := range ids {
		if id == "_all" {
			c.ctxMu.Lock()
			for k, sc := range c.contexts {
				if !sc.pit {
					// ES frees one reader context per shard, as for named ids.
					delete(c.contexts, k)
					freed += len(sc.shards)
				}
			}
			c.ctxMu.Unlock()
			continue
		}
		if sc := c.getContext(id, false); sc != nil && c.freeContext(id) {
			freed += len(sc.shards)
		}
	}
	status := 200
	if freed == 0 {
		status = http.StatusNotFound
	}
	return reply{status: status, body: obj("succeeded", true, "num_freed", freed)}, nil
}

// apiOpenPIT opens a point in time: ES POST /<idx>/_pit, OpenSearch POST
// /<idx>/_search/point_in_time.
func apiOpenPIT(c *Cluster, r *request) (reply, *esError) {
	if !r.has("keep_alive") {
		if c.info.openSearch {
			return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: keep alive not specified;")
		}
		return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: [keep_alive] is not specified;")
	}
	keep, err := parseTimeValue(r.param("keep_alive"))
	if err != nil {
		return reply{}, errIllegalArgument("failed to parse setting [keep_alive] with value [%s] as a time value", r.param("keep_alive"))
	}
	targets, e := c.searchTargets(r, false)
	if e != nil {
		return reply{}, e
	}
	pref, _ := c.parsePreference(r.param("preference"))
	sc := &searchContext{id: contextID("pit"), pit: true, keepAlive: keep, created: time.Now()}
	sc.keepUntil(time.Now().Add(keep))
	var failures []*shardFailure
	for _, t := range targets {
		s := t.s
		s.mu.Lock()
		cp, f := c.readCopy(t, pref, func(cp *shardCopy) *shardFailure { return c.checkShardRead(t, cp) })
		cs := &ctxShard{t: t, cp: cp}
		if f != nil {
			cs.failure = f
			failures = append(failures, cs.failure)
		} else {
			cs.snap = cp.snapshot()
		}
		s.mu.Unlock()
		sc.shards = append(sc.shards, cs)
	}
	if len(failures) > 0 {
		return reply{}, searchPhaseError("open_pit", "all shards failed", failures)
	}
	c.putContext(sc)
	sh := obj("total", len(targets), "successful", len(targets), "skipped", 0, "failed", 0)
	if c.info.openSearch {
		return reply{status: 200, body: obj("pit_id", sc.id, "_shards", sh, "creation_time", sc.created.UnixMilli())}, nil
	}
	if c.info.major >= 8 {
		return reply{status: 200, body: obj("id", sc.id, "_shards", sh)}, nil
	}
	return reply{status: 200, body: obj("id", sc.id)}, nil
}

// searchPIT runs a search on a point in time's frozen views.
func (c *Cluster) searchPIT(r *request, req *searchReq, start time.Time) (reply, *esError) {
	sc := c.getContext(req.pit, true)
	if sc == nil {
		f := &shardFailure{shard: -1, reason: errSearchContextMissing(req.pit)}
		err := searchPhaseError("query", "all shards failed", []*shardFailure{f})
		err.status = http.StatusNotFound
		return reply{}, err
	}
	sc.mu.Lock()
	if req.pitKeepAlive > sc.keepAlive {
		// ReaderContext keeps the longest keep-alive it was given.
		sc.keepAlive = req.pitKeepAlive
	}
	sc.keepUntil(time.Now().Add(sc.keepAlive))
	sc.mu.Unlock()
	countLimit := 0
	if req.trackTotal > 0 {
		countLimit = req.trackTotal + 1
		if req.trackTotal == math.MaxInt32 {
			countLimit = math.MaxInt32
		}
	}
	results := make([]shardResult, len(sc.shards))
	for i, cs := range sc.shards {
		s := cs.t.s
		s.mu.Lock()
		switch {
		case cs.failure != nil:
		case !cs.cp.started:
			cs.failure = &shardFailure{shard: s.num, index: cs.t.ix.name, node: c.nodeID(cs.cp.node), reason: errSearchContextMissing(sc.id)}
		default:
			if f := c.shardQueryFailure(cs.t, cs.cp, req); f != nil {
				results[i].failure = f
			} else {
				cs.cp.counters.queries.Add(1)
				results[i].hits, results[i].total = searchView(view{dense: cs.snap}, cs.t, req, req.from+req.size, countLimit, nil)
			}
		}
		if cs.failure != nil {
			results[i].failure = cs.failure
		}
		s.mu.Unlock()
	}
	return c.searchReply(r, req, len(sc.shards), results, start, "", sc.id)
}

func apiClosePIT(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	if c.info.openSearch {
		var ids []string
		if strings.HasSuffix(r.path, "/_all") {
			c.ctxMu.Lock()
			for id, sc := range c.contexts {
				if sc.pit {
					ids = append(ids, id)
				}
			}
			c.ctxMu.Unlock()
			sort.Strings(ids)
		} else {
			switch x := b["pit_id"].(type) {
			case string:
				ids = []string{x}
			case []any:
				for _, v := range x {
					ids = append(ids, toString(v))
				}
			default:
				return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: no pit ids specified;")
			}
		}
		pits := []any{}
		for _, id := range ids {
			// OpenSearch (SearchService.freeReaderContextsIfFound) reports a
			// PIT whose contexts are already gone as successfully deleted.
			if c.getContext(id, true) != nil {
				c.freeContext(id)
			}
			pits = append(pits, obj("pit_id", id, "successful", true))
		}
		return reply{status: 200, body: obj("pits", pits)}, nil
	}
	id := toString(b["id"])
	if id == "" {
		return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: [id] is not specified;")
	}
	freed := 0
	if sc := c.getContext(id, true); sc != nil && c.freeContext(id) {
		freed = len(sc.shards)
	}
	status := 200
	if freed == 0 {
		status = http.StatusNotFound
	}
	return reply{status: status, body: obj("succeeded", true, "num_freed", freed)}, nil
}

func apiListPITs(c *Cluster, r *request) (reply, *esError) {
	c.ctxMu.Lock()
	var list []*searchContext
	for _, sc := range c.contexts {
		if sc.pit && !sc.expired(time.Now()) {
			list = append(list, sc)
		}
	}
	c.ctxMu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	pits := []any{}
	for _, sc := range list {
		pits = append(pits, obj("pit_id", sc.id, "creation_time", sc.created.UnixMilli(), "keep_alive", sc.keepAlive.Milliseconds()))
	}
	return reply{status: 200, body: obj("pits", pits)}, nil
}
