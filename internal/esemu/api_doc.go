package esemu

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// docMeta are the per-document write options of a REST call or bulk item.
type docMeta struct {
	index        string
	id           string
	routing      string
	opType       string
	version      *int64
	versionType  string
	ifSeqNo      *int64
	ifTerm       *int64
	requireAlias bool
}

// writeParams reads the write options from URL parameters.
func writeParams(r *request) (docMeta, *esError) {
	m := docMeta{index: r.vars["index"], id: r.vars["id"], routing: r.param("routing"), opType: r.param("op_type")}
	for _, p := range []struct {
		name string
		dst  **int64
	}{{"version", &m.version}, {"if_seq_no", &m.ifSeqNo}, {"if_primary_term", &m.ifTerm}} {
		if r.has(p.name) {
			n, err := strconv.ParseInt(r.param(p.name), 10, 64)
			if err != nil {
				return m, errIllegalArgument("Failed to parse long parameter [%s] with value [%s]", p.name, r.param(p.name))
			}
			*p.dst = &n
		}
	}
	m.versionType = r.param("version_type")
	ra, e := r.boolParam("require_alias", false)
	m.requireAlias = ra
	return m, e
}

// validate checks the combination of options like ES's request validation.
func (m docMeta) validate(kind opKind) *esError {
	var errs []string
	if m.id == "" && m.opType != "" && kind == opDelete {
		errs = append(errs, "id is missing")
	}
	switch m.versionType {
	case "", "internal":
		if m.version != nil {
			errs = append(errs, "internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` and `if_primary_term` instead")
		}
	case "external", "external_gte":
		if m.version == nil {
			errs = append(errs, "an external version must be set with version_type ["+m.versionType+"]")
		} else if *m.version < 0 {
			errs = append(errs, "illegal version value ["+strconv.FormatInt(*m.version, 10)+"] for version type ["+strings.ToUpper(m.versionType)+"]")
		}
		if m.ifSeqNo != nil {
			errs = append(errs, "compare and write operations can not use versioning")
		}
	case "force":
		return errNotModeled("version_type [force]")
	default:
		return errIllegalArgument("No version type match [%s]", m.versionType)
	}
	if (m.ifSeqNo == nil) != (m.ifTerm == nil) {
		if m.ifSeqNo != nil {
			errs = append(errs, "ifSeqNo is set, but primary term is [0]")
		} else {
			errs = append(errs, "ifPrimaryTerm is set, but seq_no is [-2]")
		}
	}
	if m.ifSeqNo != nil && *m.ifSeqNo < 0 {
		errs = append(errs, "sequence numbers must be non negative. got ["+strconv.FormatInt(*m.ifSeqNo, 10)+"].")
	}
	if m.ifTerm != nil && *m.ifTerm <= 0 && m.ifSeqNo != nil {
		errs = append(errs, "primary term must be positive. got ["+strconv.FormatInt(*m.ifTerm, 10)+"]")
	}
	if m.opType == "create" && m.versionType != "" && m.versionType != "internal" {
		errs = append(errs, "create operations only support internal versioning. use index instead")
	}
	if m.opType != "" && m.opType != "create" && m.opType != "index" {
		return errIllegalArgument("opType must be 'create' or 'index', found: [%s]", m.opType)
	}
	if m.id != "" && len(m.id) > 512 {
		errs = append(errs, "id ["+m.id+"] is too long, must be no longer than 512 bytes but was: "+strconv.Itoa(len(m.id)))
	}
	if len(errs) == 0 {
		return nil
	}
	msg := "Validation Failed: "
	for i, e := range errs {
		msg += strconv.Itoa(i+1) + ": " + e + ";"
	}
	return newError(http.StatusBadRequest, "action_request_validation_exception", "%s", msg)
}

// toReq builds the shard write request.
func (m docMeta) toReq(kind opKind, source json.RawMessage) *writeReq {
	w := &writeReq{kind: kind, id: m.id, routing: m.routing, source: source, create: m.opType == "create", versionType: m.versionType}
	if m.version != nil {
		w.version, w.hasVersion = *m.version, true
	}
	if m.ifSeqNo != nil && m.ifTerm != nil {
		w.ifSeqNo, w.ifTerm, w.hasCAS = *m.ifSeqNo, *m.ifTerm, true
	}
	return w
}

