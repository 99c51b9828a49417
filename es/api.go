package es

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Info is what GET / says about the cluster.
type Info struct {
	Name         string
	ClusterName  string
	ClusterUUID  string
	Version      string
	Distribution string // "elasticsearch" or "opensearch"
	// BuildFlavor is Elasticsearch's version.build_flavor: "default", or
	// "oss" for the Apache-licensed builds up to 7.10.2 (no point in time).
	BuildFlavor string
	Tagline     string
	// CompatibilityMode marks OpenSearch 1.x/2.x with
	// compatibility.override_main_response_version: it reports version
	// 7.10.2 and no version.distribution, and only its tagline (or the
	// missing build_flavor) gives it away. Its real version is unknown.
	CompatibilityMode bool
}

// CountsFilterByFilter: the engine runs a filters aggregation with no
// parent and no sub-aggregation filter by filter, each filter counted from
// the index on its own (Elasticsearch 7.11 and later), so a request of
// range counts costs about the documents of its ranges. OpenSearch (2.x
// and 3.x, and compatibility mode) tests every document the query matched
// on every filter: the cost grows with documents × filters
// (docs/PERFORMANCE.md, measured on OpenSearch 2.19.6 and Elasticsearch
// 9.5.3).
func (i Info) CountsFilterByFilter() bool {
	return !i.CompatibilityMode && i.Distribution != "opensearch" && compareVersions(i.Version, "7.11.0") >= 0
}

// Minimum versions: the relay needs _resolve/index (ES 7.9, OpenSearch 1.0)
// and point in time or scroll with seq_no_primary_term and _seq_no ranges
// at shard level; ES 7.10 is the first with point in time.
const (
	MinElasticsearch = "7.10.0"
	MinOpenSearch    = "1.0.0"
)

// ErrUnsupportedVersion marks a cluster older than the relay supports.
var ErrUnsupportedVersion = errors.New("unsupported version")

// Product is "Elasticsearch" or "OpenSearch".
func (i Info) Product() string {
	if i.Distribution == "opensearch" {
		return "OpenSearch"
	}
	return "Elasticsearch"
}

// String is e.g. "Elasticsearch 8.19.2" or "OpenSearch (compatibility mode:
// reports 7.10.2)".
func (i Info) String() string {
	if i.CompatibilityMode {
		return fmt.Sprintf("OpenSearch (compatibility mode: reports version %s)", i.Version)
	}
	return i.Product() + " " + i.Version
}

// CheckSupported refuses Elasticsearch before 7.10 and OpenSearch before 1.0
// with an error naming the version found and the minimum.
func (i Info) CheckSupported() error {
	if i.CompatibilityMode {
		return nil // OpenSearch 1.x or 2.x: both supported
	}
	minimum := MinElasticsearch
	if i.Distribution == "opensearch" {
		minimum = MinOpenSearch
	}
	if compareVersions(i.Version, minimum) < 0 {
		return fmt.Errorf("%w: the cluster is %s %s, and es-changefeed needs %s %s or later (point in time, _resolve/index, _seq_no at shard level): upgrade the cluster",
			ErrUnsupportedVersion, i.Product(), i.Version, i.Product(), minimum)
	}
	return nil
}

