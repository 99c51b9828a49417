package esemu

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sortKey is one sort clause. field is _seq_no, _doc, _shard_doc or _score.
type sortKey struct {
	field string
	desc  bool
}

// searchReq is a parsed search (or count) request.
type searchReq struct {
	query        query
	postFilter   query
	uses         seqNoUse
	from, size   int
	sort         []sortKey // nil: by score
	searchAfter  []any
	source       sourceFilter
	seqNoPT      bool
	version      bool
	trackTotal   int // -1: off
	trackScores  bool
	totalAsInt   bool
	pit          string
	pitKeepAlive time.Duration
	scroll       time.Duration
	allowPartial bool
	aggs         []seqAgg
}

// target is one shard a request reads, in the request's shard order.
type target struct {
	ix     *index
	s      *shard
	reqIdx int
}

// hit is one matching document with its sort values.
type hit struct {
	o        *op
	ix       *index
	reqIdx   int
	score    float64
	sortVals []any
}

// view is what a shard-level search reads: a copy's current searchable view
// (bySeq, sparse by seq) or a frozen snapshot (dense, sorted by seq).
type view struct {
	sparse []*op
	dense  []*op
}

func (v view) walk(lo, hi int64, desc bool, fn func(*op) bool) {
	if v.dense != nil || v.sparse == nil {
		d := v.dense
		start := sort.Search(len(d), func(i int) bool { return d[i].seq >= lo })
		end := sort.Search(len(d), func(i int) bool { return d[i].seq > hi })
		if desc {
			for i := end - 1; i >= start; i-- {
				if !fn(d[i]) {
					return
				}
			}
			return
		}
		for i := start; i < end; i++ {
			if !fn(d[i]) {
				return
			}
		}
		return
	}
	s := v.sparse
	if lo < 0 {
		lo = 0
	}
	if hi >= int64(len(s)) {
		hi = int64(len(s)) - 1
	}
	if desc {
		for i := hi; i >= lo; i-- {
			if o := s[i]; o != nil && !fn(o) {
				return
			}
		}
		return
	}
	for i := lo; i <= hi; i++ {
		if o := s[i]; o != nil && !fn(o) {
			return
		}
	}
}

