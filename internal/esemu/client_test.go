package esemu_test

// These tests drive the emulator with a client nobody here wrote: the
// opensearch-go v4 typed API (package opensearchapi), against every flavor.
// Where the typed API has no field or parameter (_stats?level=shards, ES's
// _pit, _version and pit_id in search hits), the request is built by hand
// and sent through the client's own transport (Client.Perform), so auth,
// TLS and headers still come from the client.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// oscFlavors runs fn once per flavor, in parallel subtests named after it.
func oscFlavors(t *testing.T, fn func(t *testing.T, f esemu.Flavor)) {
	t.Helper()
	for _, f := range esemu.Flavors {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			fn(t, f)
		})
	}
}

// oscCluster starts an emulator and closes it when the test ends.
func oscCluster(tb testing.TB, cfg esemu.Config) *esemu.Cluster {
	tb.Helper()
	c, err := esemu.New(cfg)
	if err != nil {
		tb.Fatalf("esemu.New(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("close emulator: %v", err)
		}
	})
	return c
}

// oscClient builds an opensearch-go client for c. cfg carries auth and TLS;
// its Addresses are set to c's URL. Retries are off so every answer is the
// emulator's first.
func oscClient(tb testing.TB, c *esemu.Cluster, cfg opensearch.Config) *opensearchapi.Client {
	tb.Helper()
	cfg.Addresses = []string{c.URL()}
	cfg.DisableRetry = true
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: cfg})
	if err != nil {
		tb.Fatalf("opensearchapi.NewClient: %v", err)
	}
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// oscEnv is one emulator of a flavor and a client for it.
type oscEnv struct {
	f  esemu.Flavor
	c  *esemu.Cluster
	cl *opensearchapi.Client
}

// oscStart starts a cluster of flavor f with nodes data nodes and a plain
// client for it.
func oscStart(tb testing.TB, f esemu.Flavor, nodes int) *oscEnv {
	tb.Helper()
	c := oscCluster(tb, esemu.Config{Flavor: f, Nodes: nodes})
	return &oscEnv{f: f, c: c, cl: oscClient(tb, c, opensearch.Config{})}
}

func (e *oscEnv) es7() bool { return e.f == esemu.FlavorES7 }

// oscPtr returns a pointer to v (typed API parameters are pointers).
func oscPtr[T any](v T) *T { return &v }

func oscBody(s string) io.Reader { return strings.NewReader(s) }

// oscRaw sends a hand-built request through the client's transport and
// returns the status, headers and body.
func oscRaw(tb testing.TB, cl *opensearchapi.Client, method, path, body string, hdr http.Header) (int, http.Header, []byte) {
	tb.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, path, rd)
	if err != nil {
		tb.Fatalf("build %s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	//lint:ignore SA1019 raw requests through the client's transport, buffered, as the other callers of the emulator send them
	resp, err := cl.Client.Perform(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// oscRawJSON is oscRaw that wants status and decodes the body into v.
func oscRawJSON(tb testing.TB, cl *opensearchapi.Client, method, path, body string, status int, v any) []byte {
	tb.Helper()
	got, _, b := oscRaw(tb, cl, method, path, body, nil)
	if got != status {
		tb.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, b)
	}
	if v != nil {
		oscDecode(tb, b, v)
	}
	return b
}

func oscDecode(tb testing.TB, b []byte, v any) {
	tb.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("decode %s into %T: %v", b, v, err)
	}
}

// oscInspector is any typed response.
type oscInspector interface{ Inspect() opensearchapi.Inspect }

// oscRawBody is the body of a typed response, as the emulator sent it.
func oscRawBody(tb testing.TB, r oscInspector) []byte {
	tb.Helper()
	resp := r.Inspect().Response
	if resp == nil {
		tb.Fatalf("%T has no response", r)
	}
	if b := resp.RawBody(); b != nil {
		return b
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read %T body: %v", r, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// oscStatus is the HTTP status of a typed response.
func oscStatus(r oscInspector) int { return r.Inspect().Response.StatusCode }

// oscKeys lists the top-level keys of a JSON object in wire order.
func oscKeys(tb testing.TB, b []byte) []string {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		tb.Fatalf("not a JSON object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			tb.Fatalf("keys of %s: %v", b, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			tb.Fatalf("keys of %s: %v", b, err)
		}
	}
	return keys
}

// oscStructErr asserts err is an ES/OpenSearch error object of the status
// and type and returns it.
func oscStructErr(tb testing.TB, err error, status int, typ string) *opensearch.StructError {
	tb.Helper()
	var se *opensearch.StructError
	if !errors.As(err, &se) {
		tb.Fatalf("error %v (%T): want *opensearch.StructError %d %s", err, err, status, typ)
	}
	if se.Status != status || se.Err.Type != typ {
		tb.Fatalf("error = %d %s (%s), want %d %s", se.Status, se.Err.Type, se.Err.Reason, status, typ)
	}
	if len(se.Err.RootCause) == 0 {
		tb.Errorf("error %s has no root_cause", se.Err.Type)
	}
	return se
}

// oscStringErr asserts err is a response the client could not read as an
// error object (found:false bodies, num_freed:0, alias missing) and returns
// it.
func oscStringErr(tb testing.TB, err error, status int) *opensearch.StringError {
	tb.Helper()
	var se *opensearch.StringError
	if !errors.As(err, &se) {
		tb.Fatalf("error %v (%T): want *opensearch.StringError %d", err, err, status)
	}
	if se.Status != status {
		tb.Fatalf("error status = %d, want %d (%s)", se.Status, status, se.Err)
	}
	return se
}

// oscCreateIndex creates an index with shards primaries and replicas
// replicas per primary.
func oscCreateIndex(tb testing.TB, cl *opensearchapi.Client, name string, shards, replicas int) {
	tb.Helper()
	resp, err := cl.Indices.Create(context.Background(), opensearchapi.IndicesCreateReq{
		Index: name,
		Body:  oscBody(fmt.Sprintf(`{"settings":{"index":{"number_of_shards":%d,"number_of_replicas":%d}}}`, shards, replicas)),
	})
	if err != nil {
		tb.Fatalf("create index %s: %v", name, err)
	}
	if !resp.Acknowledged || !resp.ShardsAcknowledged || resp.Index != name {
		tb.Fatalf("create index %s = %+v", name, resp)
	}
}

// oscIndex writes one document (refresh=true) and returns the response.
func oscIndex(tb testing.TB, cl *opensearchapi.Client, idx, id, body string, p opensearchapi.IndexParams) *opensearchapi.IndexResp {
	tb.Helper()
	if p.Refresh == "" {
		p.Refresh = "true"
	}
	resp, err := cl.Index(context.Background(), opensearchapi.IndexReq{Index: idx, DocumentID: id, Body: oscBody(body), Params: p})
	if err != nil {
		tb.Fatalf("index %s/%s: %v", idx, id, err)
	}
	return resp
}

func oscJSONEqual(tb testing.TB, what string, got []byte, want string) {
	tb.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		tb.Fatalf("%s: decode %s: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		tb.Fatalf("%s: decode want %s: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		tb.Errorf("%s = %s, want %s", what, got, want)
	}
}

func TestClient_Info(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		resp, err := e.cl.Info(context.Background(), nil)
		if err != nil {
			t.Fatalf("info: %v", err)
		}
		if got, want := resp.Version.Number, f.Version(); got != want {
			t.Errorf("version.number = %q, want %q", got, want)
		}
		if resp.ClusterName != esemu.DefaultClusterName || resp.Name == "" || len(resp.ClusterUUID) < 20 {
			t.Errorf("name/cluster_name/cluster_uuid = %q/%q/%q", resp.Name, resp.ClusterName, resp.ClusterUUID)
		}
		if resp.Version.BuildType != "tar" || resp.Version.BuildSnapshot || resp.Version.LuceneVersion == "" ||
			resp.Version.BuildHash == "" || resp.Version.MinimumWireCompatibilityVersion == "" ||
			resp.Version.MinimumIndexCompatibilityVersion == "" {
			t.Errorf("version = %+v", resp.Version)
		}
		var raw struct {
			Version map[string]any `json:"version"`
		}
		b := oscRawBody(t, resp)
		oscDecode(t, b, &raw)
		vkeys := oscKeys(t, oscField(t, b, "version"))
		if f.OpenSearch() {
			if resp.Version.Distribution != "opensearch" || vkeys[0] != "distribution" {
				t.Errorf("distribution = %q, version keys %v: want opensearch first", resp.Version.Distribution, vkeys)
			}
			if _, ok := raw.Version["build_flavor"]; ok {
				t.Errorf("OpenSearch root has build_flavor")
			}
			if resp.Tagline != "The OpenSearch Project: https://opensearch.org/" {
				t.Errorf("tagline = %q", resp.Tagline)
			}
		} else {
			if raw.Version["build_flavor"] != "default" || resp.Version.Distribution != "" {
				t.Errorf("build_flavor = %v, distribution %q", raw.Version["build_flavor"], resp.Version.Distribution)
			}
			if resp.Tagline != "You Know, for Search" {
				t.Errorf("tagline = %q", resp.Tagline)
			}
			if got := resp.Inspect().Response.Header.Get("X-Elastic-Product"); got != "Elasticsearch" {
				t.Errorf("X-Elastic-Product = %q", got)
			}
		}
		if got, want := oscKeys(t, b), []string{"name", "cluster_name", "cluster_uuid", "version", "tagline"}; !reflect.DeepEqual(got, want) {
			t.Errorf("root keys = %v, want %v", got, want)
		}
		// Ping is HEAD /.
		pr, err := e.cl.Ping(context.Background(), nil)
		if err != nil || pr.StatusCode != http.StatusOK {
			t.Errorf("ping = %v, %v", pr, err)
		}
	})
}

// oscField returns the raw JSON of top-level field k of b.
func oscField(tb testing.TB, b []byte, k string) []byte {
	tb.Helper()
	var m map[string]json.RawMessage
	oscDecode(tb, b, &m)
	v, ok := m[k]
	if !ok {
		tb.Fatalf("no field %q in %s", k, b)
	}
	return v
}

func TestClient_ClusterHealth(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 2)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "h1", 2, 1)
		resp, err := e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{
			Params: opensearchapi.ClusterHealthParams{WaitForStatus: "green", Timeout: 10 * time.Second},
		})
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		if resp.Status != "green" || resp.TimedOut || resp.NumberOfNodes != 2 || resp.NumberOfDataNodes != 2 ||
			resp.ActivePrimaryShards != 2 || resp.ActiveShards != 4 || resp.UnassignedShards != 0 ||
			resp.ActiveShardsPercentAsNumber != 100 || resp.ClusterName != esemu.DefaultClusterName {
			t.Errorf("health = %+v", resp)
		}
		if resp.DiscoveredMaster != f.OpenSearch() || resp.DiscoveredClusterManager != f.OpenSearch() {
			t.Errorf("discovered_master/cluster_manager = %v/%v on %s", resp.DiscoveredMaster, resp.DiscoveredClusterManager, f)
		}

		// level=shards for one index, decoded from the raw body.
		resp, err = e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{
			Indices: []string{"h1"},
			Params:  opensearchapi.ClusterHealthParams{Level: "shards"},
		})
		if err != nil {
			t.Fatalf("health level=shards: %v", err)
		}
		var lv struct {
			Indices map[string]struct {
				Status           string `json:"status"`
				NumberOfShards   int    `json:"number_of_shards"`
				NumberOfReplicas int    `json:"number_of_replicas"`
				ActiveShards     int    `json:"active_shards"`
				Shards           map[string]struct {
					Status        string `json:"status"`
					PrimaryActive bool   `json:"primary_active"`
					ActiveShards  int    `json:"active_shards"`
				} `json:"shards"`
			} `json:"indices"`
		}
		oscDecode(t, oscRawBody(t, resp), &lv)
		h1 := lv.Indices["h1"]
		if h1.Status != "green" || h1.NumberOfShards != 2 || h1.NumberOfReplicas != 1 || h1.ActiveShards != 4 || len(h1.Shards) != 2 {
			t.Errorf("indices.h1 = %+v", h1)
		}
		for n, s := range h1.Shards {
			if s.Status != "green" || !s.PrimaryActive || s.ActiveShards != 2 {
				t.Errorf("shard %s = %+v", n, s)
			}
		}

		// A replica that cannot be allocated: yellow, and waiting for green
		// times out.
		oscCreateIndex(t, e.cl, "h2", 1, 2)
		resp, err = e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{
			Indices: []string{"h2"},
			Params:  opensearchapi.ClusterHealthParams{WaitForStatus: "green", Timeout: 50 * time.Millisecond},
		})
		wantTimeout := http.StatusRequestTimeout
		if f == esemu.FlavorES9 {
			wantTimeout = http.StatusOK
		}
		if wantTimeout == http.StatusOK {
			if err != nil {
				t.Fatalf("health timeout on %s: %v", f, err)
			}
		} else {
			oscStringErr(t, err, wantTimeout)
		}
		var to opensearchapi.ClusterHealthResp
		oscDecode(t, oscRawBody(t, resp), &to)
		if oscStatus(resp) != wantTimeout || !to.TimedOut || to.Status != "yellow" || to.UnassignedShards != 1 {
			t.Errorf("health wait timeout = %d %+v", oscStatus(resp), to)
		}
	})
}