// target resolves the index a write goes to, auto-creating it, and checks
// data stream and alias rules.
func (c *Cluster) writeTarget(m docMeta, kind opKind, isUpdate bool) (*index, *esError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.requireAlias {
		if _, ok := c.aliasIndices(m.index); !ok {
			return nil, newError(http.StatusNotFound, "index_not_found_exception",
				"no such index [%s] and [require_alias] request flag is [true] and [%s] is not an alias", m.index, m.index).
				with("index_uuid", "_na_").with("index", m.index)
		}
	}
	_, isIndex := c.indices[m.index]
	_, isDS := c.dataStreams[m.index]
	ix, viaDS, e := c.writeTargetLocked(m.index)
	if e != nil {
		return nil, e
	}
	if viaDS || isDS {
		if kind != opIndex || isUpdate || m.opType != "create" {
			return nil, errIllegalArgument("only write ops with an op_type of create are allowed in data streams")
		}
	} else if isIndex && ix.dataStream != "" && kind == opIndex && !isUpdate {
		if m.opType == "create" {
			return nil, errIllegalArgument("index request with op_type=create and no if_primary_term and if_seq_no set targeting backing indices is disallowed, target corresponding data stream [%s] instead", ix.dataStream)
		}
		if m.ifSeqNo == nil {
			return nil, errIllegalArgument("index request with op_type=index and no if_primary_term and if_seq_no set targeting backing indices is disallowed, target corresponding data stream [%s] instead", ix.dataStream)
		}
	}
	if ix.settings.seqNoDisabled {
		if m.ifSeqNo != nil {
			return nil, newError(http.StatusBadRequest, "occ_not_supported_exception",
				"Optimistic concurrency control is not supported on indices with sequence numbers disabled").indexMeta(ix.name, ix.uuid, 0)
		}
		if isUpdate {
			return nil, newError(http.StatusBadRequest, "update_not_supported_exception",
				"Updates are not supported on indices with sequence numbers disabled").indexMeta(ix.name, ix.uuid, 0)
		}
	}
	return ix, nil
}

// checkSource validates a document source: a JSON object, with @timestamp
// for data streams.
func checkSource(ix *index, src []byte) *esError {
	trimmed := bytes.TrimSpace(src)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return newError(http.StatusBadRequest, "document_parsing_exception", "[1:1] failed to parse: source is not a JSON object")
	}
	if !json.Valid(trimmed) {
		return newError(http.StatusBadRequest, "document_parsing_exception", "[1:1] failed to parse: malformed JSON")
	}
	if ix.dataStream != "" {
		var m map[string]any
		_ = decodeJSON(trimmed, &m)
		if _, ok := m["@timestamp"]; !ok {
			return newError(http.StatusBadRequest, "document_parsing_exception",
				"[1:%d] failed to parse: data stream timestamp field [@timestamp] is missing", len(trimmed))
		}
	}
	return nil
}

// compactJSON stores sources compactly so responses are stable.
func compactJSON(src []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, src); err != nil {
		return append(json.RawMessage(nil), src...)
	}
	return b.Bytes()
}

// refreshPolicy parses the refresh parameter.
func refreshPolicy(v string, present bool) (string, *esError) {
	if !present {
		return "false", nil
	}
	switch v {
	case "", "true":
		return "true", nil
	case "false", "wait_for":
		return v, nil
	}
	return "", errIllegalArgument("Unknown value for refresh: [%s].", v)
}

