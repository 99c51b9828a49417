package esemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// indexTemplate is a composable index template (PUT /_index_template/<name>).
type indexTemplate struct {
	name       string
	patterns   []string
	priority   int64
	dataStream bool
	settings   map[string]any
	mappings   json.RawMessage
	aliases    map[string]any
	raw        map[string]any
}

// dataStream is a data stream and its backing indices, oldest first.
type dataStream struct {
	name       string
	indices    []*index
	generation int
	template   string
	hidden     bool
	created    time.Time
}

func (ds *dataStream) writeIndex() *index { return ds.indices[len(ds.indices)-1] }

// validateIndexName applies ES's index name rules.
func validateIndexName(name string) *esError {
	bad := func(why string) *esError {
		return newError(http.StatusBadRequest, "invalid_index_name_exception", "Invalid index name [%s], %s", name, why).
			with("index_uuid", "_na_").with("index", name)
	}
	switch {
	case name == "":
		return bad("must not be empty")
	case name != strings.ToLower(name):
		return bad("must be lowercase")
	case strings.ContainsAny(name, `\/*?"<>| ,#:`):
		return bad(`must not contain the following characters [ , ", *, \, <, |, ,, >, /, ?]`)
	case strings.HasPrefix(name, "_") || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "+"):
		return bad("must not start with '_', '-', or '+'")
	case name == "." || name == "..":
		return bad("must not be '.' or '..'")
	case len(name) > 255:
		return bad("index name is too long, (" + strconv.Itoa(len(name)) + " > 255)")
	}
	return nil
}

// createIndexLocked creates a concrete index. c.mu must be held for writing.
func (c *Cluster) createIndexLocked(name string, settingsRaw map[string]any, mappings json.RawMessage, aliases map[string]any, dsName string) (*index, *esError) {
	if err := validateIndexName(name); err != nil {
		return nil, err
	}
	if ix, ok := c.indices[name]; ok {
		return nil, newError(http.StatusBadRequest, "resource_already_exists_exception", "index [%s/%s] already exists", name, ix.uuid).
			with("index_uuid", ix.uuid).with("index", name)
	}
	if _, ok := c.aliasIndices(name); ok {
		return nil, errInvalidIndexName(name, "an alias with the same name already exists")
	}
	if _, ok := c.dataStreams[name]; ok && dsName == "" {
		return nil, errInvalidIndexName(name, "already exists as data stream")
	}
	// Templates supply defaults; the request overrides them.
	merged := map[string]any{}
	tmplAliases := map[string]any{}
	if t := c.matchTemplate(name, false); t != nil && dsName == "" {
		for k, v := range t.settings {
			merged[k] = v
		}
		for k, v := range t.aliases {
			tmplAliases[k] = v
		}
		if mappings == nil {
			mappings = t.mappings
		}
	}
	if dsName != "" {
		if t := c.templates[c.dataStreams[dsName].template]; t != nil {
			for k, v := range t.settings {
				merged[k] = v
			}
			if mappings == nil {
				mappings = t.mappings
			}
		}
		merged["index.hidden"] = true
	}
	flatReq := map[string]string{}
	flattenSettings("", settingsRaw, flatReq)
	flatMerged := map[string]any{}
	tmp := map[string]string{}
	flattenSettings("", merged, tmp)
	for k, v := range tmp {
		flatMerged[normalizeSettingKey(k)] = v
	}
	for k, v := range flatReq {
		flatMerged[normalizeSettingKey(k)] = v
	}
	settings, err := parseSettings(c.cfg.Flavor, flatMerged)
	if err != nil {
		return nil, err
	}
	ix := &index{
		name: name, uuid: newUUID(), created: time.Now(), settings: settings,
		mappings: mappings, aliases: map[string]*aliasMeta{}, dataStream: dsName, stop: make(chan struct{}),
	}
	ix.system = strings.HasPrefix(name, ".") && dsName == ""
	for k, v := range tmplAliases {
		if e := c.attachAlias(ix, k, v); e != nil {
			return nil, e
		}
	}
	for k, v := range aliases {
		if e := c.attachAlias(ix, k, v); e != nil {
			return nil, e
		}
	}
	for i := 0; i < settings.shards; i++ {
		ix.shards = append(ix.shards, newShard(ix, i, c.allocate(i, settings.replicas)))
	}
	c.indices[name] = ix
	return ix, nil
}