func TestClient_IndexLifecycle(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "life", 3, 0)

		_, err := e.cl.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "life"})
		se := oscStructErr(t, err, http.StatusBadRequest, "resource_already_exists_exception")
		if !strings.HasPrefix(se.Err.Reason, "index [life/") || !strings.HasSuffix(se.Err.Reason, "] already exists") || se.Err.Index != "life" || se.Err.IndexUUID == "" {
			t.Errorf("duplicate create = %+v", se.Err)
		}

		ex, err := e.cl.Indices.Exists(ctx, opensearchapi.IndicesExistsReq{Indices: []string{"life"}})
		if err != nil || ex.StatusCode != http.StatusOK {
			t.Errorf("exists(life) = %v, %v", ex, err)
		}
		ex, err = e.cl.Indices.Exists(ctx, opensearchapi.IndicesExistsReq{Indices: []string{"nope"}})
		if ex == nil || ex.StatusCode != http.StatusNotFound || err == nil {
			t.Errorf("exists(nope) = %v, %v: want 404", ex, err)
		}

		get, err := e.cl.Indices.Get(ctx, opensearchapi.IndicesGetReq{Indices: []string{"life"}})
		if err != nil {
			t.Fatalf("get index: %v", err)
		}
		gi, ok := (*get.IndicesGetRespData)["life"]
		if !ok || len(*get.IndicesGetRespData) != 1 {
			t.Fatalf("get index = %+v", get.IndicesGetRespData)
		}
		var gs struct {
			Index struct {
				NumberOfShards   string `json:"number_of_shards"`
				NumberOfReplicas string `json:"number_of_replicas"`
				UUID             string `json:"uuid"`
				ProvidedName     string `json:"provided_name"`
				CreationDate     string `json:"creation_date"`
			} `json:"index"`
		}
		oscDecode(t, gi.Settings, &gs)
		if gs.Index.NumberOfShards != "3" || gs.Index.NumberOfReplicas != "0" || gs.Index.ProvidedName != "life" || gs.Index.UUID == "" || gs.Index.CreationDate == "" {
			t.Errorf("get index settings = %s", gi.Settings)
		}
		if gi.DataStream != nil || len(gi.Aliases) != 0 || string(gi.Mappings) != "{}" {
			t.Errorf("get index: data_stream %v aliases %v mappings %s", gi.DataStream, gi.Aliases, gi.Mappings)
		}
		_, err = e.cl.Indices.Get(ctx, opensearchapi.IndicesGetReq{Indices: []string{"nope"}})
		se = oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")
		if se.Err.Reason != "no such index [nope]" || se.Err.Index != "nope" || se.Err.IndexUUID != "_na_" {
			t.Errorf("get missing index = %+v", se.Err)
		}

		put, err := e.cl.Indices.Settings.Put(ctx, opensearchapi.SettingsPutReq{
			Indices: []string{"life"},
			Body:    oscBody(`{"index":{"refresh_interval":"5s","number_of_replicas":0}}`),
		})
		if err != nil || !put.Acknowledged {
			t.Fatalf("put settings = %+v, %v", put, err)
		}
		sg, err := e.cl.Indices.Settings.Get(ctx, &opensearchapi.SettingsGetReq{
			Indices: []string{"life"},
			Params:  opensearchapi.SettingsGetParams{FlatSettings: oscPtr(true)},
		})
		if err != nil {
			t.Fatalf("get settings: %v", err)
		}
		var flat map[string]string
		oscDecode(t, sg.GetIndices()["life"].Settings, &flat)
		if flat["index.refresh_interval"] != "5s" || flat["index.number_of_shards"] != "3" || flat["index.uuid"] != gs.Index.UUID {
			t.Errorf("flat settings = %v", flat)
		}
		sg, err = e.cl.Indices.Settings.Get(ctx, &opensearchapi.SettingsGetReq{Indices: []string{"life"}, Settings: []string{"index.refresh_interval"}})
		if err != nil {
			t.Fatalf("get one setting: %v", err)
		}
		oscJSONEqual(t, "settings/index.refresh_interval", sg.GetIndices()["life"].Settings, `{"index":{"refresh_interval":"5s"}}`)

		oscIndex(t, e.cl, "life", "1", `{"a":1}`, opensearchapi.IndexParams{})
		cl, err := e.cl.Indices.Close(ctx, opensearchapi.IndicesCloseReq{Index: "life"})
		if err != nil || !cl.Acknowledged || !cl.ShardsAcknowledged || !cl.Indices["life"].Closed {
			t.Fatalf("close = %+v, %v", cl, err)
		}
		_, err = e.cl.Search(ctx, &opensearchapi.SearchReq{Indices: []string{"life"}})
		se = oscStructErr(t, err, http.StatusBadRequest, "index_closed_exception")
		if se.Err.Reason != "closed" || se.Err.Index != "life" || se.Err.IndexUUID != gs.Index.UUID {
			t.Errorf("search closed = %+v", se.Err)
		}
		ex, err = e.cl.Indices.Exists(ctx, opensearchapi.IndicesExistsReq{Indices: []string{"life"}})
		if err != nil || ex.StatusCode != http.StatusOK {
			t.Errorf("exists(closed) = %v, %v", ex, err)
		}
		op, err := e.cl.Indices.Open(ctx, opensearchapi.IndicesOpenReq{Index: "life"})
		if err != nil || !op.Acknowledged || !op.ShardsAcknowledged {
			t.Fatalf("open = %+v, %v", op, err)
		}
		cnt, err := e.cl.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"life"}})
		if err != nil || cnt.Count != 1 || cnt.Shards.Total != 3 || cnt.Shards.Successful != 3 {
			t.Errorf("count after reopen = %+v, %v", cnt, err)
		}

		del, err := e.cl.Indices.Delete(ctx, opensearchapi.IndicesDeleteReq{Indices: []string{"life"}})
		if err != nil || !del.Acknowledged {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		if got, want := string(oscRawBody(t, del)), `{"acknowledged":true}`; got != want {
			t.Errorf("delete body = %s, want %s", got, want)
		}
		ex, _ = e.cl.Indices.Exists(ctx, opensearchapi.IndicesExistsReq{Indices: []string{"life"}})
		if ex == nil || ex.StatusCode != http.StatusNotFound {
			t.Errorf("exists after delete = %v", ex)
		}
		_, err = e.cl.Indices.Delete(ctx, opensearchapi.IndicesDeleteReq{Indices: []string{"life"}})
		oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")
	})
}

func TestClient_Documents(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "docs", 2, 0)
		wantType := ""
		if e.es7() {
			wantType = "_doc"
		}

		// Index with routing: created, 201, seq 0 on its shard.
		ir := oscIndex(t, e.cl, "docs", "1", `{"n":1}`, opensearchapi.IndexParams{Routing: "r1"})
		if ir.Result != "created" || ir.Version != 1 || ir.SeqNo != 0 || ir.PrimaryTerm != 1 || ir.ID != "1" ||
			ir.Index != "docs" || ir.Type != wantType || !ir.ForcedRefresh || ir.Shards.Total != 1 || ir.Shards.Successful != 1 ||
			oscStatus(ir) != http.StatusCreated {
			t.Errorf("index = %d %+v", oscStatus(ir), ir)
		}
		if got, want := oscKeys(t, oscRawBody(t, ir)), oscWriteKeys(e, true); !reflect.DeepEqual(got, want) {
			t.Errorf("index response keys = %v, want %v", got, want)
		}

		// Get with routing.
		gr, err := e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "docs", DocumentID: "1", Params: opensearchapi.DocumentGetParams{Routing: "r1"}})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if !gr.Found || gr.Version != 1 || gr.SeqNo != 0 || gr.PrimaryTerm != 1 || gr.Type != wantType || string(gr.Source) != `{"n":1}` {
			t.Errorf("get = %+v", gr)
		}
		var grRaw struct {
			Routing string `json:"_routing"`
		}
		oscDecode(t, oscRawBody(t, gr), &grRaw)
		if grRaw.Routing != "r1" {
			t.Errorf("get _routing = %q", grRaw.Routing)
		}
		_, err = e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "docs", DocumentID: "missing"})
		se := oscStringErr(t, err, http.StatusNotFound)
		var missing map[string]any
		oscDecode(t, []byte(se.Err), &missing)
		if missing["found"] != false || missing["_id"] != "missing" || missing["_index"] != "docs" {
			t.Errorf("get missing = %s", se.Err)
		}
		ex, err := e.cl.Document.Exists(ctx, opensearchapi.DocumentExistsReq{Index: "docs", DocumentID: "1", Params: opensearchapi.DocumentExistsParams{Routing: "r1"}})
		if err != nil || ex.StatusCode != http.StatusOK {
			t.Errorf("doc exists = %v, %v", ex, err)
		}

		// Compare-and-set on seq no and primary term.
		ir = oscIndex(t, e.cl, "docs", "1", `{"n":2}`, opensearchapi.IndexParams{Routing: "r1", IfSeqNo: oscPtr(0), IfPrimaryTerm: oscPtr(1)})
		if ir.Result != "updated" || ir.Version != 2 || ir.SeqNo != 1 || oscStatus(ir) != http.StatusOK {
			t.Errorf("CAS index = %d %+v", oscStatus(ir), ir)
		}
		_, err = e.cl.Index(ctx, opensearchapi.IndexReq{Index: "docs", DocumentID: "1", Body: oscBody(`{"n":3}`),
			Params: opensearchapi.IndexParams{Routing: "r1", IfSeqNo: oscPtr(0), IfPrimaryTerm: oscPtr(1)}})
		se2 := oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		if want := "[1]: version conflict, required seqNo [0], primary term [1]. current document has seqNo [1] and primary term [1]"; se2.Err.Reason != want || se2.Err.Index != "docs" {
			t.Errorf("CAS conflict = %+v, want reason %q", se2.Err, want)
		}

		_, err = e.cl.Index(ctx, opensearchapi.IndexReq{Index: "docs", DocumentID: "ghost", Body: oscBody(`{"n":0}`),
			Params: opensearchapi.IndexParams{IfSeqNo: oscPtr(0), IfPrimaryTerm: oscPtr(1)}})
		se2 = oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		if want := "[ghost]: version conflict, required seqNo [0], primary term [1]. but no document was found"; se2.Err.Reason != want {
			t.Errorf("CAS on a missing doc: reason %q, want %q", se2.Err.Reason, want)
		}

		// _create: 201, then a conflict.
		cr, err := e.cl.Document.Create(ctx, opensearchapi.DocumentCreateReq{Index: "docs", DocumentID: "2", Body: oscBody(`{"n":20}`)})
		if err != nil || cr.Result != "created" || cr.Version != 1 || cr.Type != wantType || oscStatus(cr) != http.StatusCreated {
			t.Fatalf("create = %+v, %v", cr, err)
		}
		_, err = e.cl.Document.Create(ctx, opensearchapi.DocumentCreateReq{Index: "docs", DocumentID: "2", Body: oscBody(`{"n":21}`)})
		se2 = oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		if want := "[2]: version conflict, document already exists (current version [1])"; se2.Err.Reason != want {
			t.Errorf("create conflict reason = %q, want %q", se2.Err.Reason, want)
		}

		// External versions.
		ir = oscIndex(t, e.cl, "docs", "ext", `{"v":10}`, opensearchapi.IndexParams{Version: oscPtr(10), VersionType: "external"})
		if ir.Result != "created" || ir.Version != 10 {
			t.Errorf("external index = %+v", ir)
		}
		_, err = e.cl.Index(ctx, opensearchapi.IndexReq{Index: "docs", DocumentID: "ext", Body: oscBody(`{"v":5}`),
			Params: opensearchapi.IndexParams{Version: oscPtr(10), VersionType: "external"}})
		se2 = oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		if want := "[ext]: version conflict, current version [10] is higher or equal to the one provided [10]"; se2.Err.Reason != want {
			t.Errorf("external conflict reason = %q, want %q", se2.Err.Reason, want)
		}
		ir = oscIndex(t, e.cl, "docs", "ext", `{"v":11}`, opensearchapi.IndexParams{Version: oscPtr(11), VersionType: "external"})
		if ir.Result != "updated" || ir.Version != 11 {
			t.Errorf("external update = %+v", ir)
		}

		// _update with a partial doc, then a noop.
		ur, err := e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "docs", DocumentID: "1", Body: oscBody(`{"doc":{"m":7}}`),
			Params: opensearchapi.UpdateParams{Routing: "r1", Refresh: "true"}})
		if err != nil || ur.Result != "updated" || ur.Version != 3 || ur.SeqNo != 2 || ur.PrimaryTerm != 1 || ur.Type != wantType {
			t.Fatalf("update = %+v, %v", ur, err)
		}
		gr, err = e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "docs", DocumentID: "1", Params: opensearchapi.DocumentGetParams{Routing: "r1"}})
		if err != nil {
			t.Fatalf("get after update: %v", err)
		}
		oscJSONEqual(t, "source after update", gr.Source, `{"n":2,"m":7}`)
		ur, err = e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "docs", DocumentID: "1", Body: oscBody(`{"doc":{"m":7}}`),
			Params: opensearchapi.UpdateParams{Routing: "r1"}})
		if err != nil || ur.Result != "noop" || ur.Version != 3 || ur.Shards.Total != 0 {
			t.Errorf("noop update = %+v, %v", ur, err)
		}
		ur, err = e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "docs", DocumentID: "1", Body: oscBody(`{"doc":{"m":8}}`),
			Params: opensearchapi.UpdateParams{Routing: "r1", IfSeqNo: oscPtr(2), IfPrimaryTerm: oscPtr(1), Source: true}})
		if err != nil || ur.Result != "updated" || ur.SeqNo != 3 || ur.Get == nil || !ur.Get.Found {
			t.Fatalf("update with _source = %+v, %v", ur, err)
		}
		oscJSONEqual(t, "update get._source", ur.Get.Source, `{"n":2,"m":8}`)
		_, err = e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "docs", DocumentID: "nope", Body: oscBody(`{"doc":{"m":1}}`)})
		se2 = oscStructErr(t, err, http.StatusNotFound, "document_missing_exception")
		if se2.Err.Reason != "[nope]: document missing" || se2.Err.Index != "docs" {
			t.Errorf("update missing = %+v", se2.Err)
		}

		// Delete with routing and CAS, then a 404 not_found.
		_, err = e.cl.Document.Delete(ctx, opensearchapi.DocumentDeleteReq{Index: "docs", DocumentID: "1",
			Params: opensearchapi.DocumentDeleteParams{Routing: "r1", IfSeqNo: oscPtr(0), IfPrimaryTerm: oscPtr(1)}})
		oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		dr, err := e.cl.Document.Delete(ctx, opensearchapi.DocumentDeleteReq{Index: "docs", DocumentID: "1",
			Params: opensearchapi.DocumentDeleteParams{Routing: "r1", IfSeqNo: oscPtr(3), IfPrimaryTerm: oscPtr(1), Refresh: "true"}})
		if err != nil || dr.Result != "deleted" || dr.Version != 5 || dr.SeqNo != 4 || dr.Type != wantType || !dr.ForcedRefresh {
			t.Fatalf("delete = %+v, %v", dr, err)
		}
		_, err = e.cl.Document.Delete(ctx, opensearchapi.DocumentDeleteReq{Index: "docs", DocumentID: "1", Params: opensearchapi.DocumentDeleteParams{Routing: "r1"}})
		se = oscStringErr(t, err, http.StatusNotFound)
		var nf opensearchapi.DocumentDeleteResp
		oscDecode(t, []byte(se.Err), &nf)
		if nf.Result != "not_found" || nf.Version != 6 || nf.SeqNo != 5 || nf.Shards.Total != 1 {
			t.Errorf("delete missing = %s", se.Err)
		}
		dr, err = e.cl.Document.Delete(ctx, opensearchapi.DocumentDeleteReq{Index: "docs", DocumentID: "ext",
			Params: opensearchapi.DocumentDeleteParams{Version: oscPtr(20), VersionType: "external"}})
		if err != nil || dr.Result != "deleted" || dr.Version != 20 {
			t.Errorf("external delete = %+v, %v", dr, err)
		}
	})
}