// afterWrite applies the refresh policy to the shards a write touched:
// "true" refreshes them now; "wait_for" waits until a refresh (scheduled or
// explicit) made the writes visible on every started copy.
func (c *Cluster) afterWrite(policy string, shards []*shard) bool {
	switch policy {
	case "true":
		for _, s := range shards {
			s.refreshAll()
		}
		return true
	case "wait_for":
		type mark struct {
			cp *shardCopy
			n  int64
		}
		var marks []mark
		var owners []*shard
		for _, s := range shards {
			s.mu.RLock()
			for _, cp := range s.copies {
				if cp.started {
					marks = append(marks, mark{cp, cp.refreshes})
					owners = append(owners, s)
				}
			}
			s.mu.RUnlock()
		}
		for i, m := range marks {
			for {
				s := owners[i]
				s.mu.RLock()
				done := m.cp.refreshes > m.n || !m.cp.started || len(m.cp.dirty) == 0
				s.mu.RUnlock()
				if done {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return false
}

// writeResponse renders a DocWriteResponse.
func (c *Cluster) writeResponse(ix *index, w *writeReq, forced bool) *orderedMap {
	m := newOrderedMap()
	m.set("_index", ix.name)
	if c.info.major == 7 && !c.info.openSearch {
		m.set("_type", "_doc")
	}
	m.set("_id", w.id)
	o := w.op
	if o == nil {
		o = w.noop
	}
	m.set("_version", o.version).set("result", w.result)
	if forced {
		m.set("forced_refresh", true)
	}
	if w.result == "noop" {
		m.set("_shards", obj("total", 0, "successful", 0, "failed", 0))
	} else {
		m.set("_shards", obj("total", w.copies, "successful", w.succeeded, "failed", 0))
	}
	if ix.settings.seqNoDisabled {
		// DocWriteResponse always writes both: UNASSIGNED_SEQ_NO and
		// UNASSIGNED_PRIMARY_TERM here (GET leaves them out).
		m.set("_seq_no", int64(-2)).set("_primary_term", int64(0))
	} else {
		m.set("_seq_no", o.seq).set("_primary_term", o.term)
	}
	return m
}

func apiIndexDoc(c *Cluster, r *request) (reply, *esError) {
	m, e := writeParams(r)
	if e != nil {
		return reply{}, e
	}
	return c.singleWrite(r, m, opIndex, nil)
}

func apiCreateDoc(c *Cluster, r *request) (reply, *esError) {
	m, e := writeParams(r)
	if e != nil {
		return reply{}, e
	}
	m.opType = "create"
	return c.singleWrite(r, m, opIndex, nil)
}

func apiDeleteDoc(c *Cluster, r *request) (reply, *esError) {
	m, e := writeParams(r)
	if e != nil {
		return reply{}, e
	}
	return c.singleWrite(r, m, opDelete, nil)
}

func (c *Cluster) singleWrite(r *request, m docMeta, kind opKind, upd *updateSpec) (reply, *esError) {
	policy, e := refreshPolicy(r.param("refresh"), r.has("refresh"))
	if e != nil {
		return reply{}, e
	}
	if m.id == "" && kind == opIndex {
		if m.opType == "" {
			m.opType = "create"
		}
		m.id = newID()
	}
	if e := m.validate(kind); e != nil {
		return reply{}, e
	}
	ix, e := c.writeTarget(m, kind, upd != nil)
	if e != nil {
		return reply{}, e
	}
	var src json.RawMessage
	if kind == opIndex && upd == nil {
		if e := checkSource(ix, r.body); e != nil {
			return reply{}, e
		}
		src = compactJSON(r.body)
	}
	w := m.toReq(kind, src)
	w.update = upd
	s := ix.shards[ix.shardFor(m.id, m.routing)]
	s.write(c, []*writeReq{w})
	if w.err != nil {
		return reply{}, w.err
	}
	forced := false
	if w.result != "noop" {
		forced = c.afterWrite(policy, []*shard{s})
	}
	body := c.writeResponse(ix, w, forced)
	// ES (RestUpdateAction, FetchSourceContext.parseFromRestRequest) returns
	// "get" when any of _source, _source_includes, _source_excludes asks
	// for the source, and not for _source=false.
	f, _ := sourceFilterFromParams(r)
	fetch := (r.has("_source") || r.has("_source_includes") || r.has("_source_excludes")) && !f.disabled
	if upd != nil && fetch && (w.op != nil || w.noop != nil) {
		o := w.op
		if o == nil {
			o = w.noop
		}
		body.set("get", obj("_seq_no", o.seq, "_primary_term", o.term, "found", true, "_source", f.apply(o.source)))
	}
	return reply{status: w.status, body: body}, nil
}

func apiUpdate(c *Cluster, r *request) (reply, *esError) {
	m, e := writeParams(r)
	if e != nil {
		return reply{}, e
	}
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	upd, e := parseUpdateBody(b)
	if e != nil {
		return reply{}, e
	}
	return c.singleWrite(r, m, opIndex, upd)
}

func parseUpdateBody(b map[string]any) (*updateSpec, *esError) {
	u := &updateSpec{detectNoop: true}
	for k, v := range b {
		switch k {
		case "doc":
			d, ok := v.(map[string]any)
			if !ok {
				return nil, errParsing("[UpdateRequest] doc doesn't support values of type: VALUE_STRING")
			}
			u.doc = d
		case "upsert":
			d, ok := v.(map[string]any)
			if !ok {
				return nil, errParsing("[UpdateRequest] upsert doesn't support values of type: VALUE_STRING")
			}
			u.upsert = d
		case "doc_as_upsert":
			u.docAsUpsert = v == true
		case "detect_noop":
			u.detectNoop = v == true
		case "_source":
		case "script", "scripted_upsert":
			return nil, errNotModeled("update option [%s]: only partial documents (doc, upsert, doc_as_upsert)", k)
		default:
			return nil, errParsing("[UpdateRequest] unknown field [%s]", k)
		}
	}
	if u.doc == nil {
		return nil, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: script or doc is missing;")
	}
	return u, nil
}

func sourceFilterFromParams(r *request) (sourceFilter, *esError) {
	var f sourceFilter
	if r.has("_source") {
		switch v := r.param("_source"); v {
		case "", "true":
		case "false":
			f.disabled = true
		default:
			f.includes = strings.Split(v, ",")
		}
	}
	if v := r.param("_source_includes"); v != "" {
		f.includes = append(f.includes, strings.Split(v, ",")...)
		f.disabled = false
	}
	if v := r.param("_source_excludes"); v != "" {
		f.excludes = append(f.excludes, strings.Split(v, ",")...)
	}
	return f, nil
}

// getDoc reads a document: realtime (the primary's engine, i.e. everything
// applied) unless realtime=false (the refreshed view of a copy).
func (c *Cluster) getDoc(r *request) (*index, *op, *esError) {
	c.mu.RLock()
	name := r.vars["index"]
	ix, ok := c.indices[name]
	if !ok {
		if list, isAlias := c.aliasIndices(name); isAlias && len(list) == 1 {
			ix, ok = list[0], true
		}
	}
	c.mu.RUnlock()
	if !ok {
		return nil, nil, errIndexNotFound(name)
	}
	if ix.closed {
		return nil, nil, errIndexClosed(ix.name, ix.uuid)
	}
	id := r.vars["id"]
	s := ix.shards[ix.shardFor(id, r.param("routing"))]
	if refresh, _ := r.boolParam("refresh", false); refresh {
		s.refreshAll()
	}
	realtime, e := r.boolParam("realtime", true)
	if e != nil {
		return nil, nil, e
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	cp := s.primary()
	if cp == nil {
		started := s.startedCopies()
		if len(started) == 0 {
			return nil, nil, newError(http.StatusServiceUnavailable, "no_shard_available_action_exception", "No shard available for [get [%s][%s]: routing [%s]]", ix.name, id, r.param("routing"))
		}
		cp = started[0]
	}
	cp.counters.gets.Add(1)
	var o *op
	if realtime {
		o = cp.engine[id]
	} else {
		o = cp.visible[id]
	}
	if o != nil && o.kind != opIndex {
		o = nil
	}
	if o != nil && r.has("version") {
		v, err := strconv.ParseInt(r.param("version"), 10, 64)
		if err == nil && v != o.version {
			return nil, nil, errVersionConflict(ix.name, ix.uuid, s.num, "["+id+"]: version conflict, current version ["+strconv.FormatInt(o.version, 10)+"] is different than the one provided ["+r.param("version")+"]")
		}
	}
	return ix, o, nil
}

func apiGetDoc(c *Cluster, r *request) (reply, *esError) {
	ix, o, e := c.getDoc(r)
	if e != nil {
		return reply{}, e
	}
	m := newOrderedMap()
	m.set("_index", ix.name)
	if c.info.major == 7 && !c.info.openSearch {
		m.set("_type", "_doc")
	}
	m.set("_id", r.vars["id"])
	if o == nil {
		m.set("found", false)
		return reply{status: http.StatusNotFound, body: m}, nil
	}
	m.set("_version", o.version)
	if !ix.settings.seqNoDisabled {
		m.set("_seq_no", o.seq).set("_primary_term", o.term)
	}
	if o.routing != "" {
		m.set("_routing", o.routing)
	}
	m.set("found", true)
	f, _ := sourceFilterFromParams(r)
	if src := f.apply(o.source); src != nil {
		m.set("_source", src)
	}
	return reply{status: 200, body: m}, nil
}

func apiHeadDoc(c *Cluster, r *request) (reply, *esError) {
	_, o, e := c.getDoc(r)
	if e != nil {
		return reply{status: e.status, body: obj()}, nil
	}
	if o == nil {
		return reply{status: http.StatusNotFound, body: obj()}, nil
	}
	return reply{status: 200, body: obj()}, nil
}

func apiGetSource(c *Cluster, r *request) (reply, *esError) {
	ix, o, e := c.getDoc(r)
	if e != nil {
		return reply{}, e
	}
	if o == nil {
		return reply{}, newError(http.StatusNotFound, "resource_not_found_exception", "Document not found [%s]/[%s]", ix.name, r.vars["id"])
	}
	f, _ := sourceFilterFromParams(r)
	return reply{status: 200, body: json.RawMessage(f.apply(o.source))}, nil
}

// bulkItem is one parsed bulk action.
type bulkItem struct {
	action string // index, create, update, delete
	meta   docMeta
	source json.RawMessage
	update *updateSpec
	ix     *index
	req    *writeReq
	err    *esError
}

func apiBulk(c *Cluster, r *request) (reply, *esError) {
	start := time.Now()
	policy, e := refreshPolicy(r.param("refresh"), r.has("refresh"))
	if e != nil {
		return reply{}, e
	}
	if len(r.body) > 0 && r.body[len(r.body)-1] != '\n' {
		return reply{}, errIllegalArgument("The bulk request must be terminated by a newline [\\n]")
	}
	defaultIndex := r.vars["index"]
	defaultRouting := r.param("routing")
	requireAlias, e := r.boolParam("require_alias", false)
	if e != nil {
		return reply{}, e
	}
	lines := ndjsonLines(r.body)
	var items []*bulkItem
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" {
			continue
		}
		var action map[string]any
		if err := decodeJSON([]byte(line), &action); err != nil {
			return reply{}, errIllegalArgument("Malformed action/metadata line [%d], expected START_OBJECT or END_OBJECT but found [VALUE_STRING]", i+1)
		}
		if len(action) != 1 {
			if len(action) == 0 {
				return reply{}, errIllegalArgument("Malformed action/metadata line [%d], expected FIELD_NAME but found [END_OBJECT]", i+1)
			}
			return reply{}, errIllegalArgument("Malformed action/metadata line [%d], expected END_OBJECT but found [FIELD_NAME]", i+1)
		}
		it := &bulkItem{}
		var metaRaw any
		for k, v := range action {
			it.action, metaRaw = k, v
		}
		switch it.action {
		case "index", "create", "update", "delete":
		default:
			return reply{}, errIllegalArgument("Malformed action/metadata line [%d], expected field [create], [delete], [index] or [update] but found [%s]", i+1, it.action)
		}
		md, ok := metaRaw.(map[string]any)
		if !ok {
			return reply{}, errIllegalArgument("Malformed action/metadata line [%d], expected START_OBJECT but found [VALUE_STRING]", i+1)
		}
		it.meta = docMeta{index: defaultIndex, routing: defaultRouting, requireAlias: requireAlias}
		if it.action == "create" {
			it.meta.opType = "create"
		}
		for k, v := range md {
			switch k {
			case "_index":
				it.meta.index = toString(v)
			case "_id":
				it.meta.id = toString(v)
				if it.meta.id == "" {
					it.err = errIllegalArgument("if _id is specified it must not be empty")
				}
			case "routing", "_routing":
				it.meta.routing = toString(v)
			case "op_type":
				it.meta.opType = toString(v)
			case "version", "_version", "if_seq_no", "if_primary_term":
				n, err := toInt64(v)
				if err != nil {
					return reply{}, errIllegalArgument("Malformed action/metadata line [%d], [%s] must be a number", i+1, k)
				}
				switch k {
				case "version", "_version":
					it.meta.version = &n
				case "if_seq_no":
					it.meta.ifSeqNo = &n
				default:
					it.meta.ifTerm = &n
				}
			case "version_type", "_version_type":
				it.meta.versionType = toString(v)
			case "require_alias":
				it.meta.requireAlias = v == true
			case "retry_on_conflict", "_source":
			case "pipeline", "dynamic_templates", "list_executed_pipelines", "require_data_stream":
				return reply{}, errNotModeled("bulk action option [%s]", k)
			default:
				return reply{}, errIllegalArgument("Action/metadata line [%d] contains an unknown parameter [%s]", i+1, k)
			}
		}
		if it.action == "index" && it.meta.opType == "create" {
			// An index action with op_type create is a create request, and
			// its item answers under "create" (BulkItemResponse.opType).
			it.action = "create"
		}
		if it.meta.index == "" && it.err == nil {
			it.err = newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: index is missing;")
		}
		if it.action != "delete" {
			i++
			if i >= len(lines) {
				return reply{}, errIllegalArgument("The bulk request must be terminated by a newline [\\n]")
			}
			src := []byte(lines[i])
			if it.action == "update" {
				var b map[string]any
				if err := decodeJSON(src, &b); err != nil {
					it.err = errParsing("failed to parse update body: %v", err)
				} else if u, e := parseUpdateBody(b); e != nil {
					it.err = e
				} else {
					it.update = u
				}
			} else {
				it.source = src
			}
		}
		items = append(items, it)
	}
	// Resolve targets and build shard requests.
	groups := map[*shard][]*bulkItem{}
	var order []*shard
	for _, it := range items {
		if it.err != nil {
			continue
		}
		kind := opIndex
		if it.action == "delete" {
			kind = opDelete
		}
		if it.meta.id == "" {
			if it.action == "update" || it.action == "delete" {
				it.err = newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: id is missing;")
				continue
			}
			it.meta.id = newID()
			if it.meta.opType == "" {
				it.meta.opType = "create"
			}
		}
		if e := it.meta.validate(kind); e != nil {
			it.err = e
			continue
		}
		ix, e := c.writeTarget(it.meta, kind, it.action == "update")
		if e != nil {
			it.err = e
			continue
		}
		it.ix = ix
		var src json.RawMessage
		if kind == opIndex && it.update == nil {
			if e := checkSource(ix, it.source); e != nil {
				it.err = e
				continue
			}
			src = compactJSON(it.source)
		}
		it.req = it.meta.toReq(kind, src)
		it.req.update = it.update
		s := ix.shards[ix.shardFor(it.meta.id, it.meta.routing)]
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], it)
	}
	var wg sync.WaitGroup
	for _, s := range order {
		wg.Add(1)
		go func(s *shard, list []*bulkItem) {
			defer wg.Done()
			reqs := make([]*writeReq, len(list))
			for i, it := range list {
				reqs[i] = it.req
			}
			s.write(c, reqs)
		}(s, groups[s])
	}
	wg.Wait()
	forced := c.afterWrite(policy, order)
	errorsSeen := false
	out := make([]any, len(items))
	for i, it := range items {
		var body *orderedMap
		status := 0
		e := it.err
		if e == nil && it.req != nil {
			e = it.req.err
		}
		if e != nil {
			errorsSeen = true
			body = newOrderedMap()
			name := it.meta.index
			if it.ix != nil {
				name = it.ix.name
			}
			body.set("_index", name)
			if c.info.major == 7 && !c.info.openSearch {
				body.set("_type", "_doc")
			}
			body.set("_id", nullable(it.meta.id))
			body.set("status", e.status)
			body.set("error", e.object(false))
		} else {
			body = c.writeResponse(it.ix, it.req, forced && it.req.result != "noop")
			status = it.req.status
			if it.action == "update" && status == http.StatusCreated {
				status = http.StatusCreated
			}
			body.set("status", status)
		}
		out[i] = obj(it.action, body)
	}
	took := time.Since(start).Milliseconds()
	var resp *orderedMap
	if c.info.openSearch || c.info.major == 7 {
		resp = obj("took", took, "errors", errorsSeen, "items", out)
	} else {
		resp = obj("errors", errorsSeen, "took", took, "items", out)
	}
	return reply{status: 200, body: resp}, nil
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	s, _ := scalarString(v)
	return s
}