// compareVersions compares the numeric major.minor.patch of two versions
// ("7.10.2", "8.0.0-rc1", "1.0.0-SNAPSHOT").
func compareVersions(a, b string) int {
	pa, pb := versionNumbers(a), versionNumbers(b)
	for k := range pa {
		if pa[k] != pb[k] {
			if pa[k] < pb[k] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func versionNumbers(v string) [3]int {
	var out [3]int
	for k, p := range strings.SplitN(v, ".", 3) {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		out[k], _ = strconv.Atoi(p[:end])
	}
	return out
}

// Info reads the root endpoint. It is the cheapest proof that the cluster is
// reachable and the credentials work; it fails with a connection error only
// when no node of the configured URLs answers.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var r struct {
		Name        string `json:"name"`
		ClusterName string `json:"cluster_name"`
		ClusterUUID string `json:"cluster_uuid"`
		Version     struct {
			Number       string `json:"number"`
			Distribution string `json:"distribution"`
			BuildFlavor  string `json:"build_flavor"`
		} `json:"version"`
		Tagline string `json:"tagline"`
	}
	if err := c.do(ctx, "read cluster info (GET /)", http.MethodGet, "/", nil, &r); err != nil {
		return Info{}, err
	}
	if r.Version.Number == "" {
		return Info{}, &Error{Op: "read cluster info (GET /)", Status: 200, Reason: "no version.number in the answer: is this Elasticsearch or OpenSearch?", Err: ErrMalformed}
	}
	info := Info{Name: r.Name, ClusterName: r.ClusterName, ClusterUUID: r.ClusterUUID, Version: r.Version.Number,
		Distribution: r.Version.Distribution, BuildFlavor: r.Version.BuildFlavor, Tagline: r.Tagline}
	switch {
	case info.Distribution != "":
		// OpenSearch ("opensearch"); Elasticsearch has no such field. An
		// OpenSearch version 7.x is the compatibility override (OpenSearch
		// 1.0's first take on it kept the distribution).
		info.CompatibilityMode = versionNumbers(info.Version)[0] == 7
	case strings.Contains(strings.ToLower(r.Tagline), "opensearch"),
		// Amazon OpenSearch Service in compatibility mode may hide the
		// tagline too; Elasticsearch 7.x always reports a build_flavor.
		r.Version.Number == "7.10.2" && r.Version.BuildFlavor == "" && r.Tagline != "You Know, for Search":
		info.Distribution = "opensearch"
		info.CompatibilityMode = true
	default:
		info.Distribution = "elasticsearch"
	}
	c.shared.mu.Lock()
	c.shared.info = info
	c.shared.mu.Unlock()
	return info, nil
}

// ShardCheckpoints is what the primary copy of one shard reports.
type ShardCheckpoints struct {
	Shard            int
	GlobalCheckpoint int64
	LocalCheckpoint  int64
	MaxSeqNo         int64
	// PrimaryTerm (from retention_leases) rises with every failover; 0 when
	// the cluster does not report it. Elasticsearch records it when the
	// retention leases next change, which may be a while after a promotion:
	// compare Node too.
	PrimaryTerm int64
	// Node is the id of the node holding the primary: a failover promotes a
	// copy on another node.
	Node string
	// HistoryUUID is the primary's commit.user_data.history_uuid: it stays
	// through failovers and recoveries and changes when a copy that lacks
	// acknowledged ops becomes primary anyway (allocate_stale_primary or
	// allocate_empty_primary with accept_data_loss, a snapshot restored
	// into the index): the shard's history was replaced and its seq nos
	// may be taken again. "" when the cluster does not report it.
	HistoryUUID string
}

// SamePrimary reports whether two stats readings of a shard saw the same
// primary: the same term, on the same node, with the same history. A
// failover shows as a new node at once, while Elasticsearch may report the
// new term only when the retention leases next change; a forced stale or
// empty primary shows as a new history. The relay's settle check and the
// delete scanner both judge by it.
func (s ShardCheckpoints) SamePrimary(o ShardCheckpoints) bool {
	return s.PrimaryTerm == o.PrimaryTerm && s.Node == o.Node && s.HistoryUUID == o.HistoryUUID
}

// IndexStats are the primaries' checkpoints of one index. Shards whose
// primary is not started are absent.
type IndexStats struct {
	Name   string
	UUID   string
	Shards []ShardCheckpoints // by shard number
}

// Stats reads GET /<indices>/_stats/get?level=shards and returns, per index,
// the checkpoints of each shard's primary copy (replicas may lag). A response
// with failed shards is an error.
func (c *Client) Stats(ctx context.Context, indices []string) (map[string]IndexStats, error) {
	return c.stats(ctx, "read shard stats of "+strings.Join(indices, ","), "/"+escapeIndices(indices)+"/_stats/get?level=shards")
}

// StatsMatching is Stats of every open index the expressions' elements
// match (and hidden ones with hidden), in one request whatever their
// number: the relay's idle rounds of all followed indices share it. It
// asks for more than the expressions name, never less: exclusions
// ("-name") are left out (joined, one expression's exclusion would remove
// another's indices), and names that exist nowhere or are closed are
// skipped (ignore_unavailable) instead of failing the request; callers
// pick the indices they need from the answer.
func (c *Client) StatsMatching(ctx context.Context, exprs []string, hidden bool) (map[string]IndexStats, error) {
	wild := "open"
	if hidden {
		wild = "open,hidden"
	}
	var elems []string
	seen := map[string]bool{}
	for _, expr := range exprs {
		for _, el := range strings.Split(expr, ",") {
			if el = strings.TrimSpace(el); el != "" && !strings.HasPrefix(el, "-") && !seen[el] {
				seen[el] = true
				elems = append(elems, el)
			}
		}
	}
	return c.stats(ctx, "read shard stats of "+strings.Join(elems, ","),
		"/"+escapeIndices(elems)+"/_stats/get?level=shards&ignore_unavailable=true&allow_no_indices=true&expand_wildcards="+url.QueryEscape(wild))
}

// statsFilter is the filter_path of the shard stats: what stats reads, not
// the rest of each copy's stats (a tenth of the body).
const statsFilter = "&filter_path=_shards,indices.*.uuid,indices.*.shards.*.routing.state,indices.*.shards.*.routing.primary," +
	"indices.*.shards.*.routing.node,indices.*.shards.*.seq_no,indices.*.shards.*.retention_leases.primary_term," +
	"indices.*.shards.*.commit.user_data.history_uuid"

func (c *Client) stats(ctx context.Context, op, path string) (map[string]IndexStats, error) {
	path += statsFilter
	var r struct {
		Shards  shardsHeader `json:"_shards"`
		Indices map[string]struct {
			UUID   string `json:"uuid"`
			Shards map[string][]struct {
				Routing struct {
					State   string `json:"state"`
					Primary bool   `json:"primary"`
					Node    string `json:"node"`
				} `json:"routing"`
				SeqNo *struct {
					MaxSeqNo         int64 `json:"max_seq_no"`
					LocalCheckpoint  int64 `json:"local_checkpoint"`
					GlobalCheckpoint int64 `json:"global_checkpoint"`
				} `json:"seq_no"`
				RetentionLeases struct {
					PrimaryTerm int64 `json:"primary_term"`
				} `json:"retention_leases"`
				Commit struct {
					UserData struct {
						HistoryUUID string `json:"history_uuid"`
					} `json:"user_data"`
				} `json:"commit"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := c.do(ctx, op, http.MethodGet, path, nil, &r); err != nil {
		return nil, err
	}
	if r.Shards.Failed > 0 {
		return nil, r.Shards.check(op)
	}
	out := make(map[string]IndexStats, len(r.Indices))
	for name, ix := range r.Indices {
		if ix.UUID == "" {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("index %s has no uuid in the stats", name), Err: ErrMalformed}
		}
		st := IndexStats{Name: name, UUID: ix.UUID}
		for num, copies := range ix.Shards {
			n, err := strconv.Atoi(num)
			if err != nil {
				return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("shard key %q of %s is not a number", num, name), Err: ErrMalformed}
			}
			for _, cp := range copies {
				if !cp.Routing.Primary || cp.Routing.State != "STARTED" {
					continue
				}
				if cp.SeqNo == nil {
					return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("shard %d of %s has no seq_no stats", n, name), Err: ErrMalformed}
				}
				st.Shards = append(st.Shards, ShardCheckpoints{Shard: n, GlobalCheckpoint: cp.SeqNo.GlobalCheckpoint,
					LocalCheckpoint: cp.SeqNo.LocalCheckpoint, MaxSeqNo: cp.SeqNo.MaxSeqNo, PrimaryTerm: cp.RetentionLeases.PrimaryTerm, Node: cp.Routing.Node,
					HistoryUUID: cp.Commit.UserData.HistoryUUID})
			}
		}
		sort.Slice(st.Shards, func(i, j int) bool { return st.Shards[i].Shard < st.Shards[j].Shard })
		out[name] = st
	}
	return out, nil
}

// Shard returns the checkpoints of shard n, if its primary reported.
func (s IndexStats) Shard(n int) (ShardCheckpoints, bool) {
	for _, sc := range s.Shards {
		if sc.Shard == n {
			return sc, true
		}
	}
	return ShardCheckpoints{}, false
}

// IndexSettings are the settings the relay needs.
type IndexSettings struct {
	UUID                    string
	Shards                  int
	SequenceNumbersDisabled bool
	// SeqNoDocValuesOnly: _seq_no has doc values but no points
	// (index.seq_no.index_options DOC_VALUES_ONLY, Elasticsearch 9's
	// default for logsdb and time_series indices): a range on it is a scan
	// of the shard's doc values, not a count on the points index.
	SeqNoDocValuesOnly bool
}

// Settings reads GET /<index>/_settings?flat_settings=true&include_defaults=true:
// a setting's default (such as index.disable_sequence_numbers on a
// columnar index of Elasticsearch 9.5) counts as much as an explicit value.
func (c *Client) Settings(ctx context.Context, index string) (IndexSettings, error) {
	op := "read settings of " + index
	var r map[string]struct {
		Settings map[string]any `json:"settings"`
		Defaults map[string]any `json:"defaults"`
	}
	if err := c.do(ctx, op, http.MethodGet, "/"+url.PathEscape(index)+"/_settings?flat_settings=true&include_defaults=true", nil, &r); err != nil {
		return IndexSettings{}, err
	}
	ix, ok := r[index]
	if !ok {
		return IndexSettings{}, &Error{Op: op, Status: 200, Reason: "the answer does not name the index", Err: ErrMalformed}
	}
	get := func(k string) string {
		if v, ok := ix.Settings[k]; ok {
			return fmt.Sprint(v)
		}
		if v, ok := ix.Defaults[k]; ok {
			return fmt.Sprint(v)
		}
		return ""
	}
	n, err := strconv.Atoi(get("index.number_of_shards"))
	if err != nil || n < 1 {
		return IndexSettings{}, &Error{Op: op, Status: 200, Reason: "no index.number_of_shards", Err: ErrMalformed}
	}
	return IndexSettings{UUID: get("index.uuid"), Shards: n, SequenceNumbersDisabled: get("index.disable_sequence_numbers") == "true",
		SeqNoDocValuesOnly: strings.EqualFold(get("index.seq_no.index_options"), "doc_values_only")}, nil
}

// Refresh makes every operation processed so far searchable on every copy.
// A refresh that failed on any copy is an error (unassigned copies are not
// failures: they serve no searches).
func (c *Client) Refresh(ctx context.Context, index string) error {
	op := "refresh " + index
	var r struct {
		Shards shardsHeader `json:"_shards"`
	}
	if err := c.do(ctx, op, http.MethodPost, "/"+url.PathEscape(index)+"/_refresh", nil, &r); err != nil {
		return err
	}
	if r.Shards.Failed > 0 {
		return r.Shards.check(op)
	}
	return nil
}

// maxPathBytes bounds the index list of a request's path: engines refuse
// a request line over http.max_initial_line_length (4 KB by default).
const maxPathBytes = 3000

// RefreshAll refreshes the indices with as few requests as fit the URL
// length (one for a few hundred names), each as Refresh: any failed copy
// is an error, as is any index that does not exist or is closed.
func (c *Client) RefreshAll(ctx context.Context, indices []string) error {
	for _, chunk := range chunkNames(indices, maxPathBytes) {
		op := "refresh " + strings.Join(chunk, ",")
		var r struct {
			Shards shardsHeader `json:"_shards"`
		}
		if err := c.do(ctx, op, http.MethodPost, "/"+escapeIndices(chunk)+"/_refresh", nil, &r); err != nil {
			return err
		}
		if r.Shards.Failed > 0 {
			return r.Shards.check(op)
		}
	}
	return nil
}

// chunkNames splits names into lists whose escaped, comma-joined length is
// at most limit bytes (a name longer than that alone).
func chunkNames(names []string, limit int) [][]string {
	var out [][]string
	var cur []string
	n := 0
	for _, name := range names {
		l := len(url.PathEscape(name)) + 1
		if len(cur) > 0 && n+l > limit {
			out = append(out, cur)
			cur, n = nil, 0
		}
		cur = append(cur, name)
		n += l
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Hit is one document of a shard page.
type Hit struct {
	ID          string
	Routing     string
	SeqNo       int64
	PrimaryTerm int64
	Version     int64
	Source      json.RawMessage
}

// ShardPage asks for one page of a shard's documents with After < _seq_no <= UpTo.
type ShardPage struct {
	Index string
	Shard int
	// After is exclusive (the checkpoint, or the last seq no of the previous
	// page); UpTo inclusive (the global checkpoint).
	After int64
	UpTo  int64
	Size  int
}

// Page is one page of a shard's hits and the response they were read
// from: the hits' sources are slices of it. ReadPage into the same Page
// reuses both for the next page, overwriting the previous hits.
type Page struct {
	Hits []Hit
	body []byte
}

// Clear empties the page's hits, keeping its memory for the next
// ReadPage; the response stays until then.
func (pg *Page) Clear() {
	clear(pg.Hits)
	pg.Hits = pg.Hits[:0]
}

// SearchShard returns the next page of a shard's documents in _seq_no
// order: range (After, UpTo], sorted by _seq_no, paged by search_after,
// with _seq_no, _primary_term and _version. Any response that reports a
// failed shard, a timeout, more than the one shard asked for, or a hit out of
// range or order is an error.
func (c *Client) SearchShard(ctx context.Context, p ShardPage) ([]Hit, error) {
	var pg Page
	if err := c.ReadPage(ctx, p, &pg); err != nil {
		return nil, err
	}
	return pg.Hits, nil
}

// ReadPage is SearchShard into pg, reusing its memory: a reader of many
// pages of a shard passes the same Page, once it is done with the
// previous page's hits. On error pg holds no hits.
func (c *Client) ReadPage(ctx context.Context, p ShardPage, pg *Page) error {
	pg.Clear()
	hits, err := c.readPage(ctx, p, pg)
	pg.Hits = hits
	if err != nil {
		// The error may quote the response: it must not be overwritten.
		pg.Hits, pg.body = nil, nil
	}
	return err
}

func (c *Client) readPage(ctx context.Context, p ShardPage, pg *Page) ([]Hit, error) {
	op := fmt.Sprintf("search shard %d of %s", p.Shard, p.Index)
	body := map[string]any{
		"query":               map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": p.After, "lte": p.UpTo}}},
		"sort":                []any{map[string]any{"_seq_no": "asc"}},
		"size":                p.Size,
		"seq_no_primary_term": true,
		"version":             true,
		"track_total_hits":    false,
	}
	if p.After >= 0 {
		body["search_after"] = []any{p.After}
	}
	path := "/" + url.PathEscape(p.Index) + "/_search?preference=_shards:" + strconv.Itoa(p.Shard)
	// A buffer of the page's own: the hits' sources are slices of it.
	data, status, err := c.read(ctx, op, http.MethodPost, path, body, pg.body[:0])
	pg.body = data
	if err != nil {
		return nil, err
	}
	pooled := rawHits.Get().(*[]rawHit)
	defer func() {
		clear(*pooled) // keep no page alive
		*pooled = (*pooled)[:0]
		rawHits.Put(pooled)
	}()
	r, err := parseSearch(data, *pooled)
	*pooled = r.Hits
	if err != nil {
		return nil, &Error{Op: op, Status: status, Err: fmt.Errorf("%w: %v", ErrMalformed, err), Reason: "undecodable body"}
	}
	if err := r.Shards.check(op); err != nil {
		return nil, err
	}
	if r.Shards.Total != 1 {
		return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("the search covered %d shards, want exactly shard %d", r.Shards.Total, p.Shard), Err: ErrMalformed}
	}
	if r.TimedOut {
		return nil, &Error{Op: op, Status: 200, Reason: "the search timed out (partial page)", Err: ErrPartial}
	}
	if len(r.Hits) > p.Size {
		return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("%d hits for size %d", len(r.Hits), p.Size), Err: ErrMalformed}
	}
	hits := pg.Hits[:0]
	if cap(hits) < len(r.Hits) {
		hits = make([]Hit, 0, len(r.Hits))
	}
	hits = hits[:len(r.Hits)]
	last := p.After
	for i, h := range r.Hits {
		bad := func(why string) error {
			return &Error{Op: op, Status: 200, Reason: fmt.Sprintf("hit %d (_id %q): %s", i, h.ID, why), Err: ErrMalformed}
		}
		switch {
		case !h.SeqNo.Set || !h.PrimaryTerm.Set:
			return nil, bad("no _seq_no/_primary_term")
		case !h.Version.Set:
			return nil, bad("no _version")
		case h.SeqNo.N <= last:
			return nil, bad(fmt.Sprintf("_seq_no %d is not above %d", h.SeqNo.N, last))
		case h.SeqNo.N > p.UpTo:
			return nil, bad(fmt.Sprintf("_seq_no %d is above the global checkpoint %d", h.SeqNo.N, p.UpTo))
		case h.Index != p.Index:
			return nil, bad(fmt.Sprintf("from index %q", h.Index))
		case len(h.Source) == 0 || string(h.Source) == "null":
			return nil, bad("no _source (is _source disabled in the mapping?)")
		case h.ID == "":
			return nil, bad("no _id")
		}
		last = h.SeqNo.N
		hits[i] = Hit{ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo.N, PrimaryTerm: h.PrimaryTerm.N, Version: h.Version.N, Source: h.Source}
	}
	return hits, nil
}

// rawHits are SearchShard's scratch slices of hits as parsed.
var rawHits = sync.Pool{New: func() any { return new([]rawHit) }}

func escapeIndices(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = url.PathEscape(n)
	}
	return strings.Join(out, ",")
}