// oscWriteKeys is the key order of a DocWriteResponse.
func oscWriteKeys(e *oscEnv, forced bool) []string {
	k := []string{"_index"}
	if e.es7() {
		k = append(k, "_type")
	}
	k = append(k, "_id", "_version", "result")
	if forced {
		k = append(k, "forced_refresh")
	}
	return append(k, "_shards", "_seq_no", "_primary_term")
}

// oscNDJSON is the header FACTS.md says bulk callers must set.
var oscNDJSON = http.Header{"Content-Type": {"application/x-ndjson"}}

func TestClient_Bulk(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "bulk", 1, 0)
		body := strings.Join([]string{
			`{"index":{"_index":"bulk","_id":"a"}}`, `{"x":1}`,
			`{"create":{"_index":"bulk","_id":"b","routing":"rb"}}`, `{"x":2}`,
			`{"create":{"_index":"bulk","_id":"a"}}`, `{"x":3}`,
			`{"update":{"_index":"bulk","_id":"a"}}`, `{"doc":{"y":1}}`,
			`{"delete":{"_index":"bulk","_id":"b","routing":"rb"}}`,
			`{"index":{"_index":"bulk","_id":"c","if_seq_no":5,"if_primary_term":1}}`, `{"x":4}`,
			`{"index":{"_id":"v","version":7,"version_type":"external"}}`, `{"x":5}`,
		}, "\n") + "\n"
		resp, err := e.cl.Bulk(ctx, opensearchapi.BulkReq{Index: "bulk", Body: oscBody(body), Header: oscNDJSON,
			Params: opensearchapi.BulkParams{Refresh: "true"}})
		if err != nil {
			t.Fatalf("bulk: %v", err)
		}
		if !resp.Errors || len(resp.Items) != 7 {
			t.Fatalf("bulk errors=%v items=%d", resp.Errors, len(resp.Items))
		}
		type want struct {
			op, id, result string
			status         int
			version, seq   int
			errType        string
		}
		wants := []want{
			{"index", "a", "created", 201, 1, 0, ""},
			{"create", "b", "created", 201, 1, 1, ""},
			{"create", "a", "", 409, 0, 0, "version_conflict_engine_exception"},
			{"update", "a", "updated", 200, 2, 2, ""},
			{"delete", "b", "deleted", 200, 2, 3, ""},
			{"index", "c", "", 409, 0, 0, "version_conflict_engine_exception"},
			{"index", "v", "created", 201, 7, 4, ""},
		}
		for i, w := range wants {
			it, ok := resp.Items[i][w.op]
			if !ok || len(resp.Items[i]) != 1 {
				t.Errorf("item %d = %v, want one %q", i, resp.Items[i], w.op)
				continue
			}
			if it.ID != w.id || it.Index != "bulk" || it.Status != w.status {
				t.Errorf("item %d = %+v, want %+v", i, it, w)
			}
			if w.errType != "" {
				if it.Error == nil || it.Error.Type != w.errType || it.Result != "" {
					t.Errorf("item %d error = %+v, want %s", i, it.Error, w.errType)
				}
				continue
			}
			if it.Error != nil || it.Result != w.result || it.Version != w.version || it.SeqNo != w.seq || it.PrimaryTerm != 1 ||
				it.Shards.Total != 1 || it.Shards.Successful != 1 {
				t.Errorf("item %d = %+v, want %+v", i, it, w)
			}
		}
		if got := resp.Items[2]["create"].Error.Reason; got != "[a]: version conflict, document already exists (current version [1])" {
			t.Errorf("create conflict reason = %q", got)
		}
		if got := resp.Items[5]["index"].Error.Reason; got != "[c]: version conflict, required seqNo [5], primary term [1]. but no document was found" {
			t.Errorf("CAS conflict reason = %q", got)
		}
		b := oscRawBody(t, resp)
		wantKeys := []string{"errors", "took", "items"}
		if f.OpenSearch() || e.es7() {
			wantKeys = []string{"took", "errors", "items"}
		}
		if got := oscKeys(t, b); !reflect.DeepEqual(got, wantKeys) {
			t.Errorf("bulk keys = %v, want %v", got, wantKeys)
		}
		var raw struct {
			Items []map[string]json.RawMessage `json:"items"`
		}
		oscDecode(t, b, &raw)
		okKeys := append(oscWriteKeys(e, true), "status")
		if got := oscKeys(t, raw.Items[0]["index"]); !reflect.DeepEqual(got, okKeys) {
			t.Errorf("bulk item keys = %v, want %v", got, okKeys)
		}
		errKeys := []string{"_index", "_id", "status", "error"}
		if e.es7() {
			errKeys = []string{"_index", "_type", "_id", "status", "error"}
		}
		if got := oscKeys(t, raw.Items[2]["create"]); !reflect.DeepEqual(got, errKeys) {
			t.Errorf("bulk failed item keys = %v, want %v", got, errKeys)
		}

		// The typed API's default Content-Type (application/json) is
		// accepted too, as by ES and OpenSearch.
		resp, err = e.cl.Bulk(ctx, opensearchapi.BulkReq{Body: oscBody(`{"index":{"_index":"bulk","_id":"j"}}` + "\n" + `{"x":6}` + "\n")})
		if err != nil || resp.Errors || resp.Items[0]["index"].SeqNo != 5 || resp.Items[0]["index"].Result != "created" {
			t.Errorf("bulk with application/json = %+v, %v", resp, err)
		}
		// A body without the final newline is refused.
		_, err = e.cl.Bulk(ctx, opensearchapi.BulkReq{Index: "bulk", Body: oscBody(`{"delete":{"_id":"j"}}`), Header: oscNDJSON})
		se := oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception")
		if se.Err.Reason != "The bulk request must be terminated by a newline [\\n]" {
			t.Errorf("unterminated bulk = %q", se.Err.Reason)
		}

		gr, err := e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "bulk", DocumentID: "a"})
		if err != nil || gr.Version != 2 || gr.SeqNo != 2 {
			t.Fatalf("get a = %+v, %v", gr, err)
		}
		oscJSONEqual(t, "a after bulk update", gr.Source, `{"x":1,"y":1}`)
		cnt, err := e.cl.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"bulk"}})
		if err != nil || cnt.Count != 2 {
			t.Errorf("count after bulk = %+v, %v (want a, v)", cnt, err)
		}
	})
}

// oscStats is _stats?level=shards, which the typed API cannot ask for.
type oscStats struct {
	Shards struct {
		Total      int `json:"total"`
		Successful int `json:"successful"`
		Failed     int `json:"failed"`
	} `json:"_shards"`
	All struct {
		Primaries oscStatsSections `json:"primaries"`
		Total     oscStatsSections `json:"total"`
	} `json:"_all"`
	Indices map[string]struct {
		UUID      string                       `json:"uuid"`
		Health    string                       `json:"health"`
		Status    string                       `json:"status"`
		Primaries oscStatsSections             `json:"primaries"`
		Total     oscStatsSections             `json:"total"`
		Shards    map[string][]oscStatsShardCp `json:"shards"`
	} `json:"indices"`
}

type oscStatsSections struct {
	Docs *struct {
		Count   int `json:"count"`
		Deleted int `json:"deleted"`
	} `json:"docs"`
	Indexing *struct {
		IndexTotal  int `json:"index_total"`
		DeleteTotal int `json:"delete_total"`
	} `json:"indexing"`
	Store *struct {
		SizeInBytes int `json:"size_in_bytes"`
	} `json:"store"`
}

type oscStatsShardCp struct {
	Routing struct {
		State          string  `json:"state"`
		Primary        bool    `json:"primary"`
		Node           string  `json:"node"`
		RelocatingNode *string `json:"relocating_node"`
	} `json:"routing"`
	oscStatsSections
	Commit struct {
		ID         string `json:"id"`
		Generation int    `json:"generation"`
		NumDocs    int    `json:"num_docs"`
	} `json:"commit"`
	SeqNo struct {
		MaxSeqNo         int64 `json:"max_seq_no"`
		LocalCheckpoint  int64 `json:"local_checkpoint"`
		GlobalCheckpoint int64 `json:"global_checkpoint"`
	} `json:"seq_no"`
	RetentionLeases struct {
		PrimaryTerm int64 `json:"primary_term"`
		Leases      []struct {
			ID             string `json:"id"`
			RetainingSeqNo int64  `json:"retaining_seq_no"`
		} `json:"leases"`
	} `json:"retention_leases"`
	ShardPath struct {
		DataPath string `json:"data_path"`
	} `json:"shard_path"`
	SearchIdle *bool `json:"search_idle"`
}

