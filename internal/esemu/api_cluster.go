package esemu

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

func apiRoot(c *Cluster, r *request) (reply, *esError) {
	i := c.info
	v := newOrderedMap()
	if i.distribution != "" {
		v.set("distribution", i.distribution)
	}
	v.set("number", i.number)
	if !i.openSearch {
		v.set("build_flavor", "default")
	}
	v.set("build_type", "tar").set("build_hash", i.buildHash).set("build_date", i.buildDate).
		set("build_snapshot", false).set("lucene_version", i.lucene).
		set("minimum_wire_compatibility_version", i.minWire).
		set("minimum_index_compatibility_version", i.minIndex)
	c.mu.RLock()
	name := c.nodes[0].name
	for _, n := range c.nodes {
		if n.alive {
			name = n.name
			break
		}
	}
	c.mu.RUnlock()
	return reply{status: 200, body: obj("name", name, "cluster_name", c.cfg.ClusterName,
		"cluster_uuid", c.uuid, "version", v, "tagline", i.tagline)}, nil
}

// shardCounts tallies copies for health.
type shardCounts struct {
	activePrimary, active, unassigned, unassignedPrimary int
}

func (sc *shardCounts) add(s *shard) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, cp := range s.copies {
		switch {
		case cp.started && cp.primary:
			sc.activePrimary++
			sc.active++
		case cp.started:
			sc.active++
		default:
			sc.unassigned++
			if cp.primary {
				sc.unassignedPrimary++
			}
		}
	}
}

func healthRank(h string) int {
	switch h {
	case "green":
		return 0
	case "yellow":
		return 1
	}
	return 2
}