func errInvalidIndexName(name, why string) *esError {
	return newError(http.StatusBadRequest, "invalid_index_name_exception", "Invalid index name [%s], %s", name, why).
		with("index_uuid", "_na_").with("index", name)
}

// attachAlias adds alias name to ix from an alias body ({"is_write_index":…}).
func (c *Cluster) attachAlias(ix *index, name string, body any) *esError {
	if _, ok := c.indices[name]; ok {
		return errInvalidAlias(name, "an index or data stream exists with the same name as the alias")
	}
	if _, ok := c.dataStreams[name]; ok {
		return errInvalidAlias(name, "an index or data stream exists with the same name as the alias")
	}
	am := &aliasMeta{}
	if m, ok := body.(map[string]any); ok {
		for k, v := range m {
			switch k {
			case "is_write_index":
				b, ok := v.(bool)
				if !ok {
					return errIllegalArgument("[is_write_index] must be a boolean")
				}
				am.isWriteIndex = &b
			case "is_hidden":
				am.isHidden = v == true
			case "routing":
				am.routing = fmt.Sprint(v)
			case "index_routing", "search_routing", "filter":
				return errNotModeled("alias option [%s]", k)
			default:
				return errParsing("Unknown field [%s]", k)
			}
		}
	}
	if am.isWriteIndex != nil && *am.isWriteIndex {
		for _, other := range c.indices {
			if other == ix {
				continue
			}
			if a, ok := other.aliases[name]; ok && a.isWriteIndex != nil && *a.isWriteIndex {
				return errIllegalState("alias [%s] has more than one write index [%s,%s]", name, other.name, ix.name)
			}
		}
	}
	ix.aliases[name] = am
	return nil
}

func errInvalidAlias(name, why string) *esError {
	return newError(http.StatusBadRequest, "invalid_alias_name_exception", "Invalid alias name [%s]: %s", name, why)
}

func errIllegalState(format string, args ...any) *esError {
	return newError(http.StatusInternalServerError, "illegal_state_exception", format, args...)
}