func TestClient_RefreshAndStats(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 2)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "st", 2, 1)
		if _, err := e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{Params: opensearchapi.ClusterHealthParams{WaitForStatus: "green", Timeout: 10 * time.Second}}); err != nil {
			t.Fatalf("wait green: %v", err)
		}
		var lines []string
		for i := 0; i < 12; i++ {
			lines = append(lines, fmt.Sprintf(`{"index":{"_id":"d%d"}}`, i), fmt.Sprintf(`{"i":%d}`, i))
		}
		lines = append(lines, `{"delete":{"_id":"d0"}}`)
		br, err := e.cl.Bulk(ctx, opensearchapi.BulkReq{Index: "st", Body: oscBody(strings.Join(lines, "\n") + "\n"), Header: oscNDJSON})
		if err != nil || br.Errors {
			t.Fatalf("bulk = %+v, %v", br, err)
		}
		rr, err := e.cl.Indices.Refresh(ctx, &opensearchapi.IndicesRefreshReq{Index: []string{"st"}})
		if err != nil {
			t.Fatalf("refresh: %v", err)
		}
		oscJSONEqual(t, "refresh _shards", rr.Shards, `{"total":4,"successful":4,"failed":0}`)
		rr, err = e.cl.Indices.Refresh(ctx, &opensearchapi.IndicesRefreshReq{})
		if err != nil {
			t.Fatalf("refresh all: %v", err)
		}
		oscJSONEqual(t, "refresh all _shards", rr.Shards, `{"total":4,"successful":4,"failed":0}`)
		_, err = e.cl.Indices.Refresh(ctx, &opensearchapi.IndicesRefreshReq{Index: []string{"nope"}})
		oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")

		get, err := e.cl.Indices.Settings.Get(ctx, &opensearchapi.SettingsGetReq{Indices: []string{"st"}, Settings: []string{"index.uuid"}})
		if err != nil {
			t.Fatalf("get uuid: %v", err)
		}
		var us struct {
			Index struct {
				UUID string `json:"uuid"`
			} `json:"index"`
		}
		oscDecode(t, get.GetIndices()["st"].Settings, &us)

		var st oscStats
		oscRawJSON(t, e.cl, http.MethodGet, "/st/_stats?level=shards", "", http.StatusOK, &st)
		if st.Shards.Total != 4 || st.Shards.Successful != 4 || st.Shards.Failed != 0 {
			t.Errorf("stats _shards = %+v", st.Shards)
		}
		if st.All.Primaries.Docs == nil || st.All.Primaries.Docs.Count != 11 || st.All.Total.Docs.Count != 22 {
			t.Errorf("_all docs = %+v / %+v", st.All.Primaries.Docs, st.All.Total.Docs)
		}
		ix, ok := st.Indices["st"]
		if !ok || ix.UUID != us.Index.UUID || len(ix.Shards) != 2 {
			t.Fatalf("stats indices.st = %+v (uuid want %s)", ix, us.Index.UUID)
		}
		if f.OpenSearch() || e.es7() {
			if ix.Health != "" || ix.Status != "" {
				t.Errorf("health/status = %q/%q on %s", ix.Health, ix.Status, f)
			}
		} else if ix.Health != "green" || ix.Status != "open" {
			t.Errorf("health/status = %q/%q, want green/open", ix.Health, ix.Status)
		}
		if ix.Primaries.Indexing == nil || ix.Primaries.Indexing.IndexTotal != 12 || ix.Primaries.Indexing.DeleteTotal != 1 || ix.Primaries.Docs.Count != 11 {
			t.Errorf("primaries = indexing %+v docs %+v", ix.Primaries.Indexing, ix.Primaries.Docs)
		}
		docs := 0
		for n := 0; n < 2; n++ {
			copies := ix.Shards[fmt.Sprint(n)]
			ss, err := e.c.ShardState("st", n)
			if err != nil {
				t.Fatal(err)
			}
			if len(copies) != 2 || copies[0].Routing.Node == copies[1].Routing.Node {
				t.Fatalf("shard %d copies = %+v", n, copies)
			}
			primaries := 0
			for _, cp := range copies {
				if cp.Routing.State != "STARTED" || cp.Routing.RelocatingNode != nil || cp.Routing.Node == "" {
					t.Errorf("shard %d routing = %+v", n, cp.Routing)
				}
				if cp.SeqNo.MaxSeqNo != ss.NextSeqNo-1 || cp.SeqNo.LocalCheckpoint != ss.NextSeqNo-1 ||
					cp.SeqNo.GlobalCheckpoint > cp.SeqNo.LocalCheckpoint || cp.SeqNo.GlobalCheckpoint < -1 {
					t.Errorf("shard %d seq_no = %+v, next seq %d", n, cp.SeqNo, ss.NextSeqNo)
				}
				if cp.Commit.ID == "" || cp.ShardPath.DataPath == "" || cp.RetentionLeases.PrimaryTerm != 1 || cp.Docs == nil {
					t.Errorf("shard %d copy = %+v", n, cp)
				}
				if (cp.SearchIdle != nil) != (!f.OpenSearch() && !e.es7()) {
					t.Errorf("shard %d search_idle = %v on %s", n, cp.SearchIdle, f)
				}
				if cp.Routing.Primary {
					primaries++
					docs += cp.Docs.Count
					if cp.SeqNo.GlobalCheckpoint != ss.GlobalCheckpoint || len(cp.RetentionLeases.Leases) != 2 {
						t.Errorf("primary %d gcp = %d (state %d), leases %+v", n, cp.SeqNo.GlobalCheckpoint, ss.GlobalCheckpoint, cp.RetentionLeases.Leases)
					}
				}
			}
			if primaries != 1 {
				t.Errorf("shard %d has %d primaries", n, primaries)
			}
		}
		if docs != 11 {
			t.Errorf("primary docs = %d, want 11", docs)
		}

		// A metric filter and level=indices (no per-shard entries).
		var docsOnly struct {
			Indices map[string]struct {
				Primaries map[string]json.RawMessage `json:"primaries"`
				Shards    map[string]json.RawMessage `json:"shards"`
			} `json:"indices"`
		}
		oscRawJSON(t, e.cl, http.MethodGet, "/st/_stats/docs", "", http.StatusOK, &docsOnly)
		if p := docsOnly.Indices["st"].Primaries; len(p) != 1 || p["docs"] == nil || docsOnly.Indices["st"].Shards != nil {
			t.Errorf("_stats/docs = %+v", docsOnly)
		}
		var bad struct {
			Error struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
			Status int `json:"status"`
		}
		oscRawJSON(t, e.cl, http.MethodGet, "/st/_stats?level=bogus", "", http.StatusBadRequest, &bad)
		if bad.Error.Type != "illegal_argument_exception" || bad.Error.Reason != "level parameter must be one of [cluster] or [indices] or [shards] but was [bogus]" {
			t.Errorf("level=bogus = %+v", bad)
		}
		oscRawJSON(t, e.cl, http.MethodGet, "/st/_stats/fieldata", "", http.StatusBadRequest, &bad)
		if bad.Error.Type != "illegal_argument_exception" || !strings.HasPrefix(bad.Error.Reason, "request [/st/_stats/fieldata] contains unrecognized metric: [fieldata]") {
			t.Errorf("_stats/fieldata = %+v", bad)
		}

		// The typed stats call works for what it can express.
		ts, err := e.cl.Indices.Stats(ctx, &opensearchapi.IndicesStatsReq{Indices: []string{"st"}})
		if err != nil {
			t.Fatalf("typed stats: %v", err)
		}
		if ts.Shards.Total != 4 || ts.All.Primaries.Docs.Count != 11 {
			t.Errorf("typed stats = %+v / %+v", ts.Shards, ts.All.Primaries.Docs)
		}
	})
}

// oscSeed bulk-indexes docs d1..dn ({"n":i}) into idx and refreshes.
func oscSeed(tb testing.TB, cl *opensearchapi.Client, idx string, n int) {
	tb.Helper()
	var lines []string
	for i := 1; i <= n; i++ {
		lines = append(lines, fmt.Sprintf(`{"index":{"_id":"d%d"}}`, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	resp, err := cl.Bulk(context.Background(), opensearchapi.BulkReq{Index: idx, Body: oscBody(strings.Join(lines, "\n") + "\n"),
		Header: oscNDJSON, Params: opensearchapi.BulkParams{Refresh: "true"}})
	if err != nil || resp.Errors {
		tb.Fatalf("seed %s: %+v, %v", idx, resp, err)
	}
}

// oscSearch runs a typed search and fails the test on error.
func oscSearch(tb testing.TB, cl *opensearchapi.Client, req *opensearchapi.SearchReq) *opensearchapi.SearchResp {
	tb.Helper()
	resp, err := cl.Search(context.Background(), req)
	if err != nil {
		tb.Fatalf("search %v: %v", req.Indices, err)
	}
	return resp
}

func oscHitIDs(hits []opensearchapi.SearchHit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

func oscSorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

// oscRawHits are the hit fields the typed SearchHit lacks.
type oscRawHits struct {
	PitID string `json:"pit_id"`
	Hits  struct {
		Total *struct {
			Value    int    `json:"value"`
			Relation string `json:"relation"`
		} `json:"total"`
		MaxScore *float64 `json:"max_score"`
		Hits     []struct {
			ID      string   `json:"_id"`
			Version *int64   `json:"_version"`
			Score   *float64 `json:"_score"`
			Type    string   `json:"_type"`
			Sort    []int64  `json:"sort"`
		} `json:"hits"`
	} `json:"hits"`
}

func TestClient_Search(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		oscCreateIndex(t, e.cl, "s", 2, 0)
		oscSeed(t, e.cl, "s", 10)
		all := []string{"d1", "d10", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"}

		// match_all with seq_no_primary_term and version.
		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{
			Indices: []string{"s"},
			Body:    oscBody(`{"query":{"match_all":{}},"size":100,"seq_no_primary_term":true,"version":true}`),
		})
		if r.Hits.Total.Value != 10 || r.Hits.Total.Relation != "eq" || r.Shards.Total != 2 || r.Shards.Successful != 2 ||
			r.Shards.Skipped != 0 || r.Hits.MaxScore == nil || *r.Hits.MaxScore != 1 || r.Timeout {
			t.Errorf("match_all = total %+v shards %+v max_score %v", r.Hits.Total, r.Shards, r.Hits.MaxScore)
		}
		if got := oscSorted(oscHitIDs(r.Hits.Hits)); !reflect.DeepEqual(got, all) {
			t.Errorf("match_all ids = %v", got)
		}
		seq := map[string]int{}
		perShard := map[int]int{}
		for _, h := range r.Hits.Hits {
			if h.Index != "s" || h.SeqNo == nil || h.PrimaryTerm == nil || *h.PrimaryTerm != 1 || h.Score != 1 {
				t.Fatalf("hit = %+v", h)
			}
			var src struct{ N int }
			oscDecode(t, h.Source, &src)
			if fmt.Sprintf("d%d", src.N) != h.ID {
				t.Errorf("hit %s source %s", h.ID, h.Source)
			}
			seq[h.ID] = *h.SeqNo
		}
		for n := 0; n < 2; n++ {
			ss, err := e.c.ShardState("s", n)
			if err != nil {
				t.Fatal(err)
			}
			perShard[n] = ss.Copies[0].VisibleDocs
		}
		if perShard[0]+perShard[1] != 10 {
			t.Fatalf("visible docs per shard = %v", perShard)
		}
		var raw oscRawHits
		oscDecode(t, oscRawBody(t, r), &raw)
		for _, h := range raw.Hits.Hits {
			if h.Version == nil || *h.Version != 1 || (h.Type == "_doc") != e.es7() {
				t.Errorf("raw hit %s: _version %v _type %q", h.ID, h.Version, h.Type)
			}
		}
		if got, want := oscKeys(t, oscRawBody(t, r)), []string{"took", "timed_out", "_shards", "hits"}; !reflect.DeepEqual(got, want) {
			t.Errorf("search keys = %v, want %v", got, want)
		}

		// ids.
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(`{"query":{"ids":{"values":["d3","d7","nope"]}}}`)})
		if got := oscSorted(oscHitIDs(r.Hits.Hits)); !reflect.DeepEqual(got, []string{"d3", "d7"}) || r.Hits.Total.Value != 2 {
			t.Errorf("ids = %v total %d", got, r.Hits.Total.Value)
		}

		// range on _seq_no, and bool.
		wantRange, wantBool := 0, 0
		for id, s := range seq {
			if s >= 2 {
				wantRange++
				if id != "d9" {
					wantBool++
				}
			}
		}
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(`{"query":{"range":{"_seq_no":{"gte":2}}},"size":100,"seq_no_primary_term":true}`)})
		if r.Hits.Total.Value != wantRange || len(r.Hits.Hits) != wantRange {
			t.Errorf("range _seq_no gte 2 = %d hits, want %d", r.Hits.Total.Value, wantRange)
		}
		for _, h := range r.Hits.Hits {
			if *h.SeqNo < 2 {
				t.Errorf("range hit %s seq %d", h.ID, *h.SeqNo)
			}
		}
		boolQ := `{"query":{"bool":{"filter":[{"range":{"_seq_no":{"gte":2}}}],"must_not":[{"ids":{"values":["d9"]}}]}},"size":100}`
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(boolQ)})
		if r.Hits.Total.Value != wantBool || len(r.Hits.Hits) != wantBool {
			t.Errorf("bool = %d hits, want %d", r.Hits.Total.Value, wantBool)
		}
		cnt, err := e.cl.Indices.Count(context.Background(), &opensearchapi.IndicesCountReq{Indices: []string{"s"}, Body: oscBody(`{"query":{"range":{"_seq_no":{"gte":2}}}}`)})
		if err != nil || cnt.Count != wantRange || cnt.Shards.Total != 2 || cnt.Shards.Successful != 2 {
			t.Errorf("count range = %+v, %v; want %d", cnt, err, wantRange)
		}

		// preference=_shards:N reads one shard.
		var union []string
		for n := 0; n < 2; n++ {
			r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(`{"size":100}`),
				Params: opensearchapi.SearchParams{Preference: fmt.Sprintf("_shards:%d", n)}})
			if r.Shards.Total != 1 || r.Hits.Total.Value != perShard[n] || len(r.Hits.Hits) != perShard[n] {
				t.Errorf("_shards:%d = shards %+v, %d hits, want %d", n, r.Shards, len(r.Hits.Hits), perShard[n])
			}
			union = append(union, oscHitIDs(r.Hits.Hits)...)
			cnt, err := e.cl.Indices.Count(context.Background(), &opensearchapi.IndicesCountReq{Indices: []string{"s"},
				Params: opensearchapi.IndicesCountParams{Preference: fmt.Sprintf("_shards:%d", n)}})
			if err != nil || cnt.Count != perShard[n] || cnt.Shards.Total != 1 {
				t.Errorf("count _shards:%d = %+v, %v", n, cnt, err)
			}
		}
		if got := oscSorted(union); !reflect.DeepEqual(got, all) {
			t.Errorf("_shards:0 + _shards:1 = %v, want each doc once", got)
		}

		// track_total_hits false: no hits.total at all.
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(`{"size":1,"track_total_hits":false}`)})
		var untracked oscRawHits
		oscDecode(t, oscRawBody(t, r), &untracked)
		if untracked.Hits.Total != nil || len(r.Hits.Hits) != 1 {
			t.Errorf("track_total_hits false: total %+v, %d hits", untracked.Hits.Total, len(r.Hits.Hits))
		}
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s"}, Body: oscBody(`{"size":0}`),
			Params: opensearchapi.SearchParams{TrackTotalHits: 3}})
		if r.Hits.Total.Value != 3 || r.Hits.Total.Relation != "gte" {
			t.Errorf("track_total_hits=3 total = %+v", r.Hits.Total)
		}

		// Sort on _seq_no and page with search_after, on one shard.
		oscCreateIndex(t, e.cl, "s1", 1, 0)
		oscSeed(t, e.cl, "s1", 10)
		var after []any
		var pages [][]string
		for {
			body := map[string]any{"size": 4, "sort": []any{map[string]any{"_seq_no": "asc"}}, "seq_no_primary_term": true}
			if after != nil {
				body["search_after"] = after
			}
			b, _ := json.Marshal(body)
			r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s1"}, Body: bytes.NewReader(b)})
			if r.Hits.MaxScore != nil || r.Hits.Total.Value != 10 {
				t.Errorf("sorted page: max_score %v total %d", r.Hits.MaxScore, r.Hits.Total.Value)
			}
			if len(r.Hits.Hits) == 0 {
				break
			}
			var page []string
			for _, h := range r.Hits.Hits {
				if len(h.Sort) != 1 || int(h.Sort[0].(float64)) != *h.SeqNo {
					t.Fatalf("hit %s sort %v seq %d", h.ID, h.Sort, *h.SeqNo)
				}
				page = append(page, fmt.Sprintf("%s@%d", h.ID, *h.SeqNo))
			}
			pages = append(pages, page)
			after = r.Hits.Hits[len(r.Hits.Hits)-1].Sort
			if len(pages) > 5 {
				t.Fatal("search_after does not end")
			}
		}
		wantPages := [][]string{{"d1@0", "d2@1", "d3@2", "d4@3"}, {"d5@4", "d6@5", "d7@6", "d8@7"}, {"d9@8", "d10@9"}}
		if !reflect.DeepEqual(pages, wantPages) {
			t.Errorf("search_after pages = %v, want %v", pages, wantPages)
		}
		var desc oscRawHits
		oscDecode(t, oscRawBody(t, oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"s1"},
			Body: oscBody(`{"size":1,"sort":[{"_seq_no":{"order":"desc"}}]}`)})), &desc)
		if len(desc.Hits.Hits) != 1 || desc.Hits.Hits[0].ID != "d10" || desc.Hits.Hits[0].Score != nil || desc.Hits.MaxScore != nil ||
			!reflect.DeepEqual(desc.Hits.Hits[0].Sort, []int64{9}) {
			t.Errorf("sort desc: %+v", desc.Hits)
		}

		// Errors the client surfaces as typed errors.
		_, err = e.cl.Search(context.Background(), &opensearchapi.SearchReq{Indices: []string{"nope"}})
		se := oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")
		if se.Err.Reason != "no such index [nope]" {
			t.Errorf("search missing index = %q", se.Err.Reason)
		}
		_, err = e.cl.Search(context.Background(), &opensearchapi.SearchReq{Indices: []string{"s1"}, Body: oscBody(`{"sort":["_seq_no"],"search_after":[1],"from":2}`)})
		oscStructErr(t, err, http.StatusBadRequest, "action_request_validation_exception")
	})
}

