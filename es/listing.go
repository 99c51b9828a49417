package es

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Listing methods for live ids.
const (
	ListingAuto   = ""       // PIT where the cluster has it (ES 7.10+, OpenSearch 2.4+), else scroll
	ListingPIT    = "pit"    // point in time, search_after on _seq_no
	ListingScroll = "scroll" // scroll, sorted by _seq_no
)

// DocRef is a live document as a listing returns it.
type DocRef struct {
	ID      string
	Routing string
	SeqNo   int64
}

// Count returns how many documents of one shard have after < _seq_no <=
// upTo (upTo < 0: all documents). A partial answer is an error.
func (c *Client) Count(ctx context.Context, index string, shard int, node string, after, upTo int64) (int64, error) {
	op := fmt.Sprintf("count shard %d of %s", shard, index)
	body := map[string]any{"query": map[string]any{"match_all": map[string]any{}}}
	if upTo >= 0 {
		body = map[string]any{"query": map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": after, "lte": upTo}}}}
	}
	var r struct {
		Count  *int64       `json:"count"`
		Shards shardsHeader `json:"_shards"`
	}
	path := "/" + url.PathEscape(index) + "/_count?preference=" + shardPreference(shard, node)
	if err := c.do(ctx, op, http.MethodPost, path, body, &r); err != nil {
		return 0, err
	}
	if err := r.Shards.check(op); err != nil {
		return 0, err
	}
	if r.Shards.Total != 1 || r.Count == nil {
		return 0, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("count over %d shards, want shard %d alone", r.Shards.Total, shard), Err: ErrMalformed}
	}
	return *r.Count, nil
}

// shardPreference pins a request to shard n and, when node (a node id, as
// stats report the primary's) is known, to the copy on that node, so that
// every request of a scan reads the same copy. Elasticsearch and OpenSearch
// take only a preference type after "_shards:N|" (a custom string there is
// a 400 "no Preference for [...]"), so the copy is chosen by _prefer_nodes;
// should that node hold no copy any more, another copy answers.
func shardPreference(n int, node string) string {
	p := "_shards:" + strconv.Itoa(n)
	if node != "" {
		p += "|_prefer_nodes:" + node
	}
	return url.QueryEscape(p)
}

// listPage is one page of a listing search.
type listPage struct {
	TimedOut bool         `json:"timed_out"`
	Shards   shardsHeader `json:"_shards"`
	ScrollID string       `json:"_scroll_id"`
	PITID    string       `json:"pit_id"`
	Hits     struct {
		Total *struct {
			Value    int64  `json:"value"`
			Relation string `json:"relation"`
		} `json:"total"`
		Hits []struct {
			ID          string          `json:"_id"`
			Routing     string          `json:"_routing"`
			SeqNo       *int64          `json:"_seq_no"`
			PrimaryTerm *int64          `json:"_primary_term"`
			Version     *int64          `json:"_version"`
			Source      json.RawMessage `json:"_source"`
		} `json:"hits"`
	} `json:"hits"`
}

// refs checks a page and returns its documents in order. A page with a
// failed shard, a timeout, or hits out of _seq_no order (or, withSource,
// without _source, _version or _primary_term) is an error.
func (p *listPage) refs(op string, after int64, withSource bool) ([]Hit, error) {
	if err := p.Shards.check(op); err != nil {
		return nil, err
	}
	if p.TimedOut {
		return nil, &Error{Op: op, Status: 200, Reason: "the listing page timed out", Err: ErrPartial}
	}
	out := make([]Hit, len(p.Hits.Hits))
	for i, h := range p.Hits.Hits {
		if h.SeqNo == nil || *h.SeqNo <= after {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("listing hit %q is out of _seq_no order", h.ID), Err: ErrMalformed}
		}
		after = *h.SeqNo
		out[i] = Hit{ID: h.ID, Routing: h.Routing, SeqNo: *h.SeqNo}
		if withSource {
			if h.PrimaryTerm == nil || h.Version == nil || len(h.Source) == 0 {
				return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("snapshot hit %q lacks _primary_term, _version or _source", h.ID), Err: ErrMalformed}
			}
			out[i].PrimaryTerm, out[i].Version, out[i].Source = *h.PrimaryTerm, *h.Version, h.Source
		}
	}
	return out, nil
}