func (c *shardCopy) snapshot() []*op {
	out := make([]*op, 0, len(c.visible))
	for _, o := range c.bySeq {
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

// shardResult is the outcome of one shard-level read.
type shardResult struct {
	hits    []hit
	total   int
	aggs    []bucketCounts // per req.aggs
	failure *shardFailure
}

// shardFailure is one entry of _shards.failures.
type shardFailure struct {
	shard  int
	index  string
	node   string
	reason *esError
}

func (f *shardFailure) object() *orderedMap {
	m := obj("shard", f.shard, "index", f.index)
	if f.node != "" {
		m.set("node", f.node)
	} else {
		m.set("node", nil)
	}
	m.set("reason", f.reason.object(false))
	return m
}

// copyOrder lists the started copies that may serve a read, in the order
// ES tries them: any started copy (ES may route _shards:N to a replica), or
// the primary/replica with OpenSearch's _primary/_replica preferences. A
// custom preference string always starts at the same copy (ES rotates the
// shard's active copies by the string's hash); otherwise the first is
// random. s.mu is held.
func (c *Cluster) copyOrder(s *shard, pref preference) []*shardCopy {
	var cands []*shardCopy
	for _, cp := range s.copies {
		if !cp.started {
			continue
		}
		switch pref.copy {
		case CopyPrimary:
			if !cp.primary {
				continue
			}
		case CopyReplica:
			if cp.primary {
				continue
			}
		}
		cands = append(cands, cp)
	}
	if len(cands) == 0 {
		return nil
	}
	var first int
	if pref.custom != "" {
		first = int(uint32(murmur3UTF16(pref.custom))) % len(cands)
	} else {
		first = c.randIntn(len(cands))
	}
	order := append(append(make([]*shardCopy, 0, len(cands)), cands[first:]...), cands[:first]...)
	if len(pref.preferNodes) > 0 {
		// The preferred nodes' copies first, the others after them.
		sort.SliceStable(order, func(i, j int) bool {
			return pref.preferNodes[c.nodeID(order[i].node)] && !pref.preferNodes[c.nodeID(order[j].node)]
		})
	}
	return order
}

// readCopy picks the copy serving a shard-level read that opens a view
// (search, count, scroll, opening a PIT). As ES's search does, a copy whose
// shard request fails is skipped for the next one in copyOrder: the shard
// fails, with the last copy's failure, only when every copy failed. check
// is the shard request on one copy; s.mu is held.
func (c *Cluster) readCopy(t target, pref preference, check func(*shardCopy) *shardFailure) (*shardCopy, *shardFailure) {
	var f *shardFailure
	for _, cp := range c.copyOrder(t.s, pref) {
		if f = check(cp); f == nil {
			return cp, nil
		}
	}
	if f == nil {
		f = c.checkShardRead(t, nil) // no started copy
	}
	return nil, f
}

// injectedShardFailure is what a failed shard copy reports.
func (c *Cluster) injectedShardFailure(nodeName string) *esError {
	return newError(http.StatusInternalServerError, "node_disconnected_exception",
		"[%s][127.0.0.1:9300][indices:data/read/search[phase/query]] disconnected (injected by esemu)", nodeName)
}

func (c *Cluster) nodeID(n int) string {
	if n < 0 || n >= len(c.nodes) {
		return ""
	}
	return c.nodes[n].id
}

func (c *Cluster) nodeName(n int) string {
	if n < 0 || n >= len(c.nodes) {
		return ""
	}
	return c.nodes[n].name
}

// checkShardRead applies failure injection and availability for a read on
// a copy; it returns the failure to report, or nil.
func (c *Cluster) checkShardRead(t target, cp *shardCopy) *shardFailure {
	ix := t.ix
	if cp == nil {
		return &shardFailure{shard: t.s.num, index: ix.name, reason: newError(http.StatusServiceUnavailable,
			"no_shard_available_action_exception", "")}
	}
	if cp.failSearches > 0 {
		cp.failSearches--
		return &shardFailure{shard: t.s.num, index: ix.name, node: c.nodeID(cp.node),
			reason: c.injectedShardFailure(c.nodeName(cp.node))}
	}
	return nil
}

// seqNoFailure is the per-shard failure for reading _seq_no on an index that
// has sequence numbers disabled.
func seqNoFailure(ix *index, uses seqNoUse) *esError {
	if !ix.settings.seqNoDisabled {
		return nil
	}
	if uses.query {
		qse := newError(http.StatusBadRequest, "query_shard_exception",
			"failed to create query: Cannot query field [_seq_no]: _seq_no cannot be queried when [index.disable_sequence_numbers] is [true]").
			with("index_uuid", ix.uuid).with("index", ix.name)
		qse.causedBy = errIllegalArgument("Cannot query field [_seq_no]: _seq_no cannot be queried when [index.disable_sequence_numbers] is [true]")
		return qse
	}
	if uses.sort {
		return errIllegalArgument("Cannot query field [_seq_no]: _seq_no cannot be queried when [index.disable_sequence_numbers] is [true]")
	}
	if uses.agg {
		return errNotModeled("an aggregation on _seq_no of an index with [index.disable_sequence_numbers] true")
	}
	return nil
}

// searchView runs the query on one view and returns the first `limit` hits
// in the request's sort order, and the match count up to countLimit. With
// aggs (one per req.aggs) it counts every match into them.
func searchView(v view, t target, req *searchReq, limit int, countLimit int, aggs []bucketCounts) ([]hit, int) {
	lo, hi := seqBounds(req.query)
	if req.postFilter != nil {
		l, h := seqBounds(req.postFilter)
		lo, hi = max64(lo, l), min64(hi, h)
	}
	desc := false
	for _, k := range req.sort {
		if k.field == "_score" {
			continue
		}
		desc = k.desc
		break
	}
	score := 0.0
	if req.query.scoring() {
		score = 1.0
	}
	// Without a total to count (nor aggregations), start right after the
	// search_after point.
	if req.searchAfter != nil && countLimit == 0 && aggs == nil && len(req.sort) > 0 {
		if k := req.sort[0]; k.field == "_seq_no" || k.field == "_doc" {
			if after, ok := req.searchAfter[0].(int64); ok {
				if k.desc {
					hi = min64(hi, after)
				} else {
					lo = max64(lo, after)
				}
			}
		}
	}
	var hits []hit
	total := 0
	v.walk(lo, hi, desc, func(o *op) bool {
		if !req.query.match(o, t.ix) {
			return true
		}
		if req.postFilter != nil && !req.postFilter.match(o, t.ix) {
			return true
		}
		total++
		if aggs != nil {
			collectAggs(req.aggs, aggs, o, t.ix)
		}
		if len(hits) < limit {
			h := hit{o: o, ix: t.ix, reqIdx: t.reqIdx, score: score}
			h.sortVals = sortValues(req.sort, h)
			if req.searchAfter == nil || compareToAfter(req.sort, h.sortVals, req.searchAfter) > 0 {
				hits = append(hits, h)
			}
		}
		return aggs != nil || len(hits) < limit || total < countLimit
	})
	return hits, total
}

// sortValues are the hit's values for the sort clauses.
func sortValues(keys []sortKey, h hit) []any {
	if keys == nil {
		return nil
	}
	out := make([]any, len(keys))
	for i, k := range keys {
		switch k.field {
		case "_seq_no":
			out[i] = h.o.seq
		case "_doc":
			out[i] = h.o.seq
		case "_shard_doc":
			out[i] = int64(h.reqIdx)<<32 | h.o.seq
		case "_score":
			out[i] = h.score
		}
	}
	return out
}

func cmpAny(a, b any) int {
	fa, fb := toFloat(a), toFloat(b)
	ia, aInt := a.(int64)
	ib, bInt := b.(int64)
	if aInt && bInt {
		switch {
		case ia < ib:
			return -1
		case ia > ib:
			return 1
		}
		return 0
	}
	switch {
	case fa < fb:
		return -1
	case fa > fb:
		return 1
	}
	return 0
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return math.NaN()
}

// compareToAfter compares a hit's sort values to search_after values in sort
// order: > 0 when the hit comes after them.
func compareToAfter(keys []sortKey, vals []any, after []any) int {
	for i, k := range keys {
		c := cmpAny(vals[i], after[i])
		if k.desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// lessHit orders hits across shards: by the sort values, then by shard
// request index, then by doc, as ES's merge does.
func lessHit(keys []sortKey) func(a, b hit) bool {
	return func(a, b hit) bool {
		if keys == nil {
			if a.score != b.score {
				return a.score > b.score
			}
		}
		for i, k := range keys {
			c := cmpAny(a.sortVals[i], b.sortVals[i])
			if k.desc {
				c = -c
			}
			if c != 0 {
				return c < 0
			}
		}
		if a.reqIdx != b.reqIdx {
			return a.reqIdx < b.reqIdx
		}
		return a.o.seq < b.o.seq
	}
}

// preference is a parsed preference parameter.
type preference struct {
	shards map[int]bool // nil: every shard
	copy   string       // "", CopyPrimary, CopyReplica
	custom string
	// preferNodes are the node ids of _prefer_nodes: their copies first.
	preferNodes map[string]bool
}

func (c *Cluster) parsePreference(p string) (preference, *esError) {
	var out preference
	if p == "" {
		return out, nil
	}
	rest := p
	if strings.HasPrefix(p, "_shards:") {
		spec := strings.TrimPrefix(p, "_shards:")
		rest = ""
		if i := strings.Index(spec, "|"); i >= 0 {
			spec, rest = spec[:i], spec[i+1:]
		}
		out.shards = map[int]bool{}
		for _, x := range strings.Split(spec, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil {
				return out, errIllegalArgument("Failed to parse preference [%s]: shard id [%s] is not a number", p, x)
			}
			out.shards[n] = true
		}
		if rest == "" {
			return out, nil
		}
	}
	if !strings.HasPrefix(rest, "_") {
		if rest != p && (c.info.openSearch || c.info.major < 8) {
			// After "_shards:N|" Elasticsearch 7 and OpenSearch parse a
			// preference type (OperationRouting.preferenceActiveShardIterator):
			// a custom string there is refused, as Preference.parse
			// refuses it. Elasticsearch 8+ take it as a custom string.
			return out, errIllegalArgument("no Preference for [%s]", rest)
		}
		out.custom = rest
		return out, nil
	}
	switch {
	case rest == "_local" || rest == "_only_local":
	case strings.HasPrefix(rest, "_prefer_nodes:"):
		out.preferNodes = map[string]bool{}
		for _, id := range strings.Split(strings.TrimPrefix(rest, "_prefer_nodes:"), ",") {
			out.preferNodes[id] = true
		}
	case strings.HasPrefix(rest, "_only_nodes:"):
	case rest == "_primary" || rest == "_primary_first":
		if !c.info.openSearch {
			return out, errIllegalArgument("no Preference for [%s]", rest)
		}
		out.copy = CopyPrimary
		if rest == "_primary_first" {
			out.copy = ""
		}
	case rest == "_replica" || rest == "_replica_first":
		if !c.info.openSearch {
			return out, errIllegalArgument("no Preference for [%s]", rest)
		}
		out.copy = CopyReplica
		if rest == "_replica_first" {
			out.copy = ""
		}
	case strings.HasPrefix(rest, "_shards:"):
		return out, errIllegalArgument("[_shards] preference must come first in [%s]", p)
	default:
		return out, errIllegalArgument("no Preference for [%s]", rest)
	}
	return out, nil
}

// targets lists the shards a request reads, ordered by index name and shard
// number, filtered by preference shards and routing values.
func targetsFor(indices []*index, pref preference, routing []string) []target {
	var out []target
	for _, ix := range indices {
		var only map[int]bool
		if len(routing) > 0 {
			only = map[int]bool{}
			for _, r := range routing {
				only[ix.shardFor("", r)] = true
			}
		}
		for _, s := range ix.shards {
			if pref.shards != nil && !pref.shards[s.num] {
				continue
			}
			if only != nil && !only[s.num] {
				continue
			}
			out = append(out, target{ix: ix, s: s, reqIdx: len(out)})
		}
	}
	return out
}

// searchContext is an open scroll or point in time.
type searchContext struct {
	mu        sync.Mutex
	id        string
	pit       bool
	keepAlive time.Duration
	expires   atomic.Int64 // unix nanoseconds; read without mu by expiry
	shards    []*ctxShard
	created   time.Time

	// scroll only
	req   *searchReq
	total int
}

// ctxShard is one shard of a context: the copy it pinned and its frozen view.
type ctxShard struct {
	t       target
	cp      *shardCopy
	snap    []*op
	failure *shardFailure // sticky: a shard that failed stays failed
	hits    []hit         // scroll: matching hits in sort order
	pos     int
}

// keepUntil sets when the context expires.
func (sc *searchContext) keepUntil(t time.Time) { sc.expires.Store(t.UnixNano()) }

func (sc *searchContext) expired(now time.Time) bool { return now.UnixNano() > sc.expires.Load() }

func (c *Cluster) putContext(sc *searchContext) {
	c.ctxMu.Lock()
	c.contexts[sc.id] = sc
	c.ctxMu.Unlock()
}

func (c *Cluster) getContext(id string, pit bool) *searchContext {
	c.ctxMu.Lock()
	defer c.ctxMu.Unlock()
	sc := c.contexts[id]
	if sc == nil || sc.pit != pit || sc.expired(time.Now()) {
		return nil
	}
	return sc
}

func (c *Cluster) freeContext(id string) bool {
	c.ctxMu.Lock()
	defer c.ctxMu.Unlock()
	if _, ok := c.contexts[id]; ok {
		delete(c.contexts, id)
		return true
	}
	return false
}

func (c *Cluster) expireContexts(now time.Time) {
	c.ctxMu.Lock()
	defer c.ctxMu.Unlock()
	for id, sc := range c.contexts {
		if sc.expired(now) {
			delete(c.contexts, id)
		}
	}
}

// OpenContexts reports how many scrolls and points in time are open.
func (c *Cluster) OpenContexts() (scrolls, pits int) {
	c.ctxMu.Lock()
	defer c.ctxMu.Unlock()
	for _, sc := range c.contexts {
		if sc.pit {
			pits++
		} else {
			scrolls++
		}
	}
	return
}

func contextID(kind string) string {
	return strings.TrimRight(fmt.Sprintf("%s%s", kind, newUUID()+newUUID()), "=")
}