func TestClient_Scroll(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "sc", 2, 0)
		oscSeed(t, e.cl, "sc", 10)
		first := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"sc"}, Body: oscBody(`{"size":4,"sort":["_doc"]}`),
			Params: opensearchapi.SearchParams{Scroll: time.Minute}})
		if first.ScrollID == nil || *first.ScrollID == "" || len(first.Hits.Hits) != 4 || first.Hits.Total.Value != 10 {
			t.Fatalf("scroll open = id %v, %d hits, total %d", first.ScrollID, len(first.Hits.Hits), first.Hits.Total.Value)
		}
		if k := oscKeys(t, oscRawBody(t, first)); k[0] != "_scroll_id" {
			t.Errorf("scroll response keys = %v, want _scroll_id first", k)
		}
		// Documents written after the scroll opened are not in it.
		oscIndex(t, e.cl, "sc", "late", `{"n":99}`, opensearchapi.IndexParams{})
		seen := oscHitIDs(first.Hits.Hits)
		id := *first.ScrollID
		sizes := []int{len(first.Hits.Hits)}
		for i := 0; i < 4; i++ {
			next, err := e.cl.Scroll.Get(ctx, opensearchapi.ScrollGetReq{ScrollID: id, Params: opensearchapi.ScrollGetParams{Scroll: time.Minute}})
			if err != nil {
				t.Fatalf("scroll page %d: %v", i+2, err)
			}
			if next.ScrollID == nil || next.Hits.Total.Value != 10 || next.Shards.Total != 2 {
				t.Fatalf("scroll page %d = id %v total %d shards %+v", i+2, next.ScrollID, next.Hits.Total.Value, next.Shards)
			}
			id = *next.ScrollID
			sizes = append(sizes, len(next.Hits.Hits))
			seen = append(seen, oscHitIDs(next.Hits.Hits)...)
			if len(next.Hits.Hits) == 0 {
				break
			}
		}
		if !reflect.DeepEqual(sizes, []int{4, 4, 2, 0}) {
			t.Errorf("scroll page sizes = %v, want [4 4 2 0]", sizes)
		}
		if got := oscSorted(seen); !reflect.DeepEqual(got, []string{"d1", "d10", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"}) {
			t.Errorf("scrolled ids = %v", got)
		}
		cl, err := e.cl.Scroll.Delete(ctx, opensearchapi.ScrollDeleteReq{ScrollIDs: []string{id}})
		if err != nil || !cl.Succeeded || cl.NumFreed != 2 {
			t.Errorf("clear scroll = %+v, %v (want 2 freed: one per shard)", cl, err)
		}
		_, err = e.cl.Scroll.Delete(ctx, opensearchapi.ScrollDeleteReq{ScrollIDs: []string{id}})
		se := oscStringErr(t, err, http.StatusNotFound)
		oscJSONEqual(t, "clear scroll again", []byte(se.Err), `{"succeeded":true,"num_freed":0}`)
		_, err = e.cl.Scroll.Get(ctx, opensearchapi.ScrollGetReq{ScrollID: id})
		se2 := oscStructErr(t, err, http.StatusNotFound, "search_phase_execution_exception")
		if se2.Err.RootCause[0].Type != "search_context_missing_exception" || se2.Err.Reason != "all shards failed" {
			t.Errorf("scroll after clear = %+v", se2.Err)
		}

		// Clear all scrolls.
		again := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"sc"}, Params: opensearchapi.SearchParams{Scroll: time.Minute, Size: oscPtr(1)}})
		if again.ScrollID == nil || len(again.Hits.Hits) != 1 || again.Hits.Total.Value != 11 {
			t.Fatalf("second scroll = %+v", again.Hits)
		}
		cl, err = e.cl.Scroll.Delete(ctx, opensearchapi.ScrollDeleteReq{ScrollIDs: []string{"_all"}})
		if err != nil || !cl.Succeeded || cl.NumFreed != 2 {
			t.Errorf("clear _all = %+v, %v (want 2 freed: one per shard)", cl, err)
		}
	})
}

func TestClient_PointInTime(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "p", 2, 0)
		oscSeed(t, e.cl, "p", 6)

		var pitID string
		if f.OpenSearch() {
			before := time.Now().UnixMilli()
			cr, err := e.cl.PointInTime.Create(ctx, opensearchapi.PointInTimeCreateReq{Indices: []string{"p"},
				Params: opensearchapi.PointInTimeCreateParams{KeepAlive: time.Minute}})
			if err != nil {
				t.Fatalf("create PIT: %v", err)
			}
			if cr.PitID == "" || cr.Shards.Total != 2 || cr.Shards.Successful != 2 || cr.Shards.Failed != 0 ||
				cr.CreationTime < before || cr.CreationTime > time.Now().UnixMilli() {
				t.Fatalf("create PIT = %+v", cr)
			}
			pitID = cr.PitID
			list, err := e.cl.PointInTime.Get(ctx, nil)
			if err != nil || len(list.Pits) != 1 || list.Pits[0].PitID != pitID || list.Pits[0].KeepAlive != 60000 ||
				int64(list.Pits[0].CreationTime) != cr.CreationTime {
				t.Fatalf("list PITs = %+v, %v", list, err)
			}
			// ES's path does not exist on OpenSearch.
			if st, _, b := oscRaw(t, e.cl, http.MethodPost, "/p/_pit?keep_alive=1m", "", nil); st != http.StatusBadRequest {
				t.Errorf("POST /p/_pit on %s = %d %s", f, st, b)
			}
		} else {
			var open struct {
				ID     string          `json:"id"`
				Shards json.RawMessage `json:"_shards"`
			}
			b := oscRawJSON(t, e.cl, http.MethodPost, "/p/_pit?keep_alive=1m", "", http.StatusOK, &open)
			if open.ID == "" {
				t.Fatalf("open PIT = %s", b)
			}
			if e.es7() {
				if got := oscKeys(t, b); !reflect.DeepEqual(got, []string{"id"}) {
					t.Errorf("ES 7 open PIT keys = %v, want [id]", got)
				}
			} else {
				oscJSONEqual(t, "open PIT _shards", open.Shards, `{"total":2,"successful":2,"skipped":0,"failed":0}`)
			}
			pitID = open.ID
			_, err := e.cl.PointInTime.Create(ctx, opensearchapi.PointInTimeCreateReq{Indices: []string{"p"},
				Params: opensearchapi.PointInTimeCreateParams{KeepAlive: time.Minute}})
			oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception")
		}

		// Writes after the PIT opened are not seen through it.
		oscIndex(t, e.cl, "p", "late", `{"n":7}`, opensearchapi.IndexParams{})
		body := fmt.Sprintf(`{"size":100,"pit":{"id":%q,"keep_alive":"1m"},"sort":[{"_seq_no":"asc"}],"seq_no_primary_term":true}`, pitID)
		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{Body: oscBody(body)})
		if r.Hits.Total.Value != 6 || len(r.Hits.Hits) != 6 || r.Shards.Total != 2 {
			t.Errorf("PIT search = total %d, %d hits, shards %+v", r.Hits.Total.Value, len(r.Hits.Hits), r.Shards)
		}
		var raw oscRawHits
		b := oscRawBody(t, r)
		oscDecode(t, b, &raw)
		if raw.PitID != pitID || oscKeys(t, b)[0] != "pit_id" {
			t.Errorf("PIT search pit_id = %q, keys %v", raw.PitID, oscKeys(t, b))
		}
		wantSort := 2 // ES adds the _shard_doc tiebreaker
		if f.OpenSearch() {
			wantSort = 1
		}
		prev := int64(-1)
		for _, h := range raw.Hits.Hits {
			if len(h.Sort) != wantSort || h.Sort[0] < prev {
				t.Errorf("PIT hit %s sort %v", h.ID, h.Sort)
			}
			prev = h.Sort[0]
		}
		cnt, err := e.cl.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"p"}})
		if err != nil || cnt.Count != 7 {
			t.Errorf("count outside the PIT = %+v, %v", cnt, err)
		}
		_, err = e.cl.Search(ctx, &opensearchapi.SearchReq{Indices: []string{"p"}, Body: oscBody(body)})
		se := oscStructErr(t, err, http.StatusBadRequest, "action_request_validation_exception")
		if !strings.Contains(se.Err.Reason, "[indices] cannot be used with point in time") {
			t.Errorf("PIT search with an index = %q", se.Err.Reason)
		}

		if f.OpenSearch() {
			dr, err := e.cl.PointInTime.Delete(ctx, opensearchapi.PointInTimeDeleteReq{PitID: []string{pitID}})
			if err != nil || len(dr.Pits) != 1 || dr.Pits[0].PitID != pitID || !dr.Pits[0].Successful {
				t.Errorf("delete PIT = %+v, %v", dr, err)
			}
			dr, err = e.cl.PointInTime.Delete(ctx, opensearchapi.PointInTimeDeleteReq{PitID: []string{pitID}})
			// OpenSearch reports a PIT whose contexts are gone as deleted.
			if err != nil || len(dr.Pits) != 1 || dr.Pits[0].PitID != pitID || !dr.Pits[0].Successful {
				t.Errorf("delete PIT again = %+v, %v", dr, err)
			}
			list, err := e.cl.PointInTime.Get(ctx, nil)
			if err != nil || len(list.Pits) != 0 {
				t.Errorf("list PITs after delete = %+v, %v", list, err)
			}
		} else {
			var closed struct {
				Succeeded bool `json:"succeeded"`
				NumFreed  int  `json:"num_freed"`
			}
			oscRawJSON(t, e.cl, http.MethodDelete, "/_pit", fmt.Sprintf(`{"id":%q}`, pitID), http.StatusOK, &closed)
			if !closed.Succeeded || closed.NumFreed != 2 {
				t.Errorf("close PIT = %+v", closed)
			}
			oscRawJSON(t, e.cl, http.MethodDelete, "/_pit", fmt.Sprintf(`{"id":%q}`, pitID), http.StatusNotFound, &closed)
			if closed.NumFreed != 0 {
				t.Errorf("close PIT again = %+v", closed)
			}
		}
		_, err = e.cl.Search(ctx, &opensearchapi.SearchReq{Body: oscBody(body)})
		se = oscStructErr(t, err, http.StatusNotFound, "search_phase_execution_exception")
		if se.Err.RootCause[0].Type != "search_context_missing_exception" {
			t.Errorf("search a closed PIT = %+v", se.Err)
		}
	})
}