// ListShard lists every live document of one shard from one frozen view (a
// point in time or a scroll opened with preference=_shards:N), page by page,
// calling fn for each page. The view's own hit total is the reference: a
// listing that does not produce exactly that many documents, or any page
// with a failed shard or a timeout, is an error, and fn's work must then be
// thrown away. It returns the number of documents listed.
func (c *Client) ListShard(ctx context.Context, index string, shard int, node string, pageSize int, method string, fn func([]DocRef) error) (int64, error) {
	return c.list(ctx, index, shard, node, pageSize, method, false, func(hits []Hit) error {
		refs := make([]DocRef, len(hits))
		for i, h := range hits {
			refs[i] = DocRef{ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo}
		}
		return fn(refs)
	})
}

// SnapshotShard is ListShard with each document's _source, _version and
// _primary_term: every live document of the shard as one frozen view holds
// it (a resync's snapshot).
func (c *Client) SnapshotShard(ctx context.Context, index string, shard int, node string, pageSize int, method string, fn func([]Hit) error) (int64, error) {
	return c.list(ctx, index, shard, node, pageSize, method, true, fn)
}

func (c *Client) list(ctx context.Context, index string, shard int, node string, pageSize int, method string, withSource bool, fn func([]Hit) error) (int64, error) {
	if method == ListingAuto {
		method = c.listingMethod()
	}
	switch method {
	case ListingPIT:
		return c.listPIT(ctx, index, shard, node, pageSize, withSource, fn)
	case ListingScroll:
		return c.listScroll(ctx, index, shard, node, pageSize, withSource, fn)
	}
	return 0, fmt.Errorf("listing method %q: want pit or scroll", method)
}

// listingMethod picks PIT when the cluster (as seen by Info) has it.
func (c *Client) listingMethod() string {
	c.shared.mu.Lock()
	info := c.shared.info
	c.shared.mu.Unlock()
	major, minor := versionParts(info.Version)
	switch {
	case info.CompatibilityMode || info.BuildFlavor == "oss":
		// OpenSearch hiding its version (1.x has no PIT), or an
		// Elasticsearch OSS build (PIT is in X-Pack): scroll always works.
		return ListingScroll
	case info.Distribution == "opensearch" && (major > 2 || (major == 2 && minor >= 4)):
		return ListingPIT
	case info.Distribution != "opensearch" && (major > 7 || (major == 7 && minor >= 10)):
		return ListingPIT
	}
	return ListingScroll
}

func versionParts(v string) (int, int) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	a, _ := strconv.Atoi(parts[0])
	b, _ := strconv.Atoi(parts[1])
	return a, b
}

func (c *Client) openSearchPaths() bool {
	c.shared.mu.Lock()
	defer c.shared.mu.Unlock()
	return c.shared.info.Distribution == "opensearch"
}

const listKeepAlive = "2m"

func listBody(pageSize int, withSource bool) map[string]any {
	return map[string]any{
		"size":                pageSize,
		"_source":             withSource,
		"version":             withSource,
		"sort":                []any{map[string]any{"_seq_no": "asc"}},
		"seq_no_primary_term": true,
		"track_total_hits":    true,
	}
}

