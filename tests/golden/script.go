package golden

import (
	"fmt"
	"strings"

	"github.com/es-changefeed/es-changefeed/internal/engine"
)

// Target is one engine the script is recorded on; the emulator flavor of
// the same name answers in its place.
type Target struct {
	// Engine is the line's name in the engine table (internal/engine), the
	// emulator flavor's, and the golden directory's name.
	Engine     string
	OpenSearch bool
	Major      int
	// Recorded is how the goldens name the engine they were recorded on,
	// e.g. "elasticsearch-9 (Elasticsearch 9.5.3)": a golden naming
	// another version is stale.
	Recorded string
}

// Targets are the lines of the engine table, in its order.
var Targets = targets()

func targets() []Target {
	var out []Target
	for _, l := range engine.Lines() {
		out = append(out, Target{Engine: l.Name, OpenSearch: l.OpenSearch(), Major: l.Major(), Recorded: l.String()})
	}
	return out
}

// LookupTarget returns the target of an engine name (or its alias).
func LookupTarget(name string) (Target, error) {
	l, err := engine.Lookup(name)
	if err != nil {
		return Target{}, err
	}
	for _, t := range Targets {
		if t.Engine == l.Name {
			return t, nil
		}
	}
	return Target{}, fmt.Errorf("no target for %s", l)
}

// Step is one call of the script. Path and Body may hold {{name}}, replaced
// by what an earlier step captured; a step that needs a name no earlier step
// captured is not sent (its file says why).
type Step struct {
	// Name is the file name's part after the number, e.g. "stats".
	Name string
	// Why says which caller makes the call, or what it proves.
	Why    string
	Method string
	Path   string
	// Body is JSON, NDJSON for _bulk, or empty.
	Body string
	// Capture maps a name to a path in the answer whose value (a string or
	// number) later steps use as {{name}}.
	Capture map[string]string
	// Same are paths (see Compare) whose values must be equal, on top of
	// sameEverywhere.
	Same []string
	// Loose are paths compared by shape only, although sameEverywhere
	// names them (values that vary, such as generated ids).
	Loose []string
	// Subset are paths of objects from which the emulator may leave keys
	// out (it must not add any): index settings' defaults, of which the
	// engines list hundreds and the emulator models a few.
	Subset []string
	// Ignore are paths not compared at all.
	Ignore []string
	// Skip, when set, is why the step is not run on this target (neither
	// on the engine nor on the emulator).
	Skip string
	// Unreliable, when set, is why the engine's answer is recorded but not
	// compared: it comes from tests/engines' launcher or a missing module,
	// not from the engine as shipped.
	Unreliable string
}

// sameEverywhere are the paths compared by value in every answer: what the
// relay reads and a deterministic one-node script makes deterministic.
var sameEverywhere = []string{
	"_shards", "errors", "timed_out", "acknowledged", "count", "status",
	"error/type", "error/root_cause/*/type",
	"hits/total", "hits/max_score",
	"hits/hits/*/_index", "hits/hits/*/_id", "hits/hits/*/_routing", "hits/hits/*/_seq_no",
	"hits/hits/*/_primary_term", "hits/hits/*/_version", "hits/hits/*/_source", "hits/hits/*/_score",
	"hits/hits/*/sort",
	"items/*/*/_index", "items/*/*/_id", "items/*/*/status", "items/*/*/result", "items/*/*/_version",
	"items/*/*/_seq_no", "items/*/*/_primary_term", "items/*/*/_shards", "items/*/*/error/type",
	"items/*/*/error/reason", "items/*/*/error/shard", "items/*/*/error/index",
	"aggregations",
}

// Seq-no values a one-node script makes deterministic.
var (
	sameShardStats = []string{"indices/*/shards/*/*/routing/state", "indices/*/shards/*/*/routing/primary",
		"indices/*/shards/*/*/seq_no", "indices/*/shards/*/*/retention_leases/primary_term", "indices/*/status", "indices/*/health"}
	sameResolve = []string{"indices", "aliases", "data_streams"}
)