// oscAliases decodes a get-alias response entry.
func oscAliases(tb testing.TB, r *opensearchapi.AliasGetResp) map[string]map[string]string {
	tb.Helper()
	out := map[string]map[string]string{}
	for idx, v := range r.GetIndices() {
		out[idx] = map[string]string{}
		for name, raw := range v.Aliases {
			out[idx][name] = string(raw)
		}
	}
	return out
}

func TestClient_AliasesAndRollover(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "app-000001", 1, 0)
		ar, err := e.cl.Aliases(ctx, opensearchapi.AliasesReq{Body: oscBody(`{"actions":[
			{"add":{"index":"app-000001","alias":"app","is_write_index":true}},
			{"add":{"index":"app-000001","alias":"app-read"}}]}`)})
		if err != nil || !ar.Acknowledged {
			t.Fatalf("_aliases = %+v, %v", ar, err)
		}
		ga, err := e.cl.Indices.Alias.Get(ctx, opensearchapi.AliasGetReq{Alias: []string{"app"}})
		if err != nil {
			t.Fatalf("get alias: %v", err)
		}
		if got, want := oscAliases(t, ga), map[string]map[string]string{"app-000001": {"app": `{"is_write_index":true}`}}; !reflect.DeepEqual(got, want) {
			t.Errorf("get alias app = %v, want %v", got, want)
		}
		ga, err = e.cl.Indices.Alias.Get(ctx, opensearchapi.AliasGetReq{Indices: []string{"app-000001"}})
		if err != nil {
			t.Fatalf("get aliases of index: %v", err)
		}
		if got, want := oscAliases(t, ga), map[string]map[string]string{"app-000001": {"app": `{"is_write_index":true}`, "app-read": `{}`}}; !reflect.DeepEqual(got, want) {
			t.Errorf("get aliases of app-000001 = %v, want %v", got, want)
		}
		_, err = e.cl.Indices.Alias.Get(ctx, opensearchapi.AliasGetReq{Alias: []string{"nope"}})
		if se := oscStringErr(t, err, http.StatusNotFound); se.Err != "alias [nope] missing" {
			t.Errorf("get missing alias = %+v", se)
		}
		if ex, err := e.cl.Indices.Alias.Exists(ctx, opensearchapi.AliasExistsReq{Alias: []string{"app"}}); err != nil || ex.StatusCode != http.StatusOK {
			t.Errorf("alias exists = %v, %v", ex, err)
		}
		if ex, _ := e.cl.Indices.Alias.Exists(ctx, opensearchapi.AliasExistsReq{Alias: []string{"nope"}}); ex == nil || ex.StatusCode != http.StatusNotFound {
			t.Errorf("alias exists(nope) = %v", ex)
		}

		// Writes through the alias land in its write index.
		ir := oscIndex(t, e.cl, "app", "1", `{"a":1}`, opensearchapi.IndexParams{})
		if ir.Index != "app-000001" || ir.Result != "created" || ir.SeqNo != 0 {
			t.Errorf("index via alias = %+v", ir)
		}

		// Dry run: conditions not met, nothing changes.
		rr, err := e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "app", Body: oscBody(`{"conditions":{"max_docs":1000}}`),
			Params: opensearchapi.IndicesRolloverParams{DryRun: oscPtr(true)}})
		if err != nil || rr.RolledOver || !rr.DryRun || rr.Acknowledged || rr.OldIndex != "app-000001" || rr.NewIndex != "app-000002" ||
			!reflect.DeepEqual(rr.Conditions, map[string]bool{"[max_docs: 1000]": false}) {
			t.Errorf("rollover dry run = %+v, %v", rr, err)
		}
		rr, err = e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "app", Body: oscBody(`{"conditions":{"max_docs":1}}`)})
		if err != nil || !rr.RolledOver || rr.DryRun || !rr.Acknowledged || !rr.ShardsAcknowledged || rr.OldIndex != "app-000001" ||
			rr.NewIndex != "app-000002" || !reflect.DeepEqual(rr.Conditions, map[string]bool{"[max_docs: 1]": true}) {
			t.Fatalf("rollover = %+v, %v", rr, err)
		}
		wantKeys := []string{"acknowledged", "shards_acknowledged", "old_index", "new_index", "rolled_over", "dry_run", "conditions"}
		if !f.OpenSearch() && !e.es7() {
			wantKeys = []string{"acknowledged", "shards_acknowledged", "old_index", "new_index", "rolled_over", "dry_run", "lazy", "conditions"}
		}
		if got := oscKeys(t, oscRawBody(t, rr)); !reflect.DeepEqual(got, wantKeys) {
			t.Errorf("rollover keys = %v, want %v", got, wantKeys)
		}
		ga, err = e.cl.Indices.Alias.Get(ctx, opensearchapi.AliasGetReq{Alias: []string{"app"}})
		if err != nil {
			t.Fatalf("get alias after rollover: %v", err)
		}
		if got, want := oscAliases(t, ga), map[string]map[string]string{
			"app-000001": {"app": `{"is_write_index":false}`},
			"app-000002": {"app": `{"is_write_index":true}`},
		}; !reflect.DeepEqual(got, want) {
			t.Errorf("alias after rollover = %v, want %v", got, want)
		}
		ir = oscIndex(t, e.cl, "app", "2", `{"a":2}`, opensearchapi.IndexParams{})
		if ir.Index != "app-000002" || ir.SeqNo != 0 {
			t.Errorf("index via alias after rollover = %+v", ir)
		}
		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"app"}})
		if r.Hits.Total.Value != 2 || r.Shards.Total != 2 {
			t.Errorf("search alias = total %d shards %+v", r.Hits.Total.Value, r.Shards)
		}

		// Rollover to an explicit name; rollover errors.
		rr, err = e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "app", Index: "app-next"})
		if err != nil || !rr.RolledOver || rr.OldIndex != "app-000002" || rr.NewIndex != "app-next" || len(rr.Conditions) != 0 {
			t.Errorf("rollover to app-next = %+v, %v", rr, err)
		}
		_, err = e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "nope"})
		status, typ := http.StatusNotFound, "resource_not_found_exception"
		if f.OpenSearch() || e.es7() {
			status, typ = http.StatusBadRequest, "illegal_argument_exception"
		}
		if se := oscStructErr(t, err, status, typ); se.Err.Reason != "rollover target [nope] does not exist" {
			t.Errorf("rollover missing = %q", se.Err.Reason)
		}
		// app-read's one index is its write index; the next name is taken.
		_, err = e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "app-read"})
		if se := oscStructErr(t, err, http.StatusBadRequest, "resource_already_exists_exception"); !strings.HasPrefix(se.Err.Reason, "index [app-000002/") {
			t.Errorf("rollover app-read = %q", se.Err.Reason)
		}
		if _, err := e.cl.Aliases(ctx, opensearchapi.AliasesReq{Body: oscBody(`{"actions":[{"add":{"indices":["app-000002","app-next"],"alias":"multi"}}]}`)}); err != nil {
			t.Fatalf("add multi: %v", err)
		}
		_, err = e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "multi"})
		if se := oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception"); se.Err.Reason != "rollover target [multi] does not point to a write index" {
			t.Errorf("rollover multi = %q", se.Err.Reason)
		}

		// Put, then delete, one alias.
		pr, err := e.cl.Indices.Alias.Put(ctx, opensearchapi.AliasPutReq{Indices: []string{"app-next"}, Alias: "extra"})
		if err != nil || !pr.Acknowledged {
			t.Errorf("put alias = %+v, %v", pr, err)
		}
		gi, err := e.cl.Indices.Get(ctx, opensearchapi.IndicesGetReq{Indices: []string{"app-next"}})
		if err != nil {
			t.Fatalf("get index: %v", err)
		}
		if al := (*gi.IndicesGetRespData)["app-next"].Aliases; len(al) != 3 {
			t.Errorf("app-next aliases = %v, want app, extra and multi", al)
		}
		dr, err := e.cl.Indices.Alias.Delete(ctx, opensearchapi.AliasDeleteReq{Indices: []string{"app-next"}, Alias: []string{"extra"}})
		if err != nil || !dr.Acknowledged {
			t.Errorf("delete alias = %+v, %v", dr, err)
		}
		_, err = e.cl.Indices.Alias.Delete(ctx, opensearchapi.AliasDeleteReq{Indices: []string{"app-next"}, Alias: []string{"extra"}})
		if se := oscStructErr(t, err, http.StatusNotFound, "aliases_not_found_exception"); se.Err.Reason != "aliases [extra] missing" {
			t.Errorf("delete missing alias = %q", se.Err.Reason)
		}

		// _resolve/index sees indices and aliases.
		res, err := e.cl.Indices.Resolve(ctx, opensearchapi.IndicesResolveReq{Indices: []string{"app*"}})
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		type ri struct {
			Name    string
			Aliases []string
			Attrs   []string
		}
		var gotIdx []ri
		for _, x := range res.Indices {
			gotIdx = append(gotIdx, ri{x.Name, x.Aliases, x.Attributes})
		}
		wantIdx := []ri{
			{"app-000001", []string{"app", "app-read"}, []string{"open"}},
			{"app-000002", []string{"app", "multi"}, []string{"open"}},
			{"app-next", []string{"app", "multi"}, []string{"open"}},
		}
		if !reflect.DeepEqual(gotIdx, wantIdx) {
			t.Errorf("resolve indices = %+v, want %+v", gotIdx, wantIdx)
		}
		if len(res.Aliases) != 2 || res.Aliases[0].Name != "app" || len(res.Aliases[0].Indices) != 3 ||
			res.Aliases[1].Name != "app-read" || !reflect.DeepEqual(res.Aliases[1].Indices, []string{"app-000001"}) || len(res.DataStreams) != 0 {
			t.Errorf("resolve aliases = %+v, data streams %+v", res.Aliases, res.DataStreams)
		}
		var modes struct {
			Indices []map[string]any `json:"indices"`
		}
		oscDecode(t, oscRawBody(t, res), &modes)
		if _, has := modes.Indices[0]["mode"]; has != (f == esemu.FlavorES9) {
			t.Errorf("resolve index mode present = %v on %s", has, f)
		}
		// A missing concrete name: 404 from Elasticsearch 8, left out (200,
		// empty lists) by Elasticsearch 7 and OpenSearch, as
		// testdata/golden/*/57-resolve-missing.json recorded.
		missing, err := e.cl.Indices.Resolve(ctx, opensearchapi.IndicesResolveReq{Indices: []string{"nope"}})
		if f == esemu.FlavorES8 || f == esemu.FlavorES9 {
			oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")
		} else if err != nil || len(missing.Indices) != 0 || len(missing.Aliases) != 0 || len(missing.DataStreams) != 0 {
			t.Errorf("resolve nope on %s = %+v, %v; want empty lists", f, missing, err)
		}
	})
}