func (c *Client) listPIT(ctx context.Context, index string, shard int, node string, pageSize int, withSource bool, fn func([]Hit) error) (n int64, err error) {
	op := fmt.Sprintf("list shard %d of %s (point in time)", shard, index)
	var openPath string
	var open struct {
		ID     string       `json:"id"`
		PITID  string       `json:"pit_id"`
		Shards shardsHeader `json:"_shards"`
	}
	osPaths := c.openSearchPaths()
	if osPaths {
		openPath = "/" + url.PathEscape(index) + "/_search/point_in_time?keep_alive=" + listKeepAlive + "&preference=" + shardPreference(shard, node)
	} else {
		openPath = "/" + url.PathEscape(index) + "/_pit?keep_alive=" + listKeepAlive + "&preference=" + shardPreference(shard, node)
	}
	if err := c.do(ctx, op, http.MethodPost, openPath, nil, &open); err != nil {
		return 0, err
	}
	pit := open.ID
	if osPaths {
		pit = open.PITID
	}
	if pit == "" {
		return 0, &Error{Op: op, Status: 200, Reason: "no point in time id in the answer", Err: ErrMalformed}
	}
	if open.Shards.Total > 1 {
		c.closePIT(pit, osPaths)
		return 0, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("the point in time covers %d shards, want shard %d alone", open.Shards.Total, shard), Err: ErrMalformed}
	}
	defer func() { c.closePIT(pit, osPaths) }()
	after := int64(-1)
	var total int64 = -1
	for {
		body := listBody(pageSize, withSource)
		body["pit"] = map[string]any{"id": pit, "keep_alive": listKeepAlive}
		if after >= 0 {
			body["search_after"] = []any{after}
			// The frozen view's total is known from the first page.
			body["track_total_hits"] = false
		}
		// ES adds the _shard_doc tiebreaker to a sorted PIT search only when
		// search_after is absent or one value longer than the sort; one
		// _seq_no value (unique in the shard) needs none.
		var page listPage
		if err := c.do(ctx, op, http.MethodPost, "/_search", body, &page); err != nil {
			return n, err
		}
		if page.PITID != "" {
			pit = page.PITID
		}
		if total < 0 {
			if page.Hits.Total == nil || page.Hits.Total.Relation != "eq" {
				return n, &Error{Op: op, Status: 200, Reason: "the first page has no exact hits.total", Err: ErrMalformed}
			}
			total = page.Hits.Total.Value
		}
		refs, err := page.refs(op, after, withSource)
		if err != nil {
			return n, err
		}
		if len(refs) > 0 {
			if err := fn(refs); err != nil {
				return n, err
			}
			n += int64(len(refs))
			after = refs[len(refs)-1].SeqNo
		}
		if len(refs) < pageSize {
			break
		}
	}
	if n != total {
		return n, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("listed %d documents but the view holds %d", n, total), Err: ErrPartial}
	}
	return n, nil
}

// closePIT frees a point in time, best effort (it expires anyway).
func (c *Client) closePIT(id string, osPaths bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if osPaths {
		_ = c.do(ctx, "close point in time", http.MethodDelete, "/_search/point_in_time", map[string]any{"pit_id": []string{id}}, nil)
		return
	}
	_ = c.do(ctx, "close point in time", http.MethodDelete, "/_pit", map[string]any{"id": id}, nil)
}

