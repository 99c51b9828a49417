package esemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

func apiCreateIndex(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	var settings map[string]any
	var mappings json.RawMessage
	var aliases map[string]any
	for k, v := range b {
		switch k {
		case "settings":
			m, ok := v.(map[string]any)
			if !ok {
				return reply{}, errParsing("[settings] must be an object")
			}
			settings = m
		case "mappings":
			mappings, _ = json.Marshal(v)
		case "aliases":
			m, ok := v.(map[string]any)
			if !ok {
				return reply{}, errParsing("[aliases] must be an object")
			}
			aliases = m
		default:
			return reply{}, errParsing("unknown key [%s] for create index", k)
		}
	}
	name := r.vars["index"]
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.matchTemplate(name, true); t != nil && t.dataStream {
		return reply{}, errIllegalArgument("cannot create index with name [%s], because it matches with template [%s] that creates data streams only, use create data stream api instead", name, t.name)
	}
	if _, e := c.createIndexLocked(name, settings, mappings, aliases, ""); e != nil {
		return reply{}, e
	}
	return reply{status: 200, body: obj("acknowledged", true, "shards_acknowledged", true, "index", name)}, nil
}

func apiDeleteIndex(c *Cluster, r *request) (reply, *esError) {
	expr := r.vars["index"]
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range splitExpr(expr) {
		if (isWildcard(p) || p == "_all") && c.cfg.Flavor.destructiveRequiresName() {
			return reply{}, errIllegalArgument("Wildcard expressions or all indices are not allowed")
		}
		if _, ok := c.indices[p]; !ok {
			if _, isAlias := c.aliasIndices(p); isAlias {
				return reply{}, errIllegalArgument("The provided expression [%s] matches an alias, specify the corresponding concrete indices instead.", p)
			}
		}
	}
	o := expandOpts{open: true, closed: true, allowNoIndices: true}
	if r.has("expand_wildcards") {
		if e := o.parseExpandWildcards(r.param("expand_wildcards")); e != nil {
			return reply{}, e
		}
	}
	o.ignoreUnavailable, _ = r.boolParam("ignore_unavailable", false)
	res, e := c.resolveLocked(expr, o)
	if e != nil {
		return reply{}, e
	}
	for _, ix := range res.indices {
		if ix.dataStream != "" {
			if ds := c.dataStreams[ix.dataStream]; ds != nil && ds.writeIndex() == ix {
				return reply{}, errIllegalArgument("index [%s] is the write index for data stream [%s] and cannot be deleted", ix.name, ds.name)
			}
		}
	}
	for _, ix := range res.indices {
		if ix.dataStream != "" {
			if ds := c.dataStreams[ix.dataStream]; ds != nil {
				for i, b := range ds.indices {
					if b == ix {
						ds.indices = append(ds.indices[:i], ds.indices[i+1:]...)
						break
					}
				}
			}
		}
		c.deleteIndexLocked(ix)
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

// settingsObject renders an index's settings nested ({"index":{...}}) or
// flat ({"index.x": "..."}), optionally filtered by name patterns.
func (c *Cluster) settingsObject(ix *index, flat bool, names []string) *orderedMap {
	return renderSettings(c.explicitSettings(ix), flat, names)
}

// explicitSettings are the settings ES lists without include_defaults.
func (c *Cluster) explicitSettings(ix *index) map[string]string {
	all := map[string]string{}
	for k, v := range ix.settings.flat {
		all[k] = v
	}
	all["index.number_of_shards"] = strconv.Itoa(ix.settings.shards)
	all["index.number_of_replicas"] = strconv.Itoa(ix.settings.replicas)
	all["index.uuid"] = ix.uuid
	all["index.creation_date"] = strconv.FormatInt(ix.created.UnixMilli(), 10)
	all["index.provided_name"] = ix.name
	if !c.info.openSearch && c.info.major >= 8 {
		all["index.routing.allocation.include._tier_preference"] = "data_content"
	}
	if c.info.openSearch {
		all["index.replication.type"] = "DOCUMENT"
	}
	if ix.settings.hidden {
		all["index.hidden"] = "true"
	}
	all["index.version.created"] = c.info.indexVersion
	return all
}

// defaultSettings are the modeled settings the index did not set, as
// include_defaults=true lists them.
func (c *Cluster) defaultSettings(ix *index) map[string]string {
	d := map[string]string{
		"index.refresh_interval":  "1s",
		"index.max_result_window": "10000",
		"index.gc_deletes":        "60s",
		"index.hidden":            "false",
		// The setting's default is the number of shards, whatever
		// routing_num_shards the index's metadata holds.
		"index.number_of_routing_shards": strconv.Itoa(ix.settings.shards),
	}
	if !c.info.openSearch && c.info.major >= 8 {
		d["index.mode"] = "standard"
	}
	if c.cfg.Flavor.seqNoDisabling() {
		d["index.disable_sequence_numbers"] = strconv.FormatBool(ix.settings.seqNoDisabled)
	}
	explicit := c.explicitSettings(ix)
	for k := range d {
		if _, set := explicit[k]; set {
			delete(d, k)
		}
	}
	return d
}

func renderSettings(all map[string]string, flat bool, names []string) *orderedMap {
	keys := make([]string, 0, len(all))
	for k := range all {
		if len(names) > 0 && !matchesAny(names, k) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := newOrderedMap()
	if flat {
		for _, k := range keys {
			out.set(k, settingValue(k, all[k]))
		}
		return out
	}
	for _, k := range keys {
		parts := strings.Split(k, ".")
		m := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := m.get(p)
			if !ok {
				next = newOrderedMap()
				m.set(p, next)
			}
			m = next.(*orderedMap)
		}
		m.set(parts[len(parts)-1], settingValue(k, all[k]))
	}
	return out
}

// listSettings are the modeled settings whose value is a list: stored
// comma-joined, rendered as a JSON array as ES does.
var listSettings = map[string]bool{"index.routing_path": true}

func settingValue(key, v string) any {
	if !listSettings[key] {
		return v
	}
	out := []any{}
	if v != "" {
		for _, p := range strings.Split(v, ",") {
			out = append(out, p)
		}
	}
	return out
}

func (c *Cluster) aliasesObject(ix *index) *orderedMap {
	out := newOrderedMap()
	for _, name := range ix.aliasNames() {
		a := ix.aliases[name]
		m := newOrderedMap()
		if a.routing != "" {
			m.set("index_routing", a.routing).set("search_routing", a.routing)
		}
		if a.isWriteIndex != nil {
			m.set("is_write_index", *a.isWriteIndex)
		}
		if a.isHidden {
			m.set("is_hidden", true)
		}
		out.set(name, m)
	}
	return out
}

func mappingsObject(ix *index) any {
	if len(ix.mappings) == 0 {
		return obj()
	}
	return ix.mappings
}

func (c *Cluster) adminIndices(r *request) ([]*index, *esError) {
	o := expandOpts{open: true, closed: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true}
	indices, _, e := c.indicesForRequest(r, o, true)
	return indices, e
}

func apiGetIndex(c *Cluster, r *request) (reply, *esError) {
	indices, e := c.adminIndices(r)
	if e != nil {
		return reply{}, e
	}
	flat, _ := r.boolParam("flat_settings", false)
	out := newOrderedMap()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, ix := range indices {
		m := obj("aliases", c.aliasesObject(ix), "mappings", mappingsObject(ix), "settings", c.settingsObject(ix, flat, nil))
		if ix.dataStream != "" {
			m.set("data_stream", ix.dataStream)
		}
		out.set(ix.name, m)
	}
	return reply{status: 200, body: out}, nil
}

func apiHeadIndex(c *Cluster, r *request) (reply, *esError) {
	indices, e := c.adminIndices(r)
	if e != nil || len(indices) == 0 {
		return reply{status: http.StatusNotFound, body: obj()}, nil
	}
	return reply{status: 200, body: obj()}, nil
}

func apiGetSettings(c *Cluster, r *request) (reply, *esError) {
	indices, e := c.adminIndices(r)
	if e != nil {
		return reply{}, e
	}
	flat, _ := r.boolParam("flat_settings", false)
	var names []string
	if n := r.vars["name"]; n != "" && n != "_all" {
		names = splitExpr(n)
	}
	defaults, _ := r.boolParam("include_defaults", false)
	out := newOrderedMap()
	for _, ix := range indices {
		m := obj("settings", c.settingsObject(ix, flat, names))
		if defaults {
			m.set("defaults", renderSettings(c.defaultSettings(ix), flat, names))
		}
		out.set(ix.name, m)
	}
	return reply{status: 200, body: out}, nil
}

// dynamicSettings can change on an existing index.
var dynamicSettings = map[string]bool{
	"index.refresh_interval": true, "index.number_of_replicas": true, "index.max_result_window": true,
	"index.gc_deletes": true, "index.hidden": true,
}

func apiPutSettings(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	if s, ok := b["settings"].(map[string]any); ok && len(b) == 1 {
		b = s
	}
	flat := map[string]string{}
	flattenSettings("", b, flat)
	for k := range flat {
		nk := normalizeSettingKey(k)
		if _, known := settingSpec[nk]; !known {
			return reply{}, errNotModeled("index setting [%s]", nk)
		}
		if !dynamicSettings[nk] {
			return reply{}, errIllegalArgument("Can't update non dynamic settings [[%s]] for open indices", nk)
		}
	}
	indices, e := c.adminIndices(r)
	if e != nil {
		return reply{}, e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ix := range indices {
		next := map[string]any{}
		for k, v := range ix.settings.flat {
			next[k] = v
		}
		for k, v := range flat {
			next[normalizeSettingKey(k)] = v
		}
		next["index.number_of_shards"] = strconv.Itoa(ix.settings.shards)
		if _, ok := next["index.number_of_replicas"]; !ok {
			next["index.number_of_replicas"] = strconv.Itoa(ix.settings.replicas)
		}
		s, e := parseSettings(c.cfg.Flavor, next)
		if e != nil {
			return reply{}, e
		}
		s.seqNoDisabled = ix.settings.seqNoDisabled
		oldReplicas := ix.settings.replicas
		ix.settings = s
		delete(c.nextRefresh, ix)
		if s.replicas != oldReplicas {
			c.resizeReplicas(ix, s.replicas)
		}
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

// resizeReplicas adds replica copies (recovered from the primary on free
// nodes) or drops the last ones. c.mu is held.
func (c *Cluster) resizeReplicas(ix *index, replicas int) {
	for _, s := range ix.shards {
		s.mu.Lock()
		for len(s.copies) > replicas+1 {
			last := s.copies[len(s.copies)-1]
			if last.primary {
				s.copies = append([]*shardCopy{last}, s.copies[:len(s.copies)-1]...)
				continue
			}
			s.copies = s.copies[:len(s.copies)-1]
		}
		for len(s.copies) < replicas+1 {
			s.copies = append(s.copies, newCopy(-1, false))
			s.copies[len(s.copies)-1].started = false
			s.copies[len(s.copies)-1].inSync = false
		}
		s.updateGCP()
		s.mu.Unlock()
	}
	go c.reconcileAll()
}

func apiGetMapping(c *Cluster, r *request) (reply, *esError) {
	indices, e := c.adminIndices(r)
	if e != nil {
		return reply{}, e
	}
	out := newOrderedMap()
	for _, ix := range indices {
		out.set(ix.name, obj("mappings", mappingsObject(ix)))
	}
	return reply{status: 200, body: out}, nil
}

func apiOpen(c *Cluster, r *request) (reply, *esError) {
	indices, e := c.adminIndices(r)
	if e != nil {
		return reply{}, e
	}
	c.mu.Lock()
	for _, ix := range indices {
		if ix.closed {
			ix.closed = false
			for _, s := range ix.shards {
				s.refreshAll()
			}
		}
	}
	c.mu.Unlock()
	c.reconcileAll()
	return reply{status: 200, body: obj("acknowledged", true, "shards_acknowledged", true)}, nil
}

func apiClose(c *Cluster, r *request) (reply, *esError) {
	o := expandOpts{open: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true}
	indices, _, e := c.indicesForRequest(r, o, true)
	if e != nil {
		return reply{}, e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := newOrderedMap()
	for _, ix := range indices {
		if ix.dataStream != "" {
			if ds := c.dataStreams[ix.dataStream]; ds != nil && ds.writeIndex() == ix {
				return reply{}, errIllegalArgument("cannot close the write index [%s] of data stream [%s]", ix.name, ds.name)
			}
		}
	}
	for _, ix := range indices {
		ix.closed = true
		res.set(ix.name, obj("closed", true))
	}
	body := obj("acknowledged", true, "shards_acknowledged", true)
	if c.info.openSearch || c.info.major >= 7 {
		body.set("indices", res)
	}
	return reply{status: 200, body: body}, nil
}

// Aliases.

func apiAliasActions(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	actions, ok := b["actions"].([]any)
	if !ok || len(actions) == 0 {
		return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: no actions specified;")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range actions {
		am, ok := a.(map[string]any)
		if !ok || len(am) != 1 {
			return reply{}, errParsing("[aliases] action must be an object with one key")
		}
		for kind, raw := range am {
			spec, ok := raw.(map[string]any)
			if !ok {
				return reply{}, errParsing("[%s] must be an object", kind)
			}
			indexExprs := stringsOf(spec["index"], spec["indices"])
			aliasNames := stringsOf(spec["alias"], spec["aliases"])
			if len(indexExprs) == 0 {
				return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: One of [index] or [indices] is required;")
			}
			res, e := c.resolveLocked(strings.Join(indexExprs, ","), expandOpts{open: true, allowNoIndices: false, allowDataStreams: true})
			if e != nil {
				return reply{}, e
			}
			switch kind {
			case "add":
				if len(aliasNames) == 0 {
					return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: One of [alias] or [aliases] is required;")
				}
				body := map[string]any{}
				for k, v := range spec {
					switch k {
					case "index", "indices", "alias", "aliases":
					case "must_exist":
					default:
						body[k] = v
					}
				}
				for _, ix := range res.indices {
					if ix.dataStream != "" {
						return reply{}, errNotModeled("aliases on data streams")
					}
					for _, al := range aliasNames {
						if e := c.attachAlias(ix, al, body); e != nil {
							return reply{}, e
						}
					}
				}
			case "remove":
				mustExist := spec["must_exist"] == true
				for _, ix := range res.indices {
					for _, al := range aliasNames {
						removed := false
						for name := range ix.aliases {
							if globMatch(al, name) {
								delete(ix.aliases, name)
								removed = true
							}
						}
						if !removed && mustExist {
							return reply{}, newError(http.StatusNotFound, "aliases_not_found_exception", "aliases [%s] missing", al).with("resource.type", "aliases").with("resource.id", al)
						}
					}
				}
			case "remove_index":
				for _, ix := range res.indices {
					if ix.dataStream != "" {
						return reply{}, errIllegalArgument("it is not possible to remove a data stream's backing index")
					}
					c.deleteIndexLocked(ix)
				}
			default:
				return reply{}, errParsing("Unknown field [%s]", kind)
			}
		}
	}
	body := obj("acknowledged", true)
	if !c.info.openSearch && c.info.major >= 8 {
		body.set("errors", false) // IndicesAliasesResponse, ES 8.14+
	}
	return reply{status: 200, body: body}, nil
}

// stringsOf collects names from string or array values.
func stringsOf(vals ...any) []string {
	var out []string
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, s := range x {
				out = append(out, toString(s))
			}
		}
	}
	return out
}

func apiGetAlias(c *Cluster, r *request) (reply, *esError) {
	var indices []*index
	if _, ok := r.vars["index"]; ok {
		list, e := c.adminIndices(r)
		if e != nil {
			return reply{}, e
		}
		indices = list
	} else {
		c.mu.RLock()
		for _, ix := range c.indices {
			if !ix.settings.hidden && ix.dataStream == "" || r.param("expand_wildcards") == "all" {
				indices = append(indices, ix)
			}
		}
		c.mu.RUnlock()
		sort.Slice(indices, func(i, j int) bool { return indices[i].name < indices[j].name })
	}
	var patterns []string
	if n := r.vars["name"]; n != "" && n != "_all" && n != "*" {
		patterns = splitExpr(n)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := newOrderedMap()
	found := map[string]bool{}
	for _, ix := range indices {
		all := c.aliasesObject(ix)
		if patterns == nil {
			out.set(ix.name, obj("aliases", all))
			continue
		}
		sel := newOrderedMap()
		for _, k := range all.keys {
			if matchesAny(patterns, k) {
				sel.set(k, all.vals[k])
				for _, p := range patterns {
					if globMatch(p, k) {
						found[p] = true
					}
				}
			}
		}
		if len(sel.keys) > 0 {
			out.set(ix.name, obj("aliases", sel))
		}
	}
	var missing []string
	for _, p := range patterns {
		if !isWildcard(p) && !found[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		word := "alias"
		if len(missing) > 1 {
			word = "aliases"
		}
		body := obj("error", fmt.Sprintf("%s [%s] missing", word, strings.Join(missing, ",")), "status", http.StatusNotFound)
		for _, k := range out.keys {
			body.set(k, out.vals[k])
		}
		return reply{status: http.StatusNotFound, body: body}, nil
	}
	return reply{status: 200, body: out}, nil
}

func apiHeadAlias(c *Cluster, r *request) (reply, *esError) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, name := range c.allAliasNames() {
		for _, p := range splitExpr(r.vars["name"]) {
			if globMatch(p, name) {
				return reply{status: 200, body: obj()}, nil
			}
		}
	}
	return reply{status: http.StatusNotFound, body: obj()}, nil
}

func apiPutAlias(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res, e := c.resolveLocked(r.vars["index"], expandOpts{open: true, allowNoIndices: false})
	if e != nil {
		return reply{}, e
	}
	body := map[string]any{}
	for k, v := range b {
		body[k] = v
	}
	for _, ix := range res.indices {
		if e := c.attachAlias(ix, r.vars["name"], body); e != nil {
			return reply{}, e
		}
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func apiDeleteAlias(c *Cluster, r *request) (reply, *esError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res, e := c.resolveLocked(r.vars["index"], expandOpts{open: true, closed: true, allowNoIndices: false})
	if e != nil {
		return reply{}, e
	}
	removed := false
	patterns := splitExpr(r.vars["name"])
	for _, ix := range res.indices {
		for name := range ix.aliases {
			if matchesAny(patterns, name) || r.vars["name"] == "_all" {
				delete(ix.aliases, name)
				removed = true
			}
		}
	}
	if !removed {
		return reply{}, newError(http.StatusNotFound, "aliases_not_found_exception", "aliases [%s] missing", r.vars["name"]).
			with("resource.type", "aliases").with("resource.id", r.vars["name"])
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

// Index templates.

func apiPutTemplate(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	name := r.vars["name"]
	t := &indexTemplate{name: name, raw: b}
	for k, v := range b {
		switch k {
		case "index_patterns":
			t.patterns = stringsOf(v)
		case "priority":
			n, err := toInt64(v)
			if err != nil {
				return reply{}, errParsing("[priority] must be a number")
			}
			t.priority = n
		case "data_stream":
			if m, ok := v.(map[string]any); ok {
				for dk := range m {
					if dk != "hidden" && dk != "allow_custom_routing" {
						return reply{}, errNotModeled("data_stream option [%s]", dk)
					}
				}
			}
			t.dataStream = true
		case "template":
			tm, ok := v.(map[string]any)
			if !ok {
				return reply{}, errParsing("[template] must be an object")
			}
			for tk, tv := range tm {
				switch tk {
				case "settings":
					t.settings, _ = tv.(map[string]any)
				case "mappings":
					t.mappings, _ = json.Marshal(tv)
				case "aliases":
					t.aliases, _ = tv.(map[string]any)
				case "lifecycle", "data_stream_options":
					return reply{}, errNotModeled("index template option [template.%s]", tk)
				default:
					return reply{}, errParsing("[template] unknown field [%s]", tk)
				}
			}
		case "composed_of":
			if len(stringsOf(v)) > 0 {
				return reply{}, errNotModeled("component templates (composed_of)")
			}
		case "_meta", "version", "allow_auto_create", "deprecated", "ignore_missing_component_templates":
		default:
			return reply{}, errParsing("[index_template] unknown field [%s]", k)
		}
	}
	if len(t.patterns) == 0 {
		return reply{}, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: index patterns are missing;")
	}
	if t.settings != nil {
		if _, e := parseSettings(c.cfg.Flavor, t.settings); e != nil {
			return reply{}, e
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if create, _ := r.boolParam("create", false); create {
		if _, ok := c.templates[name]; ok {
			return reply{}, errIllegalArgument("index template [%s] already exists", name)
		}
	}
	for _, other := range c.templates {
		if other.name == name || other.priority != t.priority {
			continue
		}
		for _, p := range t.patterns {
			for _, q := range other.patterns {
				if globMatch(p, q) || globMatch(q, p) {
					return reply{}, errIllegalArgument("index template [%s] has index patterns %v matching patterns from existing templates [%s] with patterns (%s => %v) that have the same priority [%d], multiple index templates may not match during index creation, please use a different priority",
						name, t.patterns, other.name, other.name, other.patterns, t.priority)
				}
			}
		}
	}
	c.templates[name] = t
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func apiGetTemplate(c *Cluster, r *request) (reply, *esError) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	name := r.vars["name"]
	var names []string
	for n := range c.templates {
		if name == "" || globMatch(name, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if name != "" && !isWildcard(name) && len(names) == 0 {
		return reply{}, newError(http.StatusNotFound, "resource_not_found_exception", "index template matching [%s] not found", name)
	}
	list := []any{}
	for _, n := range names {
		t := c.templates[n]
		it := obj("index_patterns", t.patterns)
		tmpl := newOrderedMap()
		if t.settings != nil {
			flat := map[string]string{}
			flattenSettings("", t.settings, flat)
			s := newOrderedMap()
			idx := newOrderedMap()
			keys := make([]string, 0, len(flat))
			for k := range flat {
				keys = append(keys, strings.TrimPrefix(normalizeSettingKey(k), "index."))
			}
			sort.Strings(keys)
			for _, k := range keys {
				v := flat[k]
				if x, ok := flat["index."+k]; ok {
					v = x
				}
				idx.set(k, v)
			}
			s.set("index", idx)
			tmpl.set("settings", s)
		}
		if t.mappings != nil {
			tmpl.set("mappings", t.mappings)
		}
		if t.aliases != nil {
			tmpl.set("aliases", t.aliases)
		}
		if len(tmpl.keys) > 0 {
			it.set("template", tmpl)
		}
		it.set("composed_of", []string{})
		if t.priority != 0 {
			it.set("priority", t.priority)
		}
		if t.dataStream {
			ds := obj("hidden", false)
			if !c.info.openSearch {
				ds.set("allow_custom_routing", false)
			} else {
				ds = obj("timestamp_field", obj("name", "@timestamp"))
			}
			it.set("data_stream", ds)
		}
		list = append(list, obj("name", n, "index_template", it))
	}
	return reply{status: 200, body: obj("index_templates", list)}, nil
}

func apiHeadTemplate(c *Cluster, r *request) (reply, *esError) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.templates[r.vars["name"]]; ok {
		return reply{status: 200, body: obj()}, nil
	}
	return reply{status: http.StatusNotFound, body: obj()}, nil
}

func apiDeleteTemplate(c *Cluster, r *request) (reply, *esError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := r.vars["name"]
	deleted := 0
	for n := range c.templates {
		if globMatch(name, n) {
			for _, ds := range c.dataStreams {
				if ds.template == n {
					return reply{}, errIllegalArgument("unable to remove composable templates [%s] as they are in use by a data streams [%s]", n, ds.name)
				}
			}
			delete(c.templates, n)
			deleted++
		}
	}
	if deleted == 0 {
		return reply{}, newError(http.StatusNotFound, "resource_not_found_exception", "index_template [%s] missing", name)
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

// Data streams.

func apiCreateDataStream(c *Cluster, r *request) (reply, *esError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, e := c.createDataStreamLocked(r.vars["name"]); e != nil {
		return reply{}, e
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func (c *Cluster) dataStreamsMatching(expr string) ([]*dataStream, *esError) {
	var out []*dataStream
	seen := map[string]bool{}
	parts := splitExpr(expr)
	if len(parts) == 0 || expr == "_all" {
		parts = []string{"*"}
	}
	for _, p := range parts {
		matched := false
		for name, ds := range c.dataStreams {
			if globMatch(p, name) && !seen[name] {
				seen[name] = true
				out = append(out, ds)
			}
			matched = matched || globMatch(p, name)
		}
		if !matched && !isWildcard(p) {
			return nil, errIndexNotFound(p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func apiGetDataStream(c *Cluster, r *request) (reply, *esError) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	list, e := c.dataStreamsMatching(r.vars["name"])
	if e != nil {
		return reply{}, e
	}
	out := []any{}
	for _, ds := range list {
		status := "GREEN"
		var indices []any
		for _, ix := range ds.indices {
			switch ix.health() {
			case "red":
				status = "RED"
			case "yellow":
				if status == "GREEN" {
					status = "YELLOW"
				}
			}
			io := obj("index_name", ix.name, "index_uuid", ix.uuid)
			if !c.info.openSearch && c.info.major >= 8 {
				io.set("prefer_ilm", true).set("managed_by", "Unmanaged").set("index_mode", "standard")
			}
			indices = append(indices, io)
		}
		m := obj("name", ds.name, "timestamp_field", obj("name", "@timestamp"), "indices", indices,
			"generation", ds.generation, "status", status, "template", ds.template)
		if !c.info.openSearch {
			if c.info.major >= 8 {
				m.set("next_generation_managed_by", "Unmanaged").set("prefer_ilm", true)
			}
			m.set("hidden", ds.hidden).set("system", false).set("allow_custom_routing", false).set("replicated", false)
			if c.info.major >= 8 {
				m.set("rollover_on_write", false)
			}
			if c.info.major >= 9 {
				m.set("failure_store", obj("enabled", false, "rollover_on_write", true, "indices", []any{}))
			}
		}
		out = append(out, m)
	}
	return reply{status: 200, body: obj("data_streams", out)}, nil
}

func apiDeleteDataStream(c *Cluster, r *request) (reply, *esError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list, e := c.dataStreamsMatching(r.vars["name"])
	if e != nil {
		return reply{}, e
	}
	for _, ds := range list {
		for _, ix := range ds.indices {
			c.deleteIndexLocked(ix)
		}
		delete(c.dataStreams, ds.name)
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

var rolloverSuffix = regexp.MustCompile(`^(.*)-(\d+)$`)

// rolloverCondition is one max_*/min_* condition and whether it is met.
type rolloverCondition struct {
	key string
	met bool
	min bool
}

func apiRollover(c *Cluster, r *request) (reply, *esError) {
	b, e := r.jsonBody()
	if e != nil {
		return reply{}, e
	}
	dryRun, e := r.boolParam("dry_run", false)
	if e != nil {
		return reply{}, e
	}
	var condsRaw map[string]any
	var newSettings map[string]any
	var newAliases map[string]any
	var newMappings json.RawMessage
	for k, v := range b {
		switch k {
		case "conditions":
			condsRaw, _ = v.(map[string]any)
		case "settings":
			newSettings, _ = v.(map[string]any)
		case "aliases":
			newAliases, _ = v.(map[string]any)
		case "mappings":
			newMappings, _ = json.Marshal(v)
		default:
			return reply{}, errParsing("[rollover] unknown field [%s]", k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	target := r.vars["index"]
	var old *index
	ds := c.dataStreams[target]
	switch {
	case ds != nil:
		old = ds.writeIndex()
	default:
		if _, ok := c.aliasIndices(target); !ok {
			if _, isIndex := c.indices[target]; isIndex {
				return reply{}, errIllegalArgument("rollover target is a [concrete index] but one of [alias,data_stream] was expected")
			}
			if c.info.openSearch || c.info.major < 8 {
				// 404 came with ES 8's return-404-on-missing-target
				// capability; 7.x and OpenSearch's MetadataRolloverService
				// throw IllegalArgumentException.
				return reply{}, errIllegalArgument("rollover target [%s] does not exist", target)
			}
			return reply{}, newError(http.StatusNotFound, "resource_not_found_exception", "rollover target [%s] does not exist", target)
		}
		w, e := c.aliasWriteIndex(target)
		if e != nil {
			return reply{}, errIllegalArgument("rollover target [%s] does not point to a write index", target)
		}
		old = w
	}
	conds, e := evalConditions(condsRaw, old)
	if e != nil {
		return reply{}, e
	}
	rolled := len(conds) == 0
	anyMax := false
	allMin := true
	for _, cd := range conds {
		if cd.min {
			allMin = allMin && cd.met
		} else {
			anyMax = anyMax || cd.met
		}
	}
	if len(conds) > 0 {
		rolled = anyMax && allMin
	}
	condObj := newOrderedMap()
	for _, cd := range conds {
		condObj.set(cd.key, cd.met)
	}
	var newName string
	switch {
	case ds != nil:
		newName = c.backingIndexName(ds.name, ds.generation+1, time.Now())
	case r.vars["new_index"] != "":
		newName = r.vars["new_index"]
	default:
		m := rolloverSuffix.FindStringSubmatch(old.name)
		if m == nil {
			return reply{}, errIllegalArgument("index name [%s] does not match pattern '^.*-\\d+$'", old.name)
		}
		n, _ := strconv.Atoi(m[2])
		newName = fmt.Sprintf("%s-%06d", m[1], n+1)
	}
	// The new name is validated whether or not the conditions are met, and
	// on a dry run too (indices.rollover/10_basic).
	if e := validateIndexName(newName); e != nil {
		return reply{}, e
	}
	if ix, ok := c.indices[newName]; ok {
		return reply{}, newError(http.StatusBadRequest, "resource_already_exists_exception", "index [%s/%s] already exists", newName, ix.uuid).
			with("index_uuid", ix.uuid).with("index", newName)
	}
	if rolled && !dryRun {
		if ds != nil {
			ix, e := c.createIndexLocked(newName, nil, nil, nil, ds.name)
			if e != nil {
				return reply{}, e
			}
			ds.indices = append(ds.indices, ix)
			ds.generation++
		} else {
			ix, e := c.createIndexLocked(newName, newSettings, newMappings, newAliases, "")
			if e != nil {
				return reply{}, e
			}
			a := old.aliases[target]
			if a.isWriteIndex != nil && *a.isWriteIndex {
				f, t := false, true
				old.aliases[target] = &aliasMeta{isWriteIndex: &f, isHidden: a.isHidden, routing: a.routing}
				ix.aliases[target] = &aliasMeta{isWriteIndex: &t, isHidden: a.isHidden, routing: a.routing}
			} else {
				delete(old.aliases, target)
				ix.aliases[target] = &aliasMeta{isHidden: a.isHidden, routing: a.routing}
			}
		}
	}
	body := obj("acknowledged", rolled && !dryRun, "shards_acknowledged", rolled && !dryRun,
		"old_index", old.name, "new_index", newName, "rolled_over", rolled && !dryRun, "dry_run", dryRun)
	if !c.info.openSearch && c.info.major >= 8 {
		body.set("lazy", false)
	}
	body.set("conditions", condObj)
	return reply{status: 200, body: body}, nil
}

// evalConditions evaluates rollover conditions against the write index.
func evalConditions(raw map[string]any, ix *index) ([]rolloverCondition, *esError) {
	var docs, bytes int64
	for _, s := range ix.shards {
		s.mu.RLock()
		if p := s.primary(); p != nil {
			docs += int64(len(p.visible))
			bytes += p.storeBytes
		}
		s.mu.RUnlock()
	}
	age := time.Since(ix.created)
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []rolloverCondition
	hasMax := false
	for _, k := range keys {
		v := raw[k]
		s := toString(v)
		cd := rolloverCondition{key: fmt.Sprintf("[%s: %s]", k, s), min: strings.HasPrefix(k, "min_")}
		switch k {
		case "max_docs", "max_primary_shard_docs", "min_docs", "min_primary_shard_docs":
			n, err := toInt64(v)
			if err != nil {
				return nil, errParsing("[%s] must be a number", k)
			}
			if cd.min {
				cd.met = docs >= n
			} else {
				cd.met = docs >= n
			}
		case "max_age", "min_age":
			d, err := parseTimeValue(s)
			if err != nil {
				return nil, errParsing("failed to parse [%s] with value [%s]", k, s)
			}
			cd.met = age >= d
		case "max_size", "max_primary_shard_size", "min_size", "min_primary_shard_size":
			n, err := parseByteSize(s)
			if err != nil {
				return nil, errParsing("failed to parse [%s] with value [%s]", k, s)
			}
			cd.met = bytes >= n
		default:
			return nil, errParsing("[conditions] unknown field [%s]", k)
		}
		hasMax = hasMax || !cd.min
		out = append(out, cd)
	}
	if len(out) > 0 && !hasMax {
		return nil, newError(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: at least one max_* rollover condition must be set when using min_* conditions;")
	}
	return out, nil
}

func parseByteSize(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	units := []struct {
		suffix string
		mult   int64
	}{{"pb", 1 << 50}, {"tb", 1 << 40}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"b", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			f, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			return int64(f * float64(u.mult)), err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// Resolve.

func apiResolve(c *Cluster, r *request) (reply, *esError) {
	o := expandOpts{open: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true}
	if r.has("expand_wildcards") {
		if e := o.parseExpandWildcards(r.param("expand_wildcards")); e != nil {
			return reply{}, e
		}
	}
	o.ignoreUnavailable, _ = r.boolParam("ignore_unavailable", false)
	c.mu.RLock()
	defer c.mu.RUnlock()
	idxSet := map[string]*index{}
	aliasSet := map[string]bool{}
	dsSet := map[string]*dataStream{}
	parts := splitExpr(r.vars["name"])
	sawWildcard := false
	for i, p := range parts {
		if strings.HasPrefix(p, "-") && i > 0 && sawWildcard {
			pat := p[1:]
			for n := range idxSet {
				if globMatch(pat, n) {
					delete(idxSet, n)
				}
			}
			for n := range aliasSet {
				if globMatch(pat, n) {
					delete(aliasSet, n)
				}
			}
			for n := range dsSet {
				if globMatch(pat, n) {
					delete(dsSet, n)
				}
			}
			continue
		}
		if p == "_all" {
			p = "*"
		}
		if isWildcard(p) {
			sawWildcard = true
			for n, ix := range c.indices {
				if globMatch(p, n) && c.wildcardVisible(ix, p, o) {
					idxSet[n] = ix
				}
			}
			for _, a := range c.allAliasNames() {
				if globMatch(p, a) {
					aliasSet[a] = true
				}
			}
			for n, ds := range c.dataStreams {
				if globMatch(p, n) && (!ds.hidden || o.hidden) {
					dsSet[n] = ds
				}
			}
			continue
		}
		switch {
		case c.indices[p] != nil:
			idxSet[p] = c.indices[p]
		case c.dataStreams[p] != nil:
			dsSet[p] = c.dataStreams[p]
		default:
			if _, ok := c.aliasIndices(p); ok {
				aliasSet[p] = true
			} else if !o.ignoreUnavailable && !c.info.openSearch && c.info.major >= 8 {
				// Elasticsearch 7 and OpenSearch leave a missing
				// concrete name out (200, empty lists); 8+ answer 404.
				return reply{}, errIndexNotFound(p)
			}
		}
	}
	var idxNames, aliasNames, dsNames []string
	for n := range idxSet {
		idxNames = append(idxNames, n)
	}
	for n := range aliasSet {
		aliasNames = append(aliasNames, n)
	}
	for n := range dsSet {
		dsNames = append(dsNames, n)
	}
	sort.Strings(idxNames)
	sort.Strings(aliasNames)
	sort.Strings(dsNames)
	indices := []any{}
	for _, n := range idxNames {
		ix := idxSet[n]
		m := obj("name", n)
		if al := ix.aliasNames(); len(al) > 0 {
			m.set("aliases", al)
		}
		var attrs []string
		if ix.closed {
			attrs = append(attrs, "closed")
		} else {
			attrs = append(attrs, "open")
		}
		if ix.settings.hidden || ix.dataStream != "" {
			attrs = append(attrs, "hidden")
		}
		if ix.system {
			attrs = append(attrs, "system")
		}
		sort.Strings(attrs)
		m.set("attributes", attrs)
		if ix.dataStream != "" {
			m.set("data_stream", ix.dataStream)
		}
		if !c.info.openSearch && c.info.major >= 9 {
			mode := ix.settings.mode
			if mode == "" {
				mode = "standard"
			}
			m.set("mode", mode)
		}
		indices = append(indices, m)
	}
	aliases := []any{}
	for _, n := range aliasNames {
		list, _ := c.aliasIndices(n)
		names := make([]string, len(list))
		for i, ix := range list {
			names[i] = ix.name
		}
		aliases = append(aliases, obj("name", n, "indices", names))
	}
	streams := []any{}
	for _, n := range dsNames {
		ds := dsSet[n]
		names := make([]string, len(ds.indices))
		for i, ix := range ds.indices {
			names[i] = ix.name
		}
		streams = append(streams, obj("name", n, "backing_indices", names, "timestamp_field", "@timestamp"))
	}
	return reply{status: 200, body: obj("indices", indices, "aliases", aliases, "data_streams", streams)}, nil
}

// apiClusterState answers GET /_cluster/state/{metric}[/{index}] for the
// metadata metric only (any other metric is refused as not modeled). Each
// index carries what Elasticsearch's IndexMetadata.toXContent writes that a
// client may depend on: version counters, routing_num_shards (the only
// place it shows: GET _settings does not list the computed value), state,
// settings, mappings (under the type "_doc", as the cluster state keeps
// them), aliases and primary_terms; not in_sync_allocations, rollover_info
// or timestamp ranges. As the real API, it is lenient: a named index that
// does not exist is left out, not an error; and naming one backing index of
// a data stream answers with all of the stream's backing indices.
func apiClusterState(c *Cluster, r *request) (reply, *esError) {
	for _, m := range strings.Split(r.vars["metric"], ",") {
		if m != "metadata" {
			return reply{}, errNotModeled("cluster state metric [%s] (only [metadata])", m)
		}
	}
	flat, e := r.boolParam("flat_settings", false)
	if e != nil {
		return reply{}, e
	}
	var indices []*index
	if r.vars["index"] == "" {
		c.mu.RLock()
		for _, ix := range c.indices {
			indices = append(indices, ix)
		}
		c.mu.RUnlock()
		sort.Slice(indices, func(i, j int) bool { return indices[i].name < indices[j].name })
	} else {
		o := expandOpts{open: true, ignoreUnavailable: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true}
		var e *esError
		if indices, _, e = c.indicesForRequest(r, o, true); e != nil {
			return reply{}, e
		}
	}
	c.mu.RLock()
	if r.vars["index"] != "" {
		// As Elasticsearch's TransportClusterStateAction: a backing index
		// brings its data stream, and with it every other backing index
		// (the answer must be a valid cluster state).
		seen := map[string]bool{}
		var withStreams []*index
		for _, ix := range indices {
			group := []*index{ix}
			if ds := c.dataStreams[ix.dataStream]; ds != nil {
				group = ds.indices
			}
			for _, g := range group {
				if !seen[g.name] {
					seen[g.name] = true
					withStreams = append(withStreams, g)
				}
			}
		}
		indices = withStreams
		sort.Slice(indices, func(i, j int) bool { return indices[i].name < indices[j].name })
	}
	out := newOrderedMap()
	for _, ix := range indices {
		state := "open"
		if ix.closed {
			state = "close"
		}
		mappings := obj()
		if len(ix.mappings) > 0 {
			mappings = obj("_doc", ix.mappings)
		}
		terms := newOrderedMap()
		for _, s := range ix.shards {
			s.mu.RLock()
			terms.set(strconv.Itoa(s.num), s.term)
			s.mu.RUnlock()
		}
		aliases := []any{}
		for _, a := range ix.aliasNames() {
			aliases = append(aliases, a)
		}
		out.set(ix.name, obj("version", 1, "mapping_version", 1, "settings_version", 1, "aliases_version", 1,
			"routing_num_shards", ix.settings.routingShards, "state", state, "settings", c.settingsObject(ix, flat, nil),
			"mappings", mappings, "aliases", aliases, "primary_terms", terms, "system", ix.system))
	}
	c.mu.RUnlock()
	md := obj("cluster_uuid", c.uuid, "cluster_uuid_committed", true, "templates", obj(), "indices", out,
		"index-graveyard", obj("tombstones", []any{}))
	return reply{status: 200, body: obj("cluster_name", c.cfg.ClusterName, "cluster_uuid", c.uuid, "metadata", md)}, nil
}
