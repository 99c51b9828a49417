package es

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// IndexLayout is what decides where an index puts a document (its shards,
// routing shards, routing partition size, routing path, and the engine and
// version that created it, which choose the routing function), with the
// mappings a copy of the index needs.
type IndexLayout struct {
	// Index is the concrete index the answer is about (the name asked
	// for, or the one index behind an alias).
	Index string
	// Shards is index.number_of_shards.
	Shards int
	// RoutingShards is routing_num_shards of the index's metadata: the
	// setting index.number_of_routing_shards when it was given, else what
	// the engine computed at creation (inherited by a split or shrink).
	// GET _settings does not show the computed value.
	RoutingShards int
	// RoutingPartitionSize is index.routing_partition_size, 1 when unset.
	RoutingPartitionSize int
	// RoutingPath is index.routing_path (time series and logsdb indices
	// place documents by these source fields).
	RoutingPath []string
	// Engine is the cluster's distribution, "elasticsearch" or
	// "opensearch" (Info.Distribution); EngineVersion its version.
	Engine, EngineVersion string
	// VersionCreated is index.version.created: the engine's id of the
	// version that created the index (Elasticsearch 8.11+ counts index
	// versions, 9_064_0_00 = 9064000; OpenSearch ids carry 0x08000000).
	VersionCreated int64
	// Mappings is the index's mappings as GET /<index>/_mapping gives them.
	Mappings json.RawMessage
}

// IndexLayout reads an index's layout: its metadata from the cluster state
// (GET /_cluster/state/metadata/<index>: routing_num_shards is only there),
// its mappings (GET /<index>/_mapping) and the cluster's engine (GET /,
// once per client). An index that does not exist is an error wrapping
// ErrNotFound; an alias with one index gives that index's layout.
//
// Privileges: cluster monitor (cluster:monitor/state) and, on the index,
// view_index_metadata (indices:admin/mappings/get).
func (c *Client) IndexLayout(ctx context.Context, index string) (IndexLayout, error) {
	op := "read the layout of " + index
	var st struct {
		Metadata struct {
			Indices map[string]struct {
				RoutingNumShards int            `json:"routing_num_shards"`
				State            string         `json:"state"`
				Settings         map[string]any `json:"settings"`
			} `json:"indices"`
		} `json:"metadata"`
	}
	path := "/_cluster/state/metadata/" + url.PathEscape(index) +
		"?flat_settings=true&filter_path=metadata.indices.*.routing_num_shards,metadata.indices.*.state,metadata.indices.*.settings"
	if err := c.do(ctx, op, http.MethodGet, path, nil, &st); err != nil {
		return IndexLayout{}, err
	}
	// The cluster state API is lenient: a missing index is no error, just
	// absent; an alias answers with its indices.
	var names []string
	for n := range st.Metadata.Indices {
		names = append(names, n)
	}
	sort.Strings(names)
	if _, ok := st.Metadata.Indices[index]; ok {
		// A backing index of a data stream answers with all the stream's
		// backing indices (the cluster state must stay whole): keep ours.
		names = []string{index}
	}
	switch {
	case len(names) == 0:
		return IndexLayout{}, &Error{Op: op, Status: http.StatusNotFound, Type: "index_not_found_exception", Reason: "no such index [" + index + "]", Err: ErrNotFound}
	case len(names) > 1:
		return IndexLayout{}, &Error{Op: op, Status: http.StatusOK, Reason: fmt.Sprintf("%s names %d indices (%s): name one index", index, len(names), strings.Join(names, ", ")), Err: ErrMalformed}
	}
	ix := st.Metadata.Indices[names[0]]
	l := IndexLayout{Index: names[0], RoutingShards: ix.RoutingNumShards, RoutingPartitionSize: 1}
	get := func(k string) string {
		if v, ok := ix.Settings[k]; ok {
			return fmt.Sprint(v)
		}
		return ""
	}
	var err error
	if l.Shards, err = strconv.Atoi(get("index.number_of_shards")); err != nil || l.Shards < 1 {
		return IndexLayout{}, &Error{Op: op, Status: http.StatusOK, Reason: "no index.number_of_shards in the cluster state of " + names[0], Err: ErrMalformed}
	}
	if l.RoutingShards < l.Shards {
		return IndexLayout{}, &Error{Op: op, Status: http.StatusOK, Reason: fmt.Sprintf("routing_num_shards %d of %s is below its %d shards", l.RoutingShards, names[0], l.Shards), Err: ErrMalformed}
	}
	if v := get("index.routing_partition_size"); v != "" {
		if l.RoutingPartitionSize, err = strconv.Atoi(v); err != nil || l.RoutingPartitionSize < 1 {
			return IndexLayout{}, &Error{Op: op, Status: http.StatusOK, Reason: fmt.Sprintf("index.routing_partition_size %q of %s", v, names[0]), Err: ErrMalformed}
		}
	}
	if l.VersionCreated, err = strconv.ParseInt(get("index.version.created"), 10, 64); err != nil {
		return IndexLayout{}, &Error{Op: op, Status: http.StatusOK, Reason: "no index.version.created in the cluster state of " + names[0], Err: ErrMalformed}
	}
	switch v := ix.Settings["index.routing_path"].(type) {
	case []any:
		for _, p := range v {
			l.RoutingPath = append(l.RoutingPath, fmt.Sprint(p))
		}
	case string:
		if v != "" {
			l.RoutingPath = strings.Split(v, ",")
		}
	}
	var mp map[string]struct {
		Mappings json.RawMessage `json:"mappings"`
	}
	if err := c.do(ctx, "read the mappings of "+names[0], http.MethodGet, "/"+url.PathEscape(names[0])+"/_mapping", nil, &mp); err != nil {
		return IndexLayout{}, err
	}
	m, ok := mp[names[0]]
	if !ok {
		return IndexLayout{}, &Error{Op: "read the mappings of " + names[0], Status: http.StatusOK, Reason: "the answer does not name the index", Err: ErrMalformed}
	}
	l.Mappings = m.Mappings
	info, err := c.knownInfo(ctx)
	if err != nil {
		return IndexLayout{}, err
	}
	l.Engine, l.EngineVersion = info.Distribution, info.Version
	return l, nil
}

// knownInfo is the Info of the last Info call, or a new one.
func (c *Client) knownInfo(ctx context.Context) (Info, error) {
	c.shared.mu.Lock()
	info := c.shared.info
	c.shared.mu.Unlock()
	if info.Distribution != "" {
		return info, nil
	}
	return c.Info(ctx)
}

// CreateIndex creates an index (PUT /<index>) with the given body
// (settings, mappings). An index that exists already is an error whose
// Type is "resource_already_exists_exception".
func (c *Client) CreateIndex(ctx context.Context, index string, body any) error {
	return c.do(ctx, "create index "+index, http.MethodPut, "/"+url.PathEscape(index), body, nil)
}