func TestClient_DataStreams(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		tr, err := e.cl.IndexTemplate.Create(ctx, opensearchapi.IndexTemplateCreateReq{IndexTemplate: "logs-tpl", Body: oscBody(`{
			"index_patterns":["logs-*"],"data_stream":{},"priority":200,
			"template":{"settings":{"number_of_shards":2,"number_of_replicas":0}}}`)})
		if err != nil || !tr.Acknowledged {
			t.Fatalf("put index template = %+v, %v", tr, err)
		}
		tg, err := e.cl.IndexTemplate.Get(ctx, &opensearchapi.IndexTemplateGetReq{IndexTemplates: "logs-tpl"})
		if err != nil || len(tg.IndexTemplates) != 1 {
			t.Fatalf("get index template = %+v, %v", tg, err)
		}
		it := tg.IndexTemplates[0]
		if it.Name != "logs-tpl" || !reflect.DeepEqual(it.IndexTemplate.IndexPatterns, []string{"logs-*"}) || it.IndexTemplate.Priority != 200 {
			t.Errorf("index template = %+v", it)
		}
		wantDS := `{"hidden":false,"allow_custom_routing":false}`
		if f.OpenSearch() {
			wantDS = `{"timestamp_field":{"name":"@timestamp"}}`
		}
		oscJSONEqual(t, "template data_stream", it.IndexTemplate.DataStream, wantDS)
		oscJSONEqual(t, "template settings", it.IndexTemplate.Template.Settings, `{"index":{"number_of_replicas":"0","number_of_shards":"2"}}`)
		if ex, err := e.cl.IndexTemplate.Exists(ctx, opensearchapi.IndexTemplateExistsReq{IndexTemplate: "logs-tpl"}); err != nil || ex.StatusCode != http.StatusOK {
			t.Errorf("template exists = %v, %v", ex, err)
		}

		// The first write creates the data stream.
		ts := `"@timestamp":"2024-05-06T07:08:09Z"`
		ir := oscIndex(t, e.cl, "logs-app", "", `{`+ts+`,"msg":"one"}`, opensearchapi.IndexParams{})
		backing1 := ir.Index
		if !strings.HasPrefix(backing1, ".ds-logs-app-") || !strings.HasSuffix(backing1, "000001") || ir.Result != "created" || ir.ID == "" || ir.Version != 1 {
			t.Fatalf("first write = %+v", ir)
		}
		if want := ".ds-logs-app-000001"; !f.OpenSearch() && backing1 == want || f.OpenSearch() && backing1 != want {
			t.Errorf("backing index = %q on %s", backing1, f)
		}
		cr, err := e.cl.Document.Create(ctx, opensearchapi.DocumentCreateReq{Index: "logs-app", DocumentID: "two",
			Body: oscBody(`{` + ts + `,"msg":"two"}`), Params: opensearchapi.DocumentCreateParams{Refresh: "true"}})
		if err != nil || cr.Index != backing1 || cr.ID != "two" || cr.Result != "created" {
			t.Errorf("create in data stream = %+v, %v", cr, err)
		}
		_, err = e.cl.Index(ctx, opensearchapi.IndexReq{Index: "logs-app", DocumentID: "three", Body: oscBody(`{` + ts + `}`)})
		if se := oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception"); se.Err.Reason != "only write ops with an op_type of create are allowed in data streams" {
			t.Errorf("op_type index into a data stream = %q", se.Err.Reason)
		}
		_, err = e.cl.Index(ctx, opensearchapi.IndexReq{Index: "logs-app", Body: oscBody(`{"msg":"no timestamp"}`)})
		oscStructErr(t, err, http.StatusBadRequest, "document_parsing_exception")
		_, err = e.cl.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "logs-direct"})
		oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception")

		dg, err := e.cl.DataStream.Get(ctx, &opensearchapi.DataStreamGetReq{DataStreams: []string{"logs-app"}})
		if err != nil || len(dg.DataStreams) != 1 {
			t.Fatalf("get data stream = %+v, %v", dg, err)
		}
		ds := dg.DataStreams[0]
		if ds.Name != "logs-app" || ds.TimestampField.Name != "@timestamp" || ds.Generation != 1 || ds.Status != "GREEN" ||
			ds.Template != "logs-tpl" || len(ds.Indices) != 1 || ds.Indices[0].Name != backing1 || ds.Indices[0].UUID == "" {
			t.Errorf("data stream = %+v", ds)
		}

		rr, err := e.cl.Indices.Rollover(ctx, opensearchapi.IndicesRolloverReq{Alias: "logs-app"})
		if err != nil || !rr.RolledOver || rr.OldIndex != backing1 || !strings.HasSuffix(rr.NewIndex, "000002") ||
			!strings.HasPrefix(rr.NewIndex, ".ds-logs-app-") {
			t.Fatalf("rollover data stream = %+v, %v", rr, err)
		}
		ir = oscIndex(t, e.cl, "logs-app", "", `{`+ts+`,"msg":"three"}`, opensearchapi.IndexParams{})
		if ir.Index != rr.NewIndex {
			t.Errorf("write after rollover went to %q, want %q", ir.Index, rr.NewIndex)
		}
		dg, err = e.cl.DataStream.Get(ctx, &opensearchapi.DataStreamGetReq{})
		if err != nil || len(dg.DataStreams) != 1 || dg.DataStreams[0].Generation != 2 || len(dg.DataStreams[0].Indices) != 2 ||
			dg.DataStreams[0].Indices[1].Name != rr.NewIndex {
			t.Errorf("data streams after rollover = %+v, %v", dg, err)
		}
		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"logs-app"}, Body: oscBody(`{"seq_no_primary_term":true}`)})
		if r.Hits.Total.Value != 3 || r.Shards.Total != 4 {
			t.Errorf("search data stream = total %d shards %+v", r.Hits.Total.Value, r.Shards)
		}
		for _, h := range r.Hits.Hits {
			if !strings.HasPrefix(h.Index, ".ds-logs-app-") || h.SeqNo == nil {
				t.Errorf("data stream hit = %+v", h)
			}
		}

		res, err := e.cl.Indices.Resolve(ctx, opensearchapi.IndicesResolveReq{Indices: []string{"logs-*"}})
		if err != nil || len(res.DataStreams) != 1 || len(res.Indices) != 0 {
			t.Fatalf("resolve logs-* = %+v, %v", res, err)
		}
		if d := res.DataStreams[0]; d.Name != "logs-app" || d.TimestampField != "@timestamp" || !reflect.DeepEqual(d.BackingIndices, []string{backing1, rr.NewIndex}) {
			t.Errorf("resolved data stream = %+v", d)
		}
		res, err = e.cl.Indices.Resolve(ctx, opensearchapi.IndicesResolveReq{Indices: []string{".ds-logs-app-*"},
			Params: opensearchapi.IndicesResolveParams{ExpandWildcards: "all"}})
		if err != nil || len(res.Indices) != 2 || !reflect.DeepEqual(res.Indices[0].Attributes, []string{"hidden", "open"}) {
			t.Errorf("resolve backing indices = %+v, %v", res, err)
		}
		var dsOf struct {
			Indices []struct {
				DataStream string `json:"data_stream"`
			} `json:"indices"`
		}
		oscDecode(t, oscRawBody(t, res), &dsOf)
		if len(dsOf.Indices) != 2 || dsOf.Indices[0].DataStream != "logs-app" {
			t.Errorf("resolve backing index data_stream = %+v", dsOf)
		}

		_, err = e.cl.IndexTemplate.Delete(ctx, opensearchapi.IndexTemplateDeleteReq{IndexTemplate: "logs-tpl"})
		oscStructErr(t, err, http.StatusBadRequest, "illegal_argument_exception")

		dc, err := e.cl.DataStream.Create(ctx, opensearchapi.DataStreamCreateReq{DataStream: "logs-explicit"})
		if err != nil || !dc.Acknowledged {
			t.Errorf("create data stream = %+v, %v", dc, err)
		}
		_, err = e.cl.DataStream.Create(ctx, opensearchapi.DataStreamCreateReq{DataStream: "logs-explicit"})
		oscStructErr(t, err, http.StatusBadRequest, "resource_already_exists_exception")

		for _, name := range []string{"logs-app", "logs-explicit"} {
			dd, err := e.cl.DataStream.Delete(ctx, opensearchapi.DataStreamDeleteReq{DataStream: name})
			if err != nil || !dd.Acknowledged {
				t.Errorf("delete data stream %s = %+v, %v", name, dd, err)
			}
		}
		_, err = e.cl.DataStream.Get(ctx, &opensearchapi.DataStreamGetReq{DataStreams: []string{"logs-app"}})
		oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")
		if ex, _ := e.cl.Indices.Exists(ctx, opensearchapi.IndicesExistsReq{Indices: []string{backing1}}); ex == nil || ex.StatusCode != http.StatusNotFound {
			t.Errorf("backing index after delete = %v", ex)
		}
		td, err := e.cl.IndexTemplate.Delete(ctx, opensearchapi.IndexTemplateDeleteReq{IndexTemplate: "logs-tpl"})
		if err != nil || !td.Acknowledged {
			t.Errorf("delete template = %+v, %v", td, err)
		}
		if ex, _ := e.cl.IndexTemplate.Exists(ctx, opensearchapi.IndexTemplateExistsReq{IndexTemplate: "logs-tpl"}); ex == nil || ex.StatusCode != http.StatusNotFound {
			t.Errorf("template after delete = %v", ex)
		}
	})
}

func TestClient_Security(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		ctx := context.Background()
		c := oscCluster(t, esemu.Config{Flavor: f, TLS: true, Users: map[string]string{"elastic": "s3cret"}, APIKeys: map[string]string{"kid": "kval"}})
		if !strings.HasPrefix(c.URL(), "https://") || len(c.CACertPEM()) == 0 {
			t.Fatalf("TLS cluster URL %s, CA %d bytes", c.URL(), len(c.CACertPEM()))
		}

		t.Run("TLS with the CA and the right password", func(t *testing.T) {
			cl := oscClient(t, c, opensearch.Config{CACert: c.CACertPEM(), Username: "elastic", Password: "s3cret"})
			info, err := cl.Info(ctx, nil)
			if err != nil || info.Version.Number != f.Version() {
				t.Fatalf("info = %+v, %v", info, err)
			}
			ir, err := cl.Index(ctx, opensearchapi.IndexReq{Index: "sec", DocumentID: "1", Body: oscBody(`{"a":1}`)})
			if err != nil || ir.Result != "created" {
				t.Errorf("index over TLS = %+v, %v", ir, err)
			}
		})
		t.Run("TLS without the CA", func(t *testing.T) {
			cl := oscClient(t, c, opensearch.Config{Username: "elastic", Password: "s3cret"})
			if _, err := cl.Info(ctx, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("info without the CA: %v, want a certificate error", err)
			}
		})
		t.Run("wrong password", func(t *testing.T) {
			cl := oscClient(t, c, opensearch.Config{CACert: c.CACertPEM(), Username: "elastic", Password: "wrong"})
			_, err := cl.Info(ctx, nil)
			st, hdr, body := oscRaw(t, cl, http.MethodGet, "/_cluster/health", "", nil)
			if st != http.StatusUnauthorized {
				t.Fatalf("health with a wrong password = %d %s", st, body)
			}
			if f.OpenSearch() {
				if !errors.Is(err, opensearch.ErrJSONUnmarshalBody) {
					t.Errorf("info error = %v, want the client's plain-body error", err)
				}
				if string(body) != "Unauthorized" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") ||
					hdr.Get("WWW-Authenticate") != `Basic realm="OpenSearch Security"` {
					t.Errorf("OpenSearch 401 = %q, headers %v", body, hdr)
				}
				return
			}
			se := oscStructErr(t, err, http.StatusUnauthorized, "security_exception")
			if se.Err.Reason != "unable to authenticate user [elastic] for REST request [/]" {
				t.Errorf("401 reason = %q", se.Err.Reason)
			}
			if got := hdr.Values("WWW-Authenticate"); len(got) != 3 || got[0] != `Basic realm="security", charset="UTF-8"` {
				t.Errorf("WWW-Authenticate = %q", got)
			}
			var e401 struct {
				Error struct {
					Header map[string][]string `json:"header"`
				} `json:"error"`
				Status int `json:"status"`
			}
			oscDecode(t, body, &e401)
			if e401.Status != 401 || len(e401.Error.Header["WWW-Authenticate"]) != 3 {
				t.Errorf("401 body = %s", body)
			}
		})
		t.Run("no credentials", func(t *testing.T) {
			cl := oscClient(t, c, opensearch.Config{CACert: c.CACertPEM()})
			_, err := cl.Cluster.Health(ctx, nil)
			if f.OpenSearch() {
				if !errors.Is(err, opensearch.ErrJSONUnmarshalBody) {
					t.Errorf("health error = %v", err)
				}
				return
			}
			se := oscStructErr(t, err, http.StatusUnauthorized, "security_exception")
			if se.Err.Reason != "missing authentication credentials for REST request [/_cluster/health]" {
				t.Errorf("401 reason = %q", se.Err.Reason)
			}
		})
		t.Run("API key", func(t *testing.T) {
			key := func(id, k string) http.Header {
				return http.Header{"Authorization": {"ApiKey " + base64.StdEncoding.EncodeToString([]byte(id+":"+k))}}
			}
			cl := oscClient(t, c, opensearch.Config{CACert: c.CACertPEM(), Header: key("kid", "kval")})
			info, err := cl.Info(ctx, nil)
			if f.OpenSearch() {
				// OpenSearch has no ES API keys: the header is not credentials.
				if !errors.Is(err, opensearch.ErrJSONUnmarshalBody) {
					t.Errorf("info with an API key on %s = %+v, %v", f, info, err)
				}
				return
			}
			if err != nil || info.Version.Number != f.Version() {
				t.Fatalf("info with an API key = %+v, %v", info, err)
			}
			bad := oscClient(t, c, opensearch.Config{CACert: c.CACertPEM(), Header: key("kid", "nope")})
			_, err = bad.Info(ctx, nil)
			se := oscStructErr(t, err, http.StatusUnauthorized, "security_exception")
			if se.Err.Reason != "unable to authenticate with provided credentials and anonymous access is not allowed for this request" {
				t.Errorf("bad API key reason = %q", se.Err.Reason)
			}
		})
		t.Run("plain HTTP to the TLS port", func(t *testing.T) {
			// ES/OpenSearch (Netty) log "received plaintext http traffic on
			// an https channel, closing connection" and close it: no answer
			// at all (net/http would answer 400 "Client sent an HTTP request
			// to an HTTPS server").
			conn, err := net.Dial("tcp", strings.TrimPrefix(c.URL(), "https://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(conn)
			if len(got) != 0 || err != nil {
				t.Errorf("plaintext request answered %q (%v), want the connection closed without an answer", got, err)
			}
		})
	})
}

// TestClient_SourceBytesKept: a stored _source comes back byte for byte:
// '<', '>', '&', U+2028, escapes, big integers and 1.0 as they were sent
// (Jackson does not HTML-escape; json.Marshal would).
func TestClient_SourceBytesKept(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		c := oscCluster(t, esemu.Config{Flavor: f})
		cl := oscClient(t, c, opensearch.Config{})
		oscCreateIndex(t, cl, "raw", 1, 0)
		src := `{"html":"<b>&amp;</b>","ls":"a b","esc":"\u00e9\n","big":12345678901234567890,"f":1.0}`
		oscIndex(t, cl, "raw", "1", src, opensearchapi.IndexParams{Refresh: "true"})
		for _, path := range []string{"/raw/_doc/1", "/raw/_search"} {
			_, _, body := oscRaw(t, cl, http.MethodGet, path, "", nil)
			if !strings.Contains(string(body), `"_source":`+src) {
				t.Errorf("GET %s = %s, want the source %s byte for byte", path, body, src)
			}
		}
	})
}