// Index names and bodies of the script.
const (
	// upTo is an upper bound above every seq no the script writes: the
	// relay's range ends at the global checkpoint, which it read.
	upTo = "1000"

	oneShard  = `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`
	twoShards = `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`

	// Documents whose shard differs between the legacy routing
	// (routing_num_shards) and Elasticsearch 9.4+'s hash mod shards; c and
	// f carry a routing value.
	bulkSource = `{"index":{"_index":"gold","_id":"a"}}
{"n":1,"s":"a"}
{"index":{"_index":"gold","_id":"b"}}
{"n":2,"s":"b"}
{"index":{"_index":"gold","_id":"c","routing":"r1"}}
{"n":3,"s":"c"}
{"index":{"_index":"gold","_id":"d"}}
{"n":4,"s":"d"}
{"index":{"_index":"gold","_id":"e"}}
{"n":5,"s":"e","nested":{"x":[1,2,3],"f":2.50,"t":"<&>\u00e9"}}
{"index":{"_index":"gold","_id":"f","routing":"r2"}}
{"n":6,"s":"f"}
{"index":{"_index":"gold","_id":"g"}}
{"n":7,"s":"g"}
{"index":{"_index":"gold","_id":"h"}}
{"n":8,"s":"h"}
{"index":{"_index":"gold","_id":"i"}}
{"n":9,"s":"i"}
{"index":{"_index":"gold","_id":"j"}}
{"n":10,"s":"j"}
`
	// An update, a delete, a delete of a missing document (it takes a seq
	// no too) and a create that conflicts.
	bulkSource2 = `{"index":{"_index":"gold","_id":"a"}}
{"n":11,"s":"a2"}
{"delete":{"_index":"gold","_id":"b"}}
{"delete":{"_index":"gold","_id":"zz"}}
{"create":{"_index":"gold","_id":"d"}}
{"n":12}
{"index":{"_index":"gold","_id":"k"}}
{"n":13,"s":"k"}
`
	// The bulk sink's lines (sink/bulk.go): external versions
	// generation<<41 | seq_no<<1 | deleted, into an index the first write
	// creates (1 shard, 1 replica by default: yellow on one node); m1
	// again with the same version conflicts, m2 with a higher one updates.
	bulkMirror = `{"index":{"_index":"gold-mirror","_id":"m1","routing":"r1","version":2199023255552,"version_type":"external"}}
{"n":1}
{"index":{"_index":"gold-mirror","_id":"m2","version":2199023255554,"version_type":"external"}}
{"n":2}
{"delete":{"_index":"gold-mirror","_id":"m3","version":2199023255557,"version_type":"external"}}
{"index":{"_index":"gold-mirror","_id":"m1","routing":"r1","version":2199023255552,"version_type":"external"}}
{"n":1}
{"index":{"_index":"gold-mirror","_id":"m2","version":2199023255556,"version_type":"external"}}
{"n":2,"again":true}
`
)

// prefNode is the preference of the delete scanner and the resync's
// listings: the shard, on the copy of the node stats named (url-escaped, as
// es sends it).
func prefNode(shard int) string {
	return fmt.Sprintf("_shards%%3A%d%%7C_prefer_nodes%%3A{{node}}", shard)
}

// shardSearch is es's SearchShard body: (after, upTo] by _seq_no.
func shardSearch(after string, size int) string {
	sa := ""
	if after != "-1" {
		sa = `,"search_after":[` + after + `]`
	}
	return fmt.Sprintf(`{"query":{"range":{"_seq_no":{"gt":%s,"lte":%s}}},"sort":[{"_seq_no":"asc"}],"size":%d,"seq_no_primary_term":true,"version":true,"track_total_hits":false%s}`,
		after, upTo, size, sa)
}

// listBody is es's listing body (ListShard without source,
// SnapshotShard with).
func listBody(size int, withSource bool, extra string) string {
	return fmt.Sprintf(`{"size":%d,"_source":%t,"version":%t,"sort":[{"_seq_no":"asc"}],"seq_no_primary_term":true,"track_total_hits":true%s}`,
		size, withSource, withSource, extra)
}