func (c *Client) listScroll(ctx context.Context, index string, shard int, node string, pageSize int, withSource bool, fn func([]Hit) error) (n int64, err error) {
	op := fmt.Sprintf("list shard %d of %s (scroll)", shard, index)
	var page listPage
	path := "/" + url.PathEscape(index) + "/_search?scroll=" + listKeepAlive + "&preference=" + shardPreference(shard, node)
	if err := c.do(ctx, op, http.MethodPost, path, listBody(pageSize, withSource), &page); err != nil {
		return 0, err
	}
	scrollID := page.ScrollID
	defer func() {
		if scrollID != "" {
			cctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			_ = c.do(cctx, "clear scroll", http.MethodDelete, "/_search/scroll", map[string]any{"scroll_id": []string{scrollID}}, nil)
			cancel()
		}
	}()
	if page.Shards.Total != 1 {
		return 0, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("the scroll covers %d shards, want shard %d alone", page.Shards.Total, shard), Err: ErrMalformed}
	}
	if page.Hits.Total == nil || page.Hits.Total.Relation != "eq" {
		return 0, &Error{Op: op, Status: 200, Reason: "the first page has no exact hits.total", Err: ErrMalformed}
	}
	total := page.Hits.Total.Value
	after := int64(-1)
	for {
		refs, err := page.refs(op, after, withSource)
		if err != nil {
			return n, err
		}
		if len(refs) > 0 {
			if err := fn(refs); err != nil {
				return n, err
			}
			n += int64(len(refs))
			after = refs[len(refs)-1].SeqNo
		}
		if len(refs) == 0 || n >= total {
			break
		}
		if scrollID == "" {
			return n, &Error{Op: op, Status: 200, Reason: "no _scroll_id to continue with", Err: ErrMalformed}
		}
		page = listPage{}
		if err := c.do(ctx, op, http.MethodPost, "/_search/scroll", map[string]any{"scroll": listKeepAlive, "scroll_id": scrollID}, &page); err != nil {
			return n, err
		}
		if page.ScrollID != "" {
			scrollID = page.ScrollID
		}
	}
	if n != total {
		return n, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("listed %d documents but the view holds %d", n, total), Err: ErrPartial}
	}
	return n, nil
}

// CountIndex returns how many documents the index holds (all shards).
func (c *Client) CountIndex(ctx context.Context, index string) (int64, error) {
	op := "count " + index
	var r struct {
		Count  *int64       `json:"count"`
		Shards shardsHeader `json:"_shards"`
	}
	if err := c.do(ctx, op, http.MethodGet, "/"+url.PathEscape(index)+"/_count", nil, &r); err != nil {
		return 0, err
	}
	if err := r.Shards.check(op); err != nil {
		return 0, err
	}
	if r.Count == nil {
		return 0, &Error{Op: op, Status: 200, Reason: "no count in the answer", Err: ErrMalformed}
	}
	return *r.Count, nil
}

// Present returns which of ids are live in one shard now (an ids query,
// _source off). A partial answer is an error.
func (c *Client) Present(ctx context.Context, index string, shard int, node string, ids []string) (map[string]DocRef, error) {
	op := fmt.Sprintf("re-check %d ids in shard %d of %s", len(ids), shard, index)
	out := make(map[string]DocRef, len(ids))
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		body := map[string]any{
			"query":               map[string]any{"ids": map[string]any{"values": chunk}},
			"size":                len(chunk),
			"_source":             false,
			"seq_no_primary_term": true,
			"track_total_hits":    true,
		}
		var page listPage
		path := "/" + url.PathEscape(index) + "/_search?preference=" + shardPreference(shard, node)
		if err := c.do(ctx, op, http.MethodPost, path, body, &page); err != nil {
			return nil, err
		}
		if err := page.Shards.check(op); err != nil {
			return nil, err
		}
		if page.TimedOut {
			return nil, &Error{Op: op, Status: 200, Reason: "the re-check timed out", Err: ErrPartial}
		}
		if page.Shards.Total != 1 {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("the re-check covered %d shards, want shard %d alone", page.Shards.Total, shard), Err: ErrMalformed}
		}
		if page.Hits.Total != nil && page.Hits.Total.Value != int64(len(page.Hits.Hits)) {
			return nil, &Error{Op: op, Status: 200, Reason: fmt.Sprintf("the re-check returned %d of %d hits", len(page.Hits.Hits), page.Hits.Total.Value), Err: ErrPartial}
		}
		for _, h := range page.Hits.Hits {
			ref := DocRef{ID: h.ID, Routing: h.Routing}
			if h.SeqNo != nil {
				ref.SeqNo = *h.SeqNo
			}
			out[h.ID] = ref
		}
	}
	return out, nil
}

// IsNotFound reports whether err is a 404 for a missing index.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsClosed reports whether err says the index is closed.
func IsClosed(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == "index_closed_exception"
}