func TestClient_CompressedRequests(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		ctx := context.Background()
		c := oscCluster(t, esemu.Config{Flavor: f})
		cl := oscClient(t, c, opensearch.Config{CompressRequestBody: true})
		oscCreateIndex(t, cl, "gz", 1, 0)
		ir := oscIndex(t, cl, "gz", "1", `{"a":1}`, opensearchapi.IndexParams{})
		if ir.Result != "created" || ir.SeqNo != 0 {
			t.Errorf("gzip index = %+v", ir)
		}
		br, err := cl.Bulk(ctx, opensearchapi.BulkReq{Index: "gz", Header: oscNDJSON, Params: opensearchapi.BulkParams{Refresh: "true"},
			Body: oscBody(`{"index":{"_id":"2"}}` + "\n" + `{"a":2}` + "\n")})
		if err != nil || br.Errors || br.Items[0]["index"].SeqNo != 1 {
			t.Errorf("gzip bulk = %+v, %v", br, err)
		}
		r := oscSearch(t, cl, &opensearchapi.SearchReq{Indices: []string{"gz"}, Body: oscBody(`{"query":{"ids":{"values":["2"]}}}`)})
		if r.Hits.Total.Value != 1 || r.Hits.Hits[0].ID != "2" {
			t.Errorf("gzip search = %+v", r.Hits)
		}
	})
}

// TestClient_URLParams drives the parameters the typed API sends in the URL
// rather than the body.
func TestClient_URLParams(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		oscCreateIndex(t, e.cl, "u", 3, 0)
		oscIndex(t, e.cl, "u", "r", `{"a":1,"b":{"c":2,"d":3}}`, opensearchapi.IndexParams{Routing: "k", OpType: "create"})
		_, err := e.cl.Index(ctx, opensearchapi.IndexReq{Index: "u", DocumentID: "r", Body: oscBody(`{}`), Params: opensearchapi.IndexParams{Routing: "k", OpType: "create"}})
		oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")
		// "q" routes to another shard than "k" under both routing functions
		// (routing_num_shards, and ES 9.4+'s hash mod shards): the routed
		// search below must not see it.
		ir, err := e.cl.Index(ctx, opensearchapi.IndexReq{Index: "u", DocumentID: "q", Body: oscBody(`{"a":9}`), Params: opensearchapi.IndexParams{Refresh: "wait_for"}})
		if err != nil || ir.Result != "created" || ir.ForcedRefresh {
			t.Errorf("refresh=wait_for = %+v, %v", ir, err)
		}

		gr, err := e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "u", DocumentID: "r", Params: opensearchapi.DocumentGetParams{Routing: "k", Source: false}})
		if err != nil || !gr.Found || gr.Source != nil {
			t.Errorf("get _source=false = %+v, %v", gr, err)
		}
		gr, err = e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "u", DocumentID: "r", Params: opensearchapi.DocumentGetParams{Routing: "k", SourceIncludes: []string{"b.c"}}})
		if err != nil {
			t.Fatalf("get _source_includes: %v", err)
		}
		oscJSONEqual(t, "get _source_includes=b.c", gr.Source, `{"b":{"c":2}}`)
		sr, err := e.cl.Document.Source(ctx, opensearchapi.DocumentSourceReq{Index: "u", DocumentID: "r", Params: opensearchapi.DocumentSourceParams{Routing: "k"}})
		if err != nil {
			t.Fatalf("get _source: %v", err)
		}
		oscJSONEqual(t, "GET _source", sr.Source, `{"a":1,"b":{"c":2,"d":3}}`)
		_, err = e.cl.Document.Get(ctx, opensearchapi.DocumentGetReq{Index: "u", DocumentID: "r", Params: opensearchapi.DocumentGetParams{Routing: "k", Version: oscPtr(7)}})
		oscStructErr(t, err, http.StatusConflict, "version_conflict_engine_exception")

		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"u"}, Params: opensearchapi.SearchParams{
			Routing: []string{"k"}, SeqNoPrimaryTerm: oscPtr(true), Version: oscPtr(true), Size: oscPtr(5), From: oscPtr(0),
			SourceExcludes: []string{"b"},
		}})
		if r.Shards.Total != 1 || len(r.Hits.Hits) != 1 || r.Hits.Hits[0].ID != "r" || r.Hits.Hits[0].Routing != "k" ||
			r.Hits.Hits[0].SeqNo == nil || string(r.Hits.Hits[0].Source) != `{"a":1}` {
			t.Errorf("search routing=k = shards %+v hits %+v", r.Shards, r.Hits.Hits)
		}
		var raw oscRawHits
		oscDecode(t, oscRawBody(t, r), &raw)
		if len(raw.Hits.Hits) != 1 || raw.Hits.Hits[0].Version == nil || *raw.Hits.Hits[0].Version != 1 {
			t.Errorf("search version=true = %+v", raw.Hits.Hits)
		}
		cnt, err := e.cl.Indices.Count(ctx, &opensearchapi.IndicesCountReq{Indices: []string{"u"}, Params: opensearchapi.IndicesCountParams{Routing: []string{"k"}}})
		if err != nil || cnt.Count != 1 || cnt.Shards.Total != 1 {
			t.Errorf("count routing=k = %+v, %v", cnt, err)
		}

		ur, err := e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "u", DocumentID: "r", Body: oscBody(`{"doc":{"a":2}}`),
			Params: opensearchapi.UpdateParams{Routing: "k", RetryOnConflict: oscPtr(3), SourceIncludes: []string{"a"}}})
		if err != nil || ur.Result != "updated" || ur.Get == nil {
			t.Fatalf("update with retry_on_conflict = %+v, %v", ur, err)
		}
		oscJSONEqual(t, "update get._source_includes=a", ur.Get.Source, `{"a":2}`)
		ur, err = e.cl.Update(ctx, opensearchapi.UpdateReq{Index: "u", DocumentID: "new", Body: oscBody(`{"doc":{"a":5},"doc_as_upsert":true}`)})
		if err != nil || ur.Result != "created" || ur.Version != 1 || oscStatus(ur) != http.StatusCreated {
			t.Errorf("doc_as_upsert = %d %+v, %v", oscStatus(ur), ur, err)
		}

		// An unknown parameter is refused loudly, as ES does.
		st, _, b := oscRaw(t, e.cl, http.MethodGet, "/u/_search?sizee=1", "", nil)
		if st != http.StatusBadRequest || !strings.Contains(string(b), "contains unrecognized parameter: [sizee]") {
			t.Errorf("unknown parameter = %d %s", st, b)
		}
	})
}

// TestClient_ClusterWideReads drives the endpoints without an index in the
// path (or with every index): GET /_settings, /_alias, /_index_template,
// /_count, /_stats, /_cluster/health/{index}, /{index}/_mapping, and the
// alternative alias paths.
func TestClient_ClusterWideReads(t *testing.T) {
	oscFlavors(t, func(t *testing.T, f esemu.Flavor) {
		e := oscStart(t, f, 1)
		ctx := context.Background()
		mr, err := e.cl.Indices.Create(ctx, opensearchapi.IndicesCreateReq{Index: "m1", Body: oscBody(`{
			"settings":{"number_of_shards":1,"number_of_replicas":0},
			"mappings":{"properties":{"n":{"type":"long"}}},
			"aliases":{"m":{}}}`)})
		if err != nil || !mr.Acknowledged {
			t.Fatalf("create m1 = %+v, %v", mr, err)
		}
		oscCreateIndex(t, e.cl, "m2", 2, 0)
		// Auto-generated ids: POST /{index}/_doc.
		ir := oscIndex(t, e.cl, "m2", "", `{"n":1}`, opensearchapi.IndexParams{})
		if ir.Result != "created" || len(ir.ID) < 16 || ir.Version != 1 || oscStatus(ir) != http.StatusCreated {
			t.Errorf("auto-id index = %d %+v", oscStatus(ir), ir)
		}
		oscIndex(t, e.cl, "m1", "x", `{"n":2}`, opensearchapi.IndexParams{})

		mg, err := e.cl.Indices.Mapping.Get(ctx, &opensearchapi.MappingGetReq{Indices: []string{"m1", "m2"}})
		if err != nil || len(mg.GetIndices()) != 2 {
			t.Fatalf("get mapping = %+v, %v", mg, err)
		}
		oscJSONEqual(t, "m1 mappings", mg.GetIndices()["m1"].Mappings, `{"properties":{"n":{"type":"long"}}}`)
		oscJSONEqual(t, "m2 mappings", mg.GetIndices()["m2"].Mappings, `{}`)

		sg, err := e.cl.Indices.Settings.Get(ctx, nil)
		if err != nil || len(sg.GetIndices()) != 2 {
			t.Errorf("GET /_settings = %v, %v", sg.GetIndices(), err)
		}

		ga, err := e.cl.Indices.Alias.Get(ctx, opensearchapi.AliasGetReq{})
		if err != nil {
			t.Fatalf("GET /_alias: %v", err)
		}
		if got, want := oscAliases(t, ga), map[string]map[string]string{"m1": {"m": "{}"}, "m2": {}}; !reflect.DeepEqual(got, want) {
			t.Errorf("GET /_alias = %v, want %v", got, want)
		}
		// The plural path form, then the alias through it.
		oscRawJSON(t, e.cl, http.MethodPut, "/m2/_aliases/m", "", http.StatusOK, nil)
		r := oscSearch(t, e.cl, &opensearchapi.SearchReq{Indices: []string{"m"}})
		if r.Hits.Total.Value != 2 || r.Shards.Total != 3 {
			t.Errorf("search alias m = total %d shards %+v", r.Hits.Total.Value, r.Shards)
		}
		oscRawJSON(t, e.cl, http.MethodDelete, "/m2/_aliases/m", "", http.StatusOK, nil)

		cnt, err := e.cl.Indices.Count(ctx, nil)
		if err != nil || cnt.Count != 2 || cnt.Shards.Total != 3 {
			t.Errorf("GET /_count = %+v, %v", cnt, err)
		}
		r = oscSearch(t, e.cl, &opensearchapi.SearchReq{Body: oscBody(`{"query":{"ids":{"values":["x"]}}}`)})
		if r.Hits.Total.Value != 1 || r.Hits.Hits[0].Index != "m1" || r.Shards.Total != 3 {
			t.Errorf("GET /_search = %+v", r.Hits)
		}
		st, err := e.cl.Indices.Stats(ctx, nil)
		if err != nil || st.Shards.Total != 3 || len(st.Indices) != 2 || st.Indices["m1"].Primaries.Docs.Count != 1 {
			t.Errorf("GET /_stats = %+v, %v", st, err)
		}

		hr, err := e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{Indices: []string{"m2"}})
		if err != nil || hr.ActivePrimaryShards != 2 || hr.Status != "green" {
			t.Errorf("GET /_cluster/health/m2 = %+v, %v", hr, err)
		}
		_, err = e.cl.Cluster.Health(ctx, &opensearchapi.ClusterHealthReq{Indices: []string{"nope"}})
		oscStructErr(t, err, http.StatusNotFound, "index_not_found_exception")

		for _, name := range []string{"t1", "t2"} {
			if _, err := e.cl.IndexTemplate.Create(ctx, opensearchapi.IndexTemplateCreateReq{IndexTemplate: name,
				Body: oscBody(fmt.Sprintf(`{"index_patterns":["%s-*"],"priority":1}`, name))}); err != nil {
				t.Fatalf("put template %s: %v", name, err)
			}
		}
		tg, err := e.cl.IndexTemplate.Get(ctx, nil)
		if err != nil || len(tg.IndexTemplates) != 2 || tg.IndexTemplates[0].Name != "t1" || tg.IndexTemplates[1].Name != "t2" ||
			tg.IndexTemplates[0].IndexTemplate.Priority != 1 || tg.IndexTemplates[0].IndexTemplate.DataStream != nil {
			t.Errorf("GET /_index_template = %+v, %v", tg, err)
		}
		_, err = e.cl.IndexTemplate.Get(ctx, &opensearchapi.IndexTemplateGetReq{IndexTemplates: "nope"})
		oscStructErr(t, err, http.StatusNotFound, "resource_not_found_exception")
		// An index created from a (non data stream) template takes its settings.
		oscIndex(t, e.cl, "t1-a", "1", `{}`, opensearchapi.IndexParams{})
		gi, err := e.cl.Indices.Get(ctx, opensearchapi.IndicesGetReq{Indices: []string{"t1-a"}})
		if err != nil {
			t.Fatalf("get t1-a: %v", err)
		}
		if (*gi.IndicesGetRespData)["t1-a"].Settings == nil {
			t.Errorf("t1-a settings missing")
		}

		if f.OpenSearch() {
			for i := 0; i < 2; i++ {
				if _, err := e.cl.PointInTime.Create(ctx, opensearchapi.PointInTimeCreateReq{Indices: []string{"m1"},
					Params: opensearchapi.PointInTimeCreateParams{KeepAlive: time.Hour}}); err != nil {
					t.Fatalf("create PIT: %v", err)
				}
			}
			var all opensearchapi.PointInTimeDeleteResp
			oscRawJSON(t, e.cl, http.MethodDelete, "/_search/point_in_time/_all", "", http.StatusOK, &all)
			if len(all.Pits) != 2 || !all.Pits[0].Successful || !all.Pits[1].Successful {
				t.Errorf("DELETE /_search/point_in_time/_all = %+v", all)
			}
			list, err := e.cl.PointInTime.Get(ctx, nil)
			if err != nil || len(list.Pits) != 0 {
				t.Errorf("PITs after delete all = %+v, %v", list, err)
			}
		}
	})
}
