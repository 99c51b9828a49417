package esemu_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// csDo sends a request to the emulator and returns the status and body.
func csDo(tb testing.TB, c *esemu.Cluster, method, path, body string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, c.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestClusterState_Metadata: GET /_cluster/state/metadata/<index> gives
// routing_num_shards as a real node does (Elasticsearch 9.5.3 answered 768
// for 3 shards, 6 for number_of_routing_shards 6, and {} for a missing
// index), settings, and mappings under "_doc"; other metrics are refused.
func TestClusterState_Metadata(t *testing.T) {
	for _, f := range []esemu.Flavor{esemu.FlavorES7, esemu.FlavorES8, esemu.FlavorES9, esemu.FlavorOpenSearch2, esemu.FlavorOpenSearch3} {
		t.Run(string(f), func(t *testing.T) {
			c, err := esemu.New(esemu.Config{Flavor: f})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			csDo(t, c, "PUT", "/t3", `{"settings":{"number_of_shards":3,"number_of_replicas":0},"mappings":{"properties":{"n":{"type":"long"}}}}`)
			csDo(t, c, "PUT", "/t4", `{"settings":{"number_of_shards":3,"number_of_routing_shards":6,"number_of_replicas":0}}`)
			var got struct {
				Metadata struct {
					Indices map[string]struct {
						RoutingNumShards int                        `json:"routing_num_shards"`
						State            string                     `json:"state"`
						Settings         map[string]string          `json:"settings"`
						Mappings         map[string]json.RawMessage `json:"mappings"`
					} `json:"indices"`
				} `json:"metadata"`
			}
			st, b := csDo(t, c, "GET", "/_cluster/state/metadata/t3,t4,nope?flat_settings=true", "")
			if st != 200 {
				t.Fatalf("HTTP %d: %s", st, b)
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			t3, t4 := got.Metadata.Indices["t3"], got.Metadata.Indices["t4"]
			if len(got.Metadata.Indices) != 2 || t3.RoutingNumShards != 768 || t4.RoutingNumShards != 6 || t3.State != "open" ||
				t3.Settings["index.number_of_shards"] != "3" || t3.Settings["index.version.created"] == "" ||
				string(t3.Mappings["_doc"]) != `{"properties":{"n":{"type":"long"}}}` || len(t4.Mappings) != 0 {
				t.Fatalf("cluster state: %s", b)
			}
			if st, b := csDo(t, c, "GET", "/_cluster/state/metadata/nope?filter_path=metadata.indices.*.routing_num_shards", ""); st != 200 || string(b) != `{}` {
				t.Errorf("missing index: HTTP %d %s; want 200 {}", st, b)
			}
			// A backing index brings its whole data stream, as
			// TransportClusterStateAction answers (seen on 8.19 and 9.5).
			csDo(t, c, "PUT", "/_index_template/m", `{"index_patterns":["m-*"],"data_stream":{}}`)
			if st, b := csDo(t, c, "PUT", "/_data_stream/m-a", ""); st != 200 {
				t.Fatalf("create data stream: HTTP %d %s", st, b)
			}
			if st, b := csDo(t, c, "POST", "/m-a/_rollover", ""); st != 200 {
				t.Fatalf("rollover: HTTP %d %s", st, b)
			}
			var ds struct {
				Metadata struct {
					Indices map[string]json.RawMessage `json:"indices"`
				} `json:"metadata"`
			}
			_, b = csDo(t, c, "GET", "/_data_stream/m-a", "")
			var backing struct {
				DataStreams []struct {
					Indices []struct {
						Name string `json:"index_name"`
					} `json:"indices"`
				} `json:"data_streams"`
			}
			if err := json.Unmarshal(b, &backing); err != nil || len(backing.DataStreams) != 1 || len(backing.DataStreams[0].Indices) != 2 {
				t.Fatalf("data stream m-a: %s (%v); want 2 backing indices", b, err)
			}
			first := backing.DataStreams[0].Indices[0].Name
			st, b = csDo(t, c, "GET", "/_cluster/state/metadata/"+first+"?filter_path=metadata.indices.*.state", "")
			if err := json.Unmarshal(b, &ds); st != 200 || err != nil || len(ds.Metadata.Indices) != 2 {
				t.Errorf("cluster state of backing index %s: HTTP %d %s; want both backing indices", first, st, b)
			}
			if st, b := csDo(t, c, "GET", "/_cluster/state/routing_table/t3", ""); st != 400 || !strings.Contains(string(b), "does not model") {
				t.Errorf("routing_table: HTTP %d %s; want a 400 saying it is not modeled", st, b)
			}
		})
	}
}

// TestRouting_ModuloOnES94: a real Elasticsearch 9.5.3 node put the
// documents routed a…h of a 3-shard index on the same shards whether its
// routing_num_shards was 768 or 6 (c, d, e, h on 0; f on 1; a, b, g on 2):
// indices created on 9.4+ route by floorMod(hash, number_of_shards). The
// emulator's ES 9 flavor does the same; its ES 8 flavor uses the routing
// shards, so 768 and 6 place some of them differently.
func TestRouting_ModuloOnES94(t *testing.T) {
	place := func(t *testing.T, f esemu.Flavor, routingShards int) map[string]int {
		c, err := esemu.New(esemu.Config{Flavor: f})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		csDo(t, c, "PUT", "/t", fmt.Sprintf(`{"settings":{"number_of_shards":3,"number_of_routing_shards":%d,"number_of_replicas":0}}`, routingShards))
		out := map[string]int{}
		for _, r := range "abcdefgh" {
			csDo(t, c, "PUT", fmt.Sprintf("/t/_doc/x%c?routing=%c", r, r), `{}`)
		}
		for shard := range 3 {
			ops, err := c.History("t", shard, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range ops {
				out[o.Routing] = shard
			}
		}
		return out
	}
	want := map[string]int{"a": 2, "b": 2, "c": 0, "d": 0, "e": 0, "f": 1, "g": 2, "h": 0}
	for _, rs := range []int{768, 6} {
		if got := place(t, esemu.FlavorES9, rs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ES 9, %d routing shards: %v; the real node: %v", rs, got, want)
		}
	}
	if a, b := place(t, esemu.FlavorES8, 768), place(t, esemu.FlavorES8, 6); fmt.Sprint(a) == fmt.Sprint(b) {
		t.Errorf("ES 8: 768 and 6 routing shards place a…h alike (%v): the routing shards should matter before 9.4", a)
	}
}