func apiHealth(c *Cluster, r *request) (reply, *esError) {
	want := r.param("wait_for_status")
	if want != "" && want != "green" && want != "yellow" && want != "red" {
		return reply{}, errIllegalArgument("unknown cluster health status [%s]", want)
	}
	timeout := 30 * time.Second
	if r.has("timeout") {
		d, err := parseTimeValue(r.param("timeout"))
		if err != nil {
			return reply{}, errIllegalArgument("failed to parse setting [timeout] with value [%s] as a time value: %v", r.param("timeout"), err)
		}
		timeout = d
	}
	level := r.param("level")
	if level == "" {
		level = "cluster"
	}
	if level != "cluster" && level != "indices" && level != "shards" {
		return reply{}, errIllegalArgument("level parameter must be one of [cluster] or [indices] or [shards] but was [%s]", level)
	}
	deadline := time.Now().Add(timeout)
	for {
		body, status, e := c.healthBody(r, level)
		if e != nil {
			return reply{}, e
		}
		if want == "" || healthRank(status) <= healthRank(want) {
			return reply{status: 200, body: body}, nil
		}
		if time.Now().After(deadline) {
			body.set("timed_out", true)
			code := http.StatusRequestTimeout
			if ok, _ := r.boolParam("return_200_for_cluster_health_timeout", false); ok || c.info.major >= 9 {
				code = 200
			}
			return reply{status: code, body: body}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) healthBody(r *request, level string) (*orderedMap, string, *esError) {
	c.mu.RLock()
	var indices []*index
	if expr, ok := r.vars["index"]; ok {
		res, e := c.resolveLocked(expr, expandOpts{open: true, closed: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true})
		if e != nil {
			c.mu.RUnlock()
			return nil, "", e
		}
		indices = res.indices
	} else {
		for _, ix := range c.indices {
			indices = append(indices, ix)
		}
	}
	sort.Slice(indices, func(i, j int) bool { return indices[i].name < indices[j].name })
	nodes := 0
	for _, n := range c.nodes {
		if n.alive {
			nodes++
		}
	}
	c.mu.RUnlock()
	var total shardCounts
	status := "green"
	perIndex := newOrderedMap()
	for _, ix := range indices {
		// Closed indices keep their shard copies (replicated closed indices,
		// ES 7.2+) and count in health like open ones.
		var ic shardCounts
		shardsObj := newOrderedMap()
		for _, s := range ix.shards {
			var sc shardCounts
			sc.add(s)
			ic.activePrimary += sc.activePrimary
			ic.active += sc.active
			ic.unassigned += sc.unassigned
			ic.unassignedPrimary += sc.unassignedPrimary
			st := "green"
			if sc.unassignedPrimary > 0 {
				st = "red"
			} else if sc.unassigned > 0 {
				st = "yellow"
			}
			so := obj("status", st, "primary_active", sc.activePrimary > 0, "active_shards", sc.active,
				"relocating_shards", 0, "initializing_shards", 0, "unassigned_shards", sc.unassigned)
			if !c.info.openSearch && c.info.major >= 8 {
				so.set("unassigned_primary_shards", sc.unassignedPrimary)
			}
			shardsObj.set(strconv.Itoa(s.num), so)
		}
		h := ix.health()
		if healthRank(h) > healthRank(status) {
			status = h
		}
		total.activePrimary += ic.activePrimary
		total.active += ic.active
		total.unassigned += ic.unassigned
		total.unassignedPrimary += ic.unassignedPrimary
		io := obj("status", h, "number_of_shards", ix.settings.shards, "number_of_replicas", ix.settings.replicas,
			"active_primary_shards", ic.activePrimary, "active_shards", ic.active, "relocating_shards", 0,
			"initializing_shards", 0, "unassigned_shards", ic.unassigned)
		if !c.info.openSearch && c.info.major >= 8 { // unassigned_primary_shards: 8.x+
			io.set("unassigned_primary_shards", ic.unassignedPrimary)
		}
		if level == "shards" {
			io.set("shards", shardsObj)
		}
		perIndex.set(ix.name, io)
	}
	pct := 100.0
	if all := total.active + total.unassigned; all > 0 {
		pct = 100 * float64(total.active) / float64(all)
	}
	b := obj("cluster_name", c.cfg.ClusterName, "status", status, "timed_out", false)
	if c.info.openSearch {
		b.set("discovered_master", true).set("discovered_cluster_manager", true)
	}
	b.set("number_of_nodes", nodes).set("number_of_data_nodes", nodes).
		set("active_primary_shards", total.activePrimary).set("active_shards", total.active).
		set("relocating_shards", 0).set("initializing_shards", 0).set("unassigned_shards", total.unassigned)
	if !c.info.openSearch && c.info.major >= 8 {
		b.set("unassigned_primary_shards", total.unassignedPrimary)
	}
	b.set("delayed_unassigned_shards", 0).set("number_of_pending_tasks", 0).set("number_of_in_flight_fetch", 0).
		set("task_max_waiting_in_queue_millis", 0).set("active_shards_percent_as_number", pct)
	if level != "cluster" {
		b.set("indices", perIndex)
	}
	return b, status, nil
}

// indicesForRequest resolves the {index} path variable (or all indices)
// with the request's index options. Named closed indices are an
// index_closed_exception unless closedOK.
func (c *Cluster) indicesForRequest(r *request, defaults expandOpts, closedOK bool) ([]*index, map[*index]string, *esError) {
	o := defaults
	if r.has("expand_wildcards") {
		if e := o.parseExpandWildcards(r.param("expand_wildcards")); e != nil {
			return nil, nil, e
		}
	}
	if v, e := r.boolParam("ignore_unavailable", o.ignoreUnavailable); e != nil {
		return nil, nil, e
	} else {
		o.ignoreUnavailable = v
	}
	if v, e := r.boolParam("allow_no_indices", o.allowNoIndices); e != nil {
		return nil, nil, e
	} else {
		o.allowNoIndices = v
	}
	expr := r.vars["index"]
	c.mu.RLock()
	res, e := c.resolveLocked(expr, o)
	c.mu.RUnlock()
	if e != nil {
		return nil, nil, e
	}
	var out []*index
	for _, ix := range res.indices {
		if ix.closed && !closedOK {
			if o.ignoreUnavailable {
				continue
			}
			return nil, nil, errIndexClosed(ix.name, ix.uuid)
		}
		out = append(out, ix)
	}
	return out, res.matched, nil
}

func apiRefresh(c *Cluster, r *request) (reply, *esError) {
	indices, _, e := c.indicesForRequest(r, defaultExpand(), false)
	if e != nil {
		return reply{}, e
	}
	total, ok := 0, 0
	for _, ix := range indices {
		for _, s := range ix.shards {
			t, k := s.refreshAll()
			total += t
			ok += k
		}
	}
	return reply{status: 200, body: obj("_shards", obj("total", total, "successful", ok, "failed", 0))}, nil
}

// statsMetrics are the index stats sections ES knows; modeled ones are true.
var statsMetrics = map[string]bool{
	"docs": true, "store": true, "indexing": true, "get": true, "search": true, "merges": true,
	"refresh": true, "flush": true, "warmer": true, "query_cache": true, "fielddata": true,
	"completion": true, "segments": true, "translog": true, "request_cache": true, "recovery": true,
	"bulk": false, "shard_stats": false, "mappings": false, "dense_vector": false, "sparse_vector": false,
}

var statsOrder = []string{"docs", "store", "indexing", "get", "search", "merges", "refresh", "flush", "warmer",
	"query_cache", "fielddata", "completion", "segments", "translog", "request_cache", "recovery"}

// copyStats are the counters one copy reports.
type copyStats struct {
	docs, deleted, indexTotal, deleteTotal, queryTotal, fetchTotal, scrollTotal, refreshTotal, getTotal, openContexts int64
	storeBytes                                                                                                        int64
	ops                                                                                                               int64
}

func (a *copyStats) add(b copyStats) {
	a.docs += b.docs
	a.deleted += b.deleted
	a.indexTotal += b.indexTotal
	a.deleteTotal += b.deleteTotal
	a.queryTotal += b.queryTotal
	a.fetchTotal += b.fetchTotal
	a.scrollTotal += b.scrollTotal
	a.refreshTotal += b.refreshTotal
	a.getTotal += b.getTotal
	a.storeBytes += b.storeBytes
	a.ops += b.ops
}

func (cp *shardCopy) stats() copyStats {
	return copyStats{docs: int64(len(cp.visible)), deleted: cp.deletedDocs, refreshTotal: cp.refreshes,
		queryTotal: cp.counters.queries.Load(), fetchTotal: cp.counters.queries.Load(),
		scrollTotal: cp.counters.scrolls.Load(), getTotal: cp.counters.gets.Load(),
		indexTotal: cp.nIndex, deleteTotal: cp.nDelete, storeBytes: cp.storeBytes, ops: cp.nOps}
}

func (c *Cluster) statsSections(metrics []string, st copyStats) *orderedMap {
	m := newOrderedMap()
	for _, name := range metrics {
		switch name {
		case "docs":
			d := obj("count", st.docs, "deleted", st.deleted)
			if c.info.major >= 8 && !c.info.openSearch {
				d.set("total_size_in_bytes", st.storeBytes)
			}
			m.set("docs", d)
		case "store":
			m.set("store", obj("size_in_bytes", st.storeBytes, "total_data_set_size_in_bytes", st.storeBytes, "reserved_in_bytes", 0))
		case "indexing":
			m.set("indexing", obj("index_total", st.indexTotal, "index_time_in_millis", 0, "index_current", 0,
				"index_failed", 0, "delete_total", st.deleteTotal, "delete_time_in_millis", 0, "delete_current", 0,
				"noop_update_total", 0, "is_throttled", false, "throttle_time_in_millis", 0))
		case "get":
			g := obj("total", st.getTotal)
			if c.info.openSearch {
				g.set("getTime", "0s") // OpenSearch writes it whatever ?human says
			}
			m.set("get", g.set("time_in_millis", 0).set("exists_total", 0).set("exists_time_in_millis", 0).
				set("missing_total", 0).set("missing_time_in_millis", 0).set("current", 0))
		case "search":
			m.set("search", obj("open_contexts", st.openContexts, "query_total", st.queryTotal, "query_time_in_millis", 0,
				"query_current", 0, "fetch_total", st.fetchTotal, "fetch_time_in_millis", 0, "fetch_current", 0,
				"scroll_total", st.scrollTotal, "scroll_time_in_millis", 0, "scroll_current", 0,
				"suggest_total", 0, "suggest_time_in_millis", 0, "suggest_current", 0))
		case "merges":
			m.set("merges", obj("current", 0, "current_docs", 0, "current_size_in_bytes", 0, "total", 0,
				"total_time_in_millis", 0, "total_docs", 0, "total_size_in_bytes", 0, "total_stopped_time_in_millis", 0,
				"total_throttled_time_in_millis", 0, "total_auto_throttle_in_bytes", 20971520))
		case "refresh":
			m.set("refresh", obj("total", st.refreshTotal, "total_time_in_millis", 0, "external_total", st.refreshTotal,
				"external_total_time_in_millis", 0, "listeners", 0))
		case "flush":
			m.set("flush", obj("total", 0, "periodic", 0, "total_time_in_millis", 0))
		case "warmer":
			m.set("warmer", obj("current", 0, "total", st.refreshTotal, "total_time_in_millis", 0))
		case "query_cache":
			m.set("query_cache", obj("memory_size_in_bytes", 0, "total_count", 0, "hit_count", 0, "miss_count", 0,
				"cache_size", 0, "cache_count", 0, "evictions", 0))
		case "fielddata":
			m.set("fielddata", obj("memory_size_in_bytes", 0, "evictions", 0))
		case "completion":
			m.set("completion", obj("size_in_bytes", 0))
		case "segments":
			m.set("segments", obj("count", 0, "memory_in_bytes", 0, "terms_memory_in_bytes", 0,
				"stored_fields_memory_in_bytes", 0, "term_vectors_memory_in_bytes", 0, "norms_memory_in_bytes", 0,
				"points_memory_in_bytes", 0, "doc_values_memory_in_bytes", 0, "index_writer_memory_in_bytes", 0,
				"version_map_memory_in_bytes", 0, "fixed_bit_set_memory_in_bytes", 0, "max_unsafe_auto_id_timestamp", -1,
				"file_sizes", obj()))
		case "translog":
			m.set("translog", obj("operations", st.ops, "size_in_bytes", st.storeBytes, "uncommitted_operations", st.ops,
				"uncommitted_size_in_bytes", st.storeBytes, "earliest_last_modified_age", 0))
		case "request_cache":
			m.set("request_cache", obj("memory_size_in_bytes", 0, "evictions", 0, "hit_count", 0, "miss_count", 0))
		case "recovery":
			m.set("recovery", obj("current_as_source", 0, "current_as_target", 0, "throttle_time_in_millis", 0))
		}
	}
	return m
}

// parseMetrics validates a metric list from the path.
func parseMetrics(r *request) ([]string, *esError) {
	raw, ok := r.vars["metric"]
	if !ok || raw == "_all" {
		return statsOrder, nil
	}
	want := map[string]bool{}
	var unknown []string
	notModeled := ""
	for _, m := range strings.Split(raw, ",") {
		m = strings.TrimSpace(m)
		if m == "_all" {
			return statsOrder, nil
		}
		// The REST metric is "merge" (CommonStatsFlags.Flag.Merge); the
		// section it selects is "merges", which is no metric name.
		switch m {
		case "merge":
			m = "merges"
		case "merges":
			unknown = append(unknown, m)
			continue
		}
		modeled, known := statsMetrics[m]
		if !known {
			unknown = append(unknown, m)
			continue
		}
		if !modeled && notModeled == "" {
			notModeled = m
		}
		want[m] = true
	}
	if len(unknown) > 0 {
		candidates := []string{}
		for m := range statsMetrics {
			if m == "merges" {
				m = "merge"
			}
			candidates = append(candidates, m)
		}
		return nil, errIllegalArgument("%s", unrecognized(r.path, "metric", unknown, candidates))
	}
	if notModeled != "" {
		return nil, errNotModeled("stats metric [%s]", notModeled)
	}
	var out []string
	for _, m := range statsOrder {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

func apiStats(c *Cluster, r *request) (reply, *esError) {
	level := r.param("level")
	if level == "" {
		level = "indices"
	}
	if level != "cluster" && level != "indices" && level != "shards" {
		return reply{}, errIllegalArgument("level parameter must be one of [cluster] or [indices] or [shards] but was [%s]", level)
	}
	metrics, e := parseMetrics(r)
	if e != nil {
		return reply{}, e
	}
	forbidClosed, e := r.boolParam("forbid_closed_indices", true)
	if e != nil {
		return reply{}, e
	}
	indices, _, e := c.indicesForRequest(r, expandOpts{open: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true, hidden: false}, !forbidClosed)
	if e != nil {
		return reply{}, e
	}
	// Closing and opening write closed[ix] under c.mu.
	closed := make(map[*index]bool, len(indices))
	c.mu.RLock()
	for _, ix := range indices {
		closed[ix] = ix.closed
	}
	c.mu.RUnlock()
	scrolls, pits := c.OpenContexts()
	_ = pits
	var allPrim, allTotal copyStats
	shardsTotal, shardsOK := 0, 0
	indicesObj := newOrderedMap()
	for _, ix := range indices {
		var prim, tot copyStats
		shardsObj := newOrderedMap()
		if !closed[ix] {
			for _, s := range ix.shards {
				s.mu.RLock()
				var list []any
				for _, cp := range s.copies {
					shardsTotal++
					if !cp.started {
						continue
					}
					shardsOK++
					st := cp.stats()
					if cp.primary {
						prim.add(st)
					}
					tot.add(st)
					if level == "shards" {
						list = append(list, c.shardStatsObj(ix, s, cp, metrics, st))
					}
				}
				s.mu.RUnlock()
				if level == "shards" && len(list) > 0 {
					shardsObj.set(strconv.Itoa(s.num), list)
				}
			}
		}
		allPrim.add(prim)
		allTotal.add(tot)
		io := obj("uuid", ix.uuid)
		if c.cfg.Flavor.indexHealthInStats() {
			if closed[ix] {
				io.set("status", "close")
			} else {
				io.set("health", ix.health()).set("status", "open")
			}
		}
		if closed[ix] {
			io.set("primaries", obj()).set("total", obj())
		} else {
			io.set("primaries", c.statsSections(metrics, prim)).set("total", c.statsSections(metrics, tot))
		}
		if level == "shards" {
			io.set("shards", shardsObj)
		}
		indicesObj.set(ix.name, io)
	}
	allTotal.openContexts = int64(scrolls)
	body := obj("_shards", obj("total", shardsTotal, "successful", shardsOK, "failed", 0),
		"_all", obj("primaries", c.statsSections(metrics, allPrim), "total", c.statsSections(metrics, allTotal)))
	if level != "cluster" {
		body.set("indices", indicesObj)
	}
	return reply{status: 200, body: body}, nil
}

func (c *Cluster) shardStatsObj(ix *index, s *shard, cp *shardCopy, metrics []string, st copyStats) *orderedMap {
	m := obj("routing", obj("state", "STARTED", "primary", cp.primary, "node", c.nodeID(cp.node), "relocating_node", nil))
	sec := c.statsSections(metrics, st)
	for _, k := range sec.keys {
		m.set(k, sec.vals[k])
	}
	// The keys of a commit no flush has followed yet (min_retained_seq_no
	// appears after one); the values say everything was flushed.
	userData := obj(
		"local_checkpoint", strconv.FormatInt(cp.lcp, 10),
		"max_seq_no", strconv.FormatInt(cp.maxSeq, 10),
		"max_unsafe_auto_id_timestamp", "-1",
		"history_uuid", ix.uuid,
		"translog_uuid", ix.uuid,
	)
	if v := c.info.commitVersion; v != "" {
		userData.set("es_version", v)
	}
	m.set("commit", obj("id", commitID(ix.uuid, s.num, cp.node), "generation", 3+cp.refreshes/10, "user_data", userData, "num_docs", st.docs))
	m.set("seq_no", obj("max_seq_no", cp.maxSeq, "local_checkpoint", cp.lcp, "global_checkpoint", cp.knownGCP))
	var leases []any
	if cp.primary {
		for _, o := range s.copies {
			if o.started {
				leases = append(leases, obj("id", "peer_recovery/"+c.nodeID(o.node), "retaining_seq_no", s.gcp+1,
					"timestamp", time.Now().UnixMilli(), "source", "peer recovery"))
			}
		}
	}
	if leases == nil {
		leases = []any{}
	}
	m.set("retention_leases", obj("primary_term", s.term, "version", s.term, "leases", leases))
	path := fmt.Sprintf("/var/lib/esemu/%s/nodes/0/indices/%s/%d", c.nodeName(cp.node), ix.uuid, s.num)
	m.set("shard_path", obj("state_path", path, "data_path", path, "is_custom_data_path", false))
	if c.cfg.Flavor.searchIdleInStats() {
		idle := int64(0)
		if !cp.lastSearch.IsZero() {
			idle = time.Since(cp.lastSearch).Milliseconds()
		}
		m.set("search_idle", false).set("search_idle_time", idle)
	}
	return m
}

func commitID(uuid string, shard, node int) string {
	return fmt.Sprintf("%s%02d%02d", uuid[:18], shard%100, (node+100)%100)
}
