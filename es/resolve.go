package es

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// Resolution is what an index expression names now.
type Resolution struct {
	// Indices are the concrete indices behind the expression, sorted, each
	// once: matched directly, through an alias, or as a data stream's
	// backing index.
	Indices []ResolvedIndex
	// Aliases and DataStreams the expression matched, by name.
	Aliases     map[string][]string
	DataStreams map[string][]string
}

// ResolvedIndex is one concrete index of a resolution.
type ResolvedIndex struct {
	Name string
	// Closed is known for indices matched directly; indices reached through
	// an alias or data stream report false (their stats say).
	Closed     bool
	DataStream string
}

// Resolve answers GET /_resolve/index/<expr>: wildcards expand to open and
// closed indices (closed ones are reported, not followed), hidden ones too
// when hidden is set; data streams bring their (hidden) backing indices.
// A concrete name that exists nowhere is an error wrapping ErrNotFound:
// Elasticsearch 8+ answers 404 index_not_found_exception, while
// Elasticsearch 7 and OpenSearch answer 200 with nothing in the lists
// (recorded on the real engines), which Resolve turns into the same error.
func (c *Client) Resolve(ctx context.Context, expr string, hidden bool) (Resolution, error) {
	op := fmt.Sprintf("resolve %q", expr)
	res, listed, err := c.resolve(ctx, op, expr, hidden, "")
	if err != nil {
		return Resolution{}, err
	}
	if listed == 0 && concrete(expr) {
		return Resolution{}, &Error{Op: op, Status: http.StatusOK, Type: "index_not_found_exception",
			Reason: fmt.Sprintf("no such index [%s] (the cluster resolved the name to nothing)", expr), Err: ErrNotFound}
	}
	return res, nil
}

// ResolveAll resolves every expression in one request: what they name
// together, the names that exist nowhere left out (ignore_unavailable)
// instead of failing the request. Elements are sent in order, so an
// exclusion ("-name") removes from what the elements before it matched,
// those of earlier expressions too: callers that need each expression's own
// answer use Resolve.
func (c *Client) ResolveAll(ctx context.Context, exprs []string, hidden bool) (Resolution, error) {
	joined := strings.Join(exprs, ",")
	res, _, err := c.resolve(ctx, fmt.Sprintf("resolve %q", joined), joined, hidden, "&ignore_unavailable=true&allow_no_indices=true")
	return res, err
}

// resolve sends GET /_resolve/index/<expr> and returns its resolution and
// how many entries the answer listed.
func (c *Client) resolve(ctx context.Context, op, expr string, hidden bool, params string) (Resolution, int, error) {
	var r struct {
		Indices []struct {
			Name       string   `json:"name"`
			Attributes []string `json:"attributes"`
			DataStream string   `json:"data_stream"`
		} `json:"indices"`
		Aliases []struct {
			Name    string   `json:"name"`
			Indices []string `json:"indices"`
		} `json:"aliases"`
		DataStreams []struct {
			Name           string   `json:"name"`
			BackingIndices []string `json:"backing_indices"`
		} `json:"data_streams"`
	}
	wild := "open,closed"
	if hidden {
		wild += ",hidden"
	}
	path := "/_resolve/index/" + url.PathEscape(expr) + "?expand_wildcards=" + url.QueryEscape(wild) + params
	if err := c.do(ctx, op, http.MethodGet, path, nil, &r); err != nil {
		return Resolution{}, 0, err
	}
	res := Resolution{Aliases: map[string][]string{}, DataStreams: map[string][]string{}}
	seen := map[string]int{}
	add := func(ix ResolvedIndex) {
		if i, ok := seen[ix.Name]; ok {
			if ix.Closed {
				res.Indices[i].Closed = true
			}
			if ix.DataStream != "" {
				res.Indices[i].DataStream = ix.DataStream
			}
			return
		}
		seen[ix.Name] = len(res.Indices)
		res.Indices = append(res.Indices, ix)
	}
	for _, ix := range r.Indices {
		closed := false
		for _, a := range ix.Attributes {
			closed = closed || a == "closed"
		}
		add(ResolvedIndex{Name: ix.Name, Closed: closed, DataStream: ix.DataStream})
	}
	for _, a := range r.Aliases {
		res.Aliases[a.Name] = a.Indices
		for _, n := range a.Indices {
			add(ResolvedIndex{Name: n})
		}
	}
	for _, ds := range r.DataStreams {
		res.DataStreams[ds.Name] = ds.BackingIndices
		for _, n := range ds.BackingIndices {
			add(ResolvedIndex{Name: n, DataStream: ds.Name})
		}
	}
	sort.Slice(res.Indices, func(i, j int) bool { return res.Indices[i].Name < res.Indices[j].Name })
	return res, len(r.Indices) + len(r.Aliases) + len(r.DataStreams), nil
}

// Signature is a canonical text of the resolution: two resolutions with
// the same signature name the same indices, aliases and data streams, the
// same way (closed, backing).
func (res Resolution) Signature() string {
	var b strings.Builder
	for _, ix := range res.Indices {
		fmt.Fprintf(&b, "i %s %t %s\n", ix.Name, ix.Closed, ix.DataStream)
	}
	for _, kind := range []struct {
		tag string
		m   map[string][]string
	}{{"a", res.Aliases}, {"d", res.DataStreams}} {
		names := make([]string, 0, len(kind.m))
		for n := range kind.m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			members := append([]string(nil), kind.m[n]...)
			sort.Strings(members)
			fmt.Fprintf(&b, "%s %s %s\n", kind.tag, n, strings.Join(members, ","))
		}
	}
	return b.String()
}

// concrete reports whether an expression names indices only by name: no
// element has a wildcard or date math, and none is an exclusion. Such an
// expression resolving to nothing names something that does not exist.
func concrete(expr string) bool {
	for _, el := range strings.Split(expr, ",") {
		el = strings.TrimSpace(el)
		if el == "" || strings.ContainsAny(el, "*?<") || strings.HasPrefix(el, "-") || el == "_all" {
			return false
		}
	}
	return true
}