// aliasIndices lists the indices an alias points to (sorted by name).
func (c *Cluster) aliasIndices(alias string) ([]*index, bool) {
	var out []*index
	for _, ix := range c.indices {
		if _, ok := ix.aliases[alias]; ok {
			out = append(out, ix)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, len(out) > 0
}

// aliasWriteIndex is the index writes to an alias go to.
func (c *Cluster) aliasWriteIndex(alias string) (*index, *esError) {
	list, _ := c.aliasIndices(alias)
	var explicit *index
	for _, ix := range list {
		if w := ix.aliases[alias].isWriteIndex; w != nil && *w {
			explicit = ix
		}
	}
	if explicit != nil {
		return explicit, nil
	}
	if len(list) == 1 {
		if w := list[0].aliases[alias].isWriteIndex; w == nil || *w {
			return list[0], nil
		}
	}
	return nil, errIllegalArgument("no write index is defined for alias [%s]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index", alias)
}

// matchTemplate returns the highest-priority template whose patterns match
// name (dataStreamOnly: only templates with data_stream).
func (c *Cluster) matchTemplate(name string, dataStreamOnly bool) *indexTemplate {
	var best *indexTemplate
	for _, t := range c.templates {
		if dataStreamOnly && !t.dataStream {
			continue
		}
		for _, p := range t.patterns {
			if globMatch(p, name) {
				if best == nil || t.priority > best.priority {
					best = t
				}
				break
			}
		}
	}
	return best
}

// backingIndexName names generation gen of a data stream per flavor.
func (c *Cluster) backingIndexName(ds string, gen int, at time.Time) string {
	if c.info.openSearch {
		return fmt.Sprintf(".ds-%s-%06d", ds, gen)
	}
	return fmt.Sprintf(".ds-%s-%s-%06d", ds, at.UTC().Format("2006.01.02"), gen)
}

// createDataStreamLocked creates a data stream and its first backing index.
// c.mu must be held for writing.
func (c *Cluster) createDataStreamLocked(name string) (*dataStream, *esError) {
	if _, ok := c.dataStreams[name]; ok {
		return nil, newError(http.StatusBadRequest, "resource_already_exists_exception", "data_stream [%s] already exists", name)
	}
	if err := validateIndexName(name); err != nil {
		return nil, err
	}
	if _, ok := c.indices[name]; ok {
		return nil, errIllegalArgument("data stream [%s] conflicts with index", name)
	}
	t := c.matchTemplate(name, true)
	if t == nil {
		return nil, errIllegalArgument("no matching index template found for data stream [%s]", name)
	}
	ds := &dataStream{name: name, generation: 1, template: t.name, created: time.Now()}
	c.dataStreams[name] = ds
	ix, err := c.createIndexLocked(c.backingIndexName(name, 1, time.Now()), nil, nil, nil, name)
	if err != nil {
		delete(c.dataStreams, name)
		return nil, err
	}
	ds.indices = []*index{ix}
	return ds, nil
}

// deleteIndexLocked removes an index and its search state.
func (c *Cluster) deleteIndexLocked(ix *index) {
	delete(c.indices, ix.name)
	delete(c.nextRefresh, ix)
	close(ix.stop)
}

// expandOpts are the index options of a multi-target request.
type expandOpts struct {
	open, closed, hidden bool
	ignoreUnavailable    bool
	allowNoIndices       bool
	allowAliases         bool
	allowDataStreams     bool
}

func defaultExpand() expandOpts {
	return expandOpts{open: true, allowNoIndices: true, allowAliases: true, allowDataStreams: true}
}

// parseExpandWildcards reads expand_wildcards ("open,hidden", "all", "none").
func (o *expandOpts) parseExpandWildcards(v string) *esError {
	o.open, o.closed, o.hidden = false, false, false
	for _, w := range strings.Split(v, ",") {
		switch strings.TrimSpace(w) {
		case "open":
			o.open = true
		case "closed":
			o.closed = true
		case "hidden":
			o.hidden = true
		case "all":
			o.open, o.closed, o.hidden = true, true, true
		case "none":
		default:
			return errIllegalArgument("No enum constant org.elasticsearch.action.support.IndicesOptions.WildcardStates.%s", strings.ToUpper(w))
		}
	}
	return nil
}

// resolved is the outcome of resolving an index expression.
type resolved struct {
	indices []*index          // concrete indices, sorted by name, deduplicated
	matched map[*index]string // which expression element matched each index
}

func isWildcard(s string) bool { return strings.Contains(s, "*") }

// resolveLocked expands a comma-separated expression into concrete indices.
// c.mu must be held (read is enough).
func (c *Cluster) resolveLocked(expr string, o expandOpts) (resolved, *esError) {
	out := resolved{matched: map[*index]string{}}
	set := map[*index]bool{}
	add := func(ix *index, by string) {
		if !set[ix] {
			set[ix] = true
			out.matched[ix] = by
		}
	}
	parts := splitExpr(expr)
	if len(parts) == 0 || (len(parts) == 1 && (parts[0] == "_all" || parts[0] == "*")) {
		parts = []string{"*"}
	}
	sawWildcard := false
	for i, p := range parts {
		if strings.HasPrefix(p, "-") && i > 0 && sawWildcard {
			pat := p[1:]
			for ix := range set {
				if globMatch(pat, ix.name) {
					delete(set, ix)
					delete(out.matched, ix)
				}
			}
			for name, ds := range c.dataStreams {
				if globMatch(pat, name) {
					for _, ix := range ds.indices {
						delete(set, ix)
						delete(out.matched, ix)
					}
				}
			}
			continue
		}
		if p == "_all" {
			p = "*"
		}
		if isWildcard(p) {
			sawWildcard = true
			for _, ix := range c.indices {
				if globMatch(p, ix.name) && c.wildcardVisible(ix, p, o) {
					add(ix, p)
				}
			}
			if o.allowAliases {
				for _, name := range c.allAliasNames() {
					if !globMatch(p, name) {
						continue
					}
					list, _ := c.aliasIndices(name)
					for _, ix := range list {
						if ix.aliases[name].isHidden && !o.hidden && !strings.HasPrefix(p, ".") {
							continue
						}
						if c.stateVisible(ix, o) {
							add(ix, p)
						}
					}
				}
			}
			if o.allowDataStreams {
				for name, ds := range c.dataStreams {
					if globMatch(p, name) && (!ds.hidden || o.hidden) {
						for _, ix := range ds.indices {
							if c.stateVisible(ix, o) {
								add(ix, p)
							}
						}
					}
				}
			}
			continue
		}
		if ix, ok := c.indices[p]; ok {
			if ix.closed && !o.ignoreUnavailable && !o.closed {
				// Named closed indices are an error for most APIs; callers
				// that accept them check ix.closed themselves.
			}
			add(ix, p)
			continue
		}
		if list, ok := c.aliasIndices(p); ok && o.allowAliases {
			for _, ix := range list {
				add(ix, p)
			}
			continue
		}
		if ds, ok := c.dataStreams[p]; ok && o.allowDataStreams {
			for _, ix := range ds.indices {
				add(ix, p)
			}
			continue
		}
		if !o.ignoreUnavailable {
			return out, errIndexNotFound(p)
		}
	}
	for ix := range set {
		out.indices = append(out.indices, ix)
	}
	sort.Slice(out.indices, func(i, j int) bool { return out.indices[i].name < out.indices[j].name })
	if len(out.indices) == 0 && !o.allowNoIndices {
		return out, errIndexNotFound(expr)
	}
	return out, nil
}

func splitExpr(expr string) []string {
	var out []string
	for _, p := range strings.Split(expr, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// wildcardVisible applies expand_wildcards to an index matched by pattern p:
// hidden indices only with hidden (or a pattern starting with '.'), open or
// closed by state.
func (c *Cluster) wildcardVisible(ix *index, p string, o expandOpts) bool {
	hidden := ix.settings.hidden || ix.dataStream != ""
	if hidden && !o.hidden && !(strings.HasPrefix(p, ".") && ix.dataStream == "") {
		return false
	}
	if strings.HasPrefix(ix.name, ".") && !strings.HasPrefix(p, ".") && !o.hidden {
		return false
	}
	return c.stateVisible(ix, o)
}

func (c *Cluster) stateVisible(ix *index, o expandOpts) bool {
	if ix.closed {
		return o.closed
	}
	return o.open
}

func (c *Cluster) allAliasNames() []string {
	seen := map[string]bool{}
	for _, ix := range c.indices {
		for a := range ix.aliases {
			seen[a] = true
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// writeTarget resolves the index a document write to name goes to, creating
// the index or data stream when missing (auto-create). c.mu must be held for
// writing. requireCreate reports whether the target is a data stream (which
// only accepts op_type create).
func (c *Cluster) writeTargetLocked(name string) (ix *index, isDataStream bool, err *esError) {
	if ix, ok := c.indices[name]; ok {
		if ix.closed {
			return nil, false, errIndexClosed(ix.name, ix.uuid)
		}
		return ix, false, nil
	}
	if ds, ok := c.dataStreams[name]; ok {
		return ds.writeIndex(), true, nil
	}
	if _, ok := c.aliasIndices(name); ok {
		ix, e := c.aliasWriteIndex(name)
		if e != nil {
			return nil, false, e
		}
		if ix.closed {
			return nil, false, errIndexClosed(ix.name, ix.uuid)
		}
		return ix, ix.dataStream != "", nil
	}
	if t := c.matchTemplate(name, true); t != nil && t.dataStream {
		ds, e := c.createDataStreamLocked(name)
		if e != nil {
			return nil, false, e
		}
		return ds.writeIndex(), true, nil
	}
	ix, e := c.createIndexLocked(name, nil, nil, nil, "")
	if e != nil {
		return nil, false, e
	}
	return ix, false, nil
}