// Script returns the steps for a target, in order. Every target gets the
// same steps (numbered alike in every golden directory); those a target
// cannot run carry Skip.
func Script(t Target) []Step {
	onlyES9 := ""
	if t.Engine != "elasticsearch-9" {
		onlyES9 = "index.disable_sequence_numbers and index.mode columnar are Elasticsearch 9.4+ only: recorded on elasticsearch-9"
	}
	// Data streams are X-Pack on Elasticsearch 7.17, absent from these
	// nodes: the template's refusal is recorded (not compared), the rest is
	// not run.
	dsUnreliable, dsSkip := "", ""
	if t.Engine == "elasticsearch-7" {
		dsUnreliable = "data streams are X-Pack on Elasticsearch 7.17, which tests/engines' nodes do not have"
		dsSkip = dsUnreliable
	}
	// Maven's jars carry no build flavor or type: Elasticsearch 7 reports
	// "unknown" where a distribution reports "default" and "tar".
	rootLoose := []string(nil)
	if t.Engine == "elasticsearch-7" {
		rootLoose = []string{"version/build_flavor"}
	}
	rootUnreliable := ""
	if !t.OpenSearch && t.Major >= 8 {
		rootUnreliable = "GET / is served by tests/engines' launcher on Elasticsearch 8/9 (the rest-root module is not on Maven Central)"
	}
	dsGetSkip := ""
	if !t.OpenSearch {
		dsGetSkip = "GET /_data_stream is in Elasticsearch's data-streams module, which is not on Maven Central (the relay does not call it)"
	}

	pitOpen := Step{Name: "pit-open", Why: "delete scanner, resync: ListShard/SnapshotShard open a point in time on one shard's copy",
		Method: "POST", Path: "/gold/_pit?keep_alive=2m&preference=" + prefNode(0),
		Capture: map[string]string{"pit": "id"}}
	pitClose := Step{Name: "pit-close", Why: "closePIT", Method: "DELETE", Path: "/_pit", Body: `{"id":"{{pit}}"}`,
		Same: []string{"succeeded", "num_freed"}}
	if t.OpenSearch {
		pitOpen.Path = "/gold/_search/point_in_time?keep_alive=2m&preference=" + prefNode(0)
		pitOpen.Capture = map[string]string{"pit": "pit_id"}
		pitClose.Path = "/_search/point_in_time"
		pitClose.Body = `{"pit_id":["{{pit}}"]}`
		pitClose.Same = []string{"pits/*/successful"}
	}
	pitSearch := func(name, after string, total bool) Step {
		extra := `,"pit":{"id":"{{pit}}","keep_alive":"2m"}`
		if after != "" {
			extra += `,"search_after":[` + after + `]`
		}
		body := listBody(3, false, extra)
		if !total {
			body = strings.Replace(body, `"track_total_hits":true`, `"track_total_hits":false`, 1)
		}
		return Step{Name: name, Why: "ListShard: a page of the point in time (no index in the path)",
			Method: "POST", Path: "/_search", Body: body}
	}

	return []Step{
		{Name: "root", Why: "Info: product, version, build_flavor (relay, status); Maven's Elasticsearch 7 jars report build_flavor unknown",
			Method: "GET", Path: "/", Same: []string{"version/build_flavor", "version/distribution", "tagline",
				"version/number", "version/lucene_version", "version/minimum_wire_compatibility_version", "version/minimum_index_compatibility_version"},
			Loose:      rootLoose,
			Unreliable: rootUnreliable},
		{Name: "create-gold", Method: "PUT", Path: "/gold", Body: twoShards, Same: []string{"index", "shards_acknowledged"}},
		{Name: "create-gold-other", Method: "PUT", Path: "/gold-other", Body: oneShard},
		{Name: "stats-empty", Why: "Stats of an index without writes: -1 checkpoints", Method: "GET", Path: "/gold/_stats/get?level=shards",
			Capture: map[string]string{"node": "indices/gold/shards/0/0/routing/node"}, Same: sameShardStats},
		{Name: "settings", Why: "Settings: number_of_shards, uuid, disable_sequence_numbers (relay, resync)", Method: "GET",
			Path: "/gold/_settings?flat_settings=true&include_defaults=true",
			Same: []string{"gold/settings/index.number_of_shards", "gold/settings/index.number_of_replicas", "gold/defaults/index.disable_sequence_numbers",
				"gold/settings/index.version.created"},
			Subset: []string{"gold/defaults"}},
		{Name: "bulk-source", Why: "writes whose seq nos and shards the rest of the script reads", Method: "POST", Path: "/_bulk", Body: bulkSource},
		{Name: "bulk-source-2", Why: "an update, a delete, a delete of a missing id (takes a seq no), a create conflict",
			Method: "POST", Path: "/_bulk", Body: bulkSource2},
		{Name: "refresh", Why: "Refresh (relay, resync, delete scanner)", Method: "POST", Path: "/gold/_refresh"},
		{Name: "stats", Why: "Stats: each primary's checkpoints, node, primary term", Method: "GET", Path: "/gold/_stats/get?level=shards",
			Same: sameShardStats},
		{Name: "stats-two-indices", Why: "Stats of a comma list", Method: "GET", Path: "/gold,gold-other/_stats/get?level=shards",
			Same: sameShardStats},
		{Name: "count-index", Why: "CountIndex (progress, resync)", Method: "GET", Path: "/gold/_count"},
		{Name: "search-shard0-page1", Why: "SearchShard: the first page of shard 0 (no search_after)", Method: "POST",
			Path: "/gold/_search?preference=_shards:0", Body: shardSearch("-1", 3)},
		{Name: "search-shard0-page2", Why: "SearchShard: the next page, search_after the last seq no", Method: "POST",
			Path: "/gold/_search?preference=_shards:0", Body: shardSearch("2", 3)},
		{Name: "search-shard1", Why: "SearchShard of shard 1: which documents routed there", Method: "POST",
			Path: "/gold/_search?preference=_shards:1", Body: shardSearch("-1", 20)},
		{Name: "count-shard-range", Why: "Count of a shard's (after, upTo] on the stats' node (delete scanner)", Method: "POST",
			Path: "/gold/_count?preference=" + prefNode(0), Body: `{"query":{"range":{"_seq_no":{"gt":-1,"lte":` + upTo + `}}}}`},
		{Name: "count-shard-all", Why: "Count of a shard's documents (delete scanner)", Method: "POST",
			Path: "/gold/_count?preference=" + prefNode(1), Body: `{"query":{"match_all":{}}}`},
		pitOpen,
		pitSearch("pit-search-page1", "", true),
		pitSearch("pit-search-page2", "2", false),
		pitClose,
		{Name: "scroll-open", Why: "SnapshotShard by scroll (with _source, _version)", Method: "POST",
			Path: "/gold/_search?scroll=2m&preference=" + prefNode(0), Body: listBody(3, true, ""),
			Capture: map[string]string{"scroll": "_scroll_id"}},
		{Name: "scroll-next", Method: "POST", Path: "/_search/scroll", Body: `{"scroll":"2m","scroll_id":"{{scroll}}"}`},
		{Name: "scroll-clear", Method: "DELETE", Path: "/_search/scroll", Body: `{"scroll_id":["{{scroll}}"]}`,
			Same: []string{"succeeded", "num_freed"}},
		{Name: "ids-recheck", Why: "Present: which candidate ids are live in the shard (delete scanner)", Method: "POST",
			Path: "/gold/_search?preference=" + prefNode(0),
			Body: `{"query":{"ids":{"values":["a","b","c","d","e","zz"]}},"size":6,"_source":false,"seq_no_primary_term":true,"track_total_hits":true}`},
		{Name: "histogram", Why: "issue #17: a histogram of one shard's _seq_no", Method: "POST", Path: "/gold/_search?preference=_shards:0",
			Body: `{"size":0,"track_total_hits":false,"aggs":{"seq":{"histogram":{"field":"_seq_no","interval":2}}}}`},
		{Name: "histogram-range", Why: "issue #17: a histogram of one shard's (after, upTo]", Method: "POST", Path: "/gold/_search?preference=_shards:1",
			Body: `{"size":0,"track_total_hits":false,"query":{"range":{"_seq_no":{"gt":0,"lte":` + upTo + `}}},"aggs":{"seq":{"histogram":{"field":"_seq_no","interval":3,"min_doc_count":1}}}}`},
		{Name: "search-size0-no-total", Why: "a search for nothing but its shard header (OpenSearch 3 adds terminated_early to some)", Method: "POST",
			Path: "/gold/_search?preference=_shards:0", Body: `{"size":0,"track_total_hits":false}`},
		{Name: "bulk-mirror", Why: "the bulk sink: external versions, a conflict item, a delete of a missing id, auto-created index",
			Method: "POST", Path: "/_bulk", Body: bulkMirror},
		{Name: "bulk-mirror-again", Why: "the bulk sink redelivering: every item conflicts, the delete too (its tombstone keeps the version)",
			Method: "POST", Path: "/_bulk", Body: bulkMirror},
		{Name: "doc-version-conflict", Why: "409 for a single write with an old external version", Method: "PUT",
			Path: "/gold-mirror/_doc/m2?version=2199023255552&version_type=external", Body: `{"n":0}`,
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "alias-add", Method: "POST", Path: "/_aliases",
			Body: `{"actions":[{"add":{"index":"gold","alias":"gold-alias","is_write_index":true}}]}`},
		{Name: "alias-get", Method: "GET", Path: "/_alias/gold-alias", Same: []string{"gold"}},
		{Name: "alias-missing", Why: "a missing alias: 404 with a string error", Method: "GET", Path: "/_alias/nope", Same: []string{"error"}},
		{Name: "create-gold-closed", Method: "PUT", Path: "/gold-closed", Body: oneShard},
		{Name: "close", Method: "POST", Path: "/gold-closed/_close", Same: []string{"shards_acknowledged", "indices"}},
		{Name: "closed-search", Why: "IsClosed: search of a closed index", Method: "POST", Path: "/gold-closed/_search?preference=_shards:0",
			Body: shardSearch("-1", 3), Same: []string{"error/reason", "error/root_cause/*/reason", "error/index"}},
		{Name: "closed-refresh", Why: "IsClosed: refresh of a closed index", Method: "POST", Path: "/gold-closed/_refresh",
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "closed-stats", Why: "Stats of a closed index (targets.go)", Method: "GET", Path: "/gold-closed/_stats/get?level=shards",
			Same: append([]string{"error/reason"}, sameShardStats...)},
		{Name: "missing-stats", Why: "IsNotFound: a deleted or missing index", Method: "GET", Path: "/nope/_stats/get?level=shards",
			Same: []string{"error/reason", "error/root_cause/*/reason", "error/index", "error/resource.id", "error/resource.type"}},
		{Name: "missing-search", Method: "POST", Path: "/nope/_search?preference=_shards:0", Body: shardSearch("-1", 3),
			Same: []string{"error/reason", "error/index"}},
		{Name: "missing-refresh", Method: "POST", Path: "/nope/_refresh", Same: []string{"error/reason", "error/index"}},
		{Name: "missing-settings", Method: "GET", Path: "/nope/_settings?flat_settings=true&include_defaults=true",
			Same: []string{"error/reason", "error/index"}},
		{Name: "preference-custom", Why: "a custom string after _shards:N| (an earlier delete scanner sent one)", Method: "POST",
			Path: "/gold/_search?preference=_shards%3A0%7Cescf-scan", Body: `{"size":0}`,
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "preference-unknown-type", Why: "an unknown preference type after _shards:N|", Method: "POST",
			Path: "/gold/_search?preference=_shards%3A0%7C_custom", Body: `{"size":0}`,
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "preference-gone-node", Why: "_prefer_nodes naming no node: another copy answers", Method: "POST",
			Path: "/gold/_search?preference=_shards%3A0%7C_prefer_nodes%3Anonode", Body: `{"size":0}`},
		{Name: "result-window", Why: "from + size over index.max_result_window", Method: "POST", Path: "/gold/_search",
			Body: `{"from":10000,"size":9}`, Same: []string{"error/root_cause/*/reason", "error/reason", "error/phase"}},
		{Name: "ds-template", Why: "a data stream's template (Elasticsearch 7.17 refuses data_stream on these nodes)", Method: "PUT",
			Path: "/_index_template/gold-ds", Unreliable: dsUnreliable,
			Body: `{"index_patterns":["gold-ds*"],"data_stream":{},"priority":500,"template":{"settings":{"number_of_shards":1,"number_of_replicas":0}}}`,
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "ds-write", Skip: dsSkip, Why: "the first write creates the data stream", Method: "PUT", Path: "/gold-ds/_create/ds1?refresh=true",
			Body: `{"@timestamp":"2026-01-01T00:00:00Z","n":1}`, Same: []string{"result", "_seq_no", "_version", "_index", "_id", "forced_refresh"}},
		{Name: "ds-resolve", Skip: dsSkip, Why: "Resolve of a data stream name (hidden backing indices)", Method: "GET",
			Path: "/_resolve/index/gold-ds?expand_wildcards=open%2Cclosed%2Chidden", Same: sameResolve,
			Capture: map[string]string{"backing": "data_streams/0/backing_indices/0"}},
		{Name: "ds-rollover", Skip: dsSkip, Method: "POST", Path: "/gold-ds/_rollover",
			Same: []string{"old_index", "new_index", "rolled_over", "dry_run", "conditions", "shards_acknowledged"}},
		{Name: "ds-resolve-rolled", Skip: dsSkip, Method: "GET", Path: "/_resolve/index/gold-ds?expand_wildcards=open%2Cclosed%2Chidden", Same: sameResolve},
		{Name: "ds-stats-backing", Skip: dsSkip, Why: "Stats of a backing index", Method: "GET", Path: "/{{backing}}/_stats/get?level=shards", Same: sameShardStats},
		{Name: "ds-get", Method: "GET", Path: "/_data_stream/gold-ds", Skip: dsGetSkip,
			Same: []string{"data_streams/*/name", "data_streams/*/generation", "data_streams/*/status", "data_streams/*/template",
				"data_streams/*/timestamp_field", "data_streams/*/indices/*/index_name"}},
		{Name: "resolve-wildcard", Why: "Resolve of a pattern: indices, closed ones, aliases, data streams", Method: "GET",
			Path: "/_resolve/index/gold*?expand_wildcards=open%2Cclosed", Same: sameResolve},
		{Name: "resolve-wildcard-hidden", Method: "GET", Path: "/_resolve/index/*gold*?expand_wildcards=open%2Cclosed%2Chidden", Same: sameResolve},
		{Name: "resolve-alias", Method: "GET", Path: "/_resolve/index/gold-alias?expand_wildcards=open%2Cclosed", Same: sameResolve},
		{Name: "resolve-missing", Why: "Resolve of a concrete name that does not exist", Method: "GET",
			Path: "/_resolve/index/nope?expand_wildcards=open%2Cclosed", Same: append([]string{"error/reason", "error/index"}, sameResolve...)},
		{Name: "resolve-missing-wildcard", Method: "GET", Path: "/_resolve/index/nope*?expand_wildcards=open%2Cclosed", Same: sameResolve},
		{Name: "noseq-create", Why: "index.disable_sequence_numbers set directly (an unknown setting before Elasticsearch 9.4)", Method: "PUT",
			Path: "/gold-noseq", Body: `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.disable_sequence_numbers":true}}`,
			Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "noseq-settings", Method: "GET", Path: "/gold-noseq/_settings?flat_settings=true&include_defaults=true", Skip: onlyES9,
			Same:   []string{"gold-noseq/settings/index.disable_sequence_numbers", "gold-noseq/defaults/index.disable_sequence_numbers", "gold-noseq/defaults/index.mode"},
			Subset: []string{"gold-noseq/defaults"}},
		{Name: "noseq-bulk", Why: "bulk items of an index without sequence numbers", Method: "POST", Path: "/_bulk", Skip: onlyES9,
			Body: "{\"index\":{\"_index\":\"gold-noseq\",\"_id\":\"n1\"}}\n{\"n\":1}\n"},
		{Name: "noseq-search", Why: "SearchShard on it: the range on _seq_no fails", Method: "POST", Path: "/gold-noseq/_search?preference=_shards:0",
			Body: shardSearch("-1", 3), Skip: onlyES9, Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "noseq-sort", Why: "a listing's sort on _seq_no fails", Method: "POST", Path: "/gold-noseq/_search",
			Body: listBody(3, false, ""), Skip: onlyES9, Same: []string{"error/reason", "error/root_cause/*/reason"}},
		{Name: "noseq-stats", Method: "GET", Path: "/gold-noseq/_stats/get?level=shards", Skip: onlyES9, Same: sameShardStats},
		{Name: "tsdb-create", Why: "a time_series index (disable_sequence_numbers default)", Method: "PUT", Path: "/gold-tsdb", Skip: onlyES9,
			Body: `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.mode":"time_series","index.routing_path":["host"],` +
				`"index.time_series.start_time":"2026-01-01T00:00:00Z","index.time_series.end_time":"2027-01-01T00:00:00Z"},` +
				`"mappings":{"properties":{"@timestamp":{"type":"date"},"host":{"type":"keyword","time_series_dimension":true},"v":{"type":"long","time_series_metric":"gauge"}}}}`},
		{Name: "tsdb-settings", Method: "GET", Path: "/gold-tsdb/_settings?flat_settings=true&include_defaults=true", Skip: onlyES9,
			Same:   []string{"gold-tsdb/settings/index.mode", "gold-tsdb/defaults/index.disable_sequence_numbers", "gold-tsdb/settings/index.disable_sequence_numbers"},
			Subset: []string{"gold-tsdb/defaults"}},
		{Name: "columnar-create", Why: "index.mode columnar (disable_sequence_numbers default)", Method: "PUT", Path: "/gold-columnar", Skip: onlyES9,
			Body: `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.mode":"columnar"}}`},
		{Name: "columnar-settings", Method: "GET", Path: "/gold-columnar/_settings?flat_settings=true&include_defaults=true", Skip: onlyES9,
			Same:   []string{"gold-columnar/settings/index.mode", "gold-columnar/defaults/index.disable_sequence_numbers", "gold-columnar/settings/index.disable_sequence_numbers"},
			Subset: []string{"gold-columnar/defaults"}},
		{Name: "seqno-counts", Why: "issue #26: SeqNoCounts, one filters aggregation of ranges of one shard's _seq_no (delete scanner): a bucket per range, in order, the empty ones too",
			Method: "POST", Path: "/gold/_search?preference=" + prefNode(0),
			Body: `{"size":0,"track_total_hits":false,"aggs":{"seq":{"filters":{"filters":[{"range":{"_seq_no":{"gt":-1,"lte":0}}},` +
				`{"range":{"_seq_no":{"gt":0,"lte":` + upTo + `}}},{"range":{"_seq_no":{"gt":1000,"lte":2000}}}]}}}}`,
			Same: []string{"aggregations/seq/buckets/*/doc_count"}},
		{Name: "seqno-counts-query", Why: "issue #26: SeqNoCounts as it is sent, under a query matching only its spans (a bool should of their runs): a document outside the query is counted by no filter",
			Method: "POST", Path: "/gold/_search?preference=" + prefNode(0),
			Body: `{"size":0,"track_total_hits":false,"query":{"bool":{"minimum_should_match":1,"should":[{"range":{"_seq_no":{"gt":-1,"lte":0}}},` +
				`{"range":{"_seq_no":{"gt":2,"lte":` + upTo + `}}}]}},"aggs":{"seq":{"filters":{"filters":[{"range":{"_seq_no":{"gt":-1,"lte":0}}},` +
				`{"range":{"_seq_no":{"gt":-1,"lte":` + upTo + `}}},{"range":{"_seq_no":{"gt":2,"lte":` + upTo + `}}}]}}}}`,
			Same: []string{"aggregations/seq/buckets/*/doc_count"}},
	}
}
