package es

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// The answers of a real Elasticsearch 9.5.3 node (tests/engines) to the
// requests of IndexLayout, for an index created with 3 shards.
const (
	es9Root  = `{"name":"n0","cluster_name":"c","cluster_uuid":"gZ0CKc-cRsyDnwFXmVlOIw","version":{"number":"9.5.3","build_flavor":"default"},"tagline":"You Know, for Search"}`
	es9State = `{"metadata":{"indices":{"t3":{"routing_num_shards":768,"state":"open","settings":{"index.creation_date":"1796427598993",` +
		`"index.number_of_replicas":"0","index.number_of_shards":"3","index.provided_name":"t3","index.routing.allocation.include._tier_preference":"data_content",` +
		`"index.uuid":"5LPFB5iASLePGvAWibrbdg","index.version.created":"9111000"}}}}}`
	es9Mapping = `{"t3":{"mappings":{"properties":{"n":{"type":"long"}}}}}`
)

// layoutServer answers by path: GET / (root), the cluster state and the
// mapping; anything else is a 404.
func layoutServer(tb testing.TB, root, state, mapping string) (*Client, *[]string) {
	tb.Helper()
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/":
			_, _ = w.Write([]byte(root))
		case strings.HasPrefix(r.URL.Path, "/_cluster/state/metadata/"):
			_, _ = w.Write([]byte(state))
		case strings.HasSuffix(r.URL.Path, "/_mapping"):
			_, _ = w.Write([]byte(mapping))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"type":"index_not_found_exception","reason":"no such index"},"status":404}`))
		}
	}))
	tb.Cleanup(srv.Close)
	c, err := New(Config{URLs: []string{srv.URL}})
	if err != nil {
		tb.Fatal(err)
	}
	return c, &paths
}

func TestClient_IndexLayout(t *testing.T) {
	t.Run("elasticsearch 9", func(t *testing.T) {
		c, paths := layoutServer(t, es9Root, es9State, es9Mapping)
		l, err := c.IndexLayout(context.Background(), "t3")
		if err != nil {
			t.Fatal(err)
		}
		if l.Index != "t3" || l.Shards != 3 || l.RoutingShards != 768 || l.RoutingPartitionSize != 1 || l.RoutingPath != nil ||
			l.Engine != "elasticsearch" || l.EngineVersion != "9.5.3" || l.VersionCreated != 9111000 || string(l.Mappings) != `{"properties":{"n":{"type":"long"}}}` {
			t.Fatalf("layout = %+v", l)
		}
		// The engine is read once per client.
		if _, err := c.IndexLayout(context.Background(), "t3"); err != nil {
			t.Fatal(err)
		}
		if n := slices.Index(*paths, "GET /"); n < 0 || slices.Index((*paths)[n+1:], "GET /") >= 0 {
			t.Errorf("requests %v: want GET / once", *paths)
		}
	})
	t.Run("opensearch, partitioned, routing path", func(t *testing.T) {
		root := `{"name":"n0","cluster_name":"c","version":{"distribution":"opensearch","number":"2.19.6"},"tagline":"The OpenSearch Project: https://opensearch.org/"}`
		state := `{"metadata":{"indices":{"p":{"routing_num_shards":8,"state":"open","settings":{"index.number_of_shards":"2",` +
			`"index.routing_partition_size":"2","index.routing_path":["host","pod"],"index.version.created":"136408527"}}}}}`
		c, _ := layoutServer(t, root, state, `{"p":{"mappings":{"_routing":{"required":true}}}}`)
		l, err := c.IndexLayout(context.Background(), "p")
		if err != nil {
			t.Fatal(err)
		}
		if l.Shards != 2 || l.RoutingShards != 8 || l.RoutingPartitionSize != 2 || !slices.Equal(l.RoutingPath, []string{"host", "pod"}) ||
			l.Engine != "opensearch" || l.VersionCreated != 136408527 || string(l.Mappings) != `{"_routing":{"required":true}}` {
			t.Fatalf("layout = %+v", l)
		}
	})
	t.Run("missing index", func(t *testing.T) {
		// The cluster state API is lenient: a missing index is an empty answer.
		c, _ := layoutServer(t, es9Root, `{}`, `{}`)
		_, err := c.IndexLayout(context.Background(), "nope")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v; want ErrNotFound", err)
		}
	})
	t.Run("backing index of a data stream", func(t *testing.T) {
		// Elasticsearch 8.19 and 9.5 answer a backing index's cluster
		// state with every backing index of its data stream.
		state := `{"metadata":{"indices":{".ds-m-000001":{"routing_num_shards":1024,"settings":{"index.number_of_shards":"1","index.version.created":"9111000"}},` +
			`".ds-m-000002":{"routing_num_shards":768,"settings":{"index.number_of_shards":"3","index.version.created":"9111000"}}}}}`
		c, _ := layoutServer(t, es9Root, state, `{".ds-m-000002":{"mappings":{}}}`)
		l, err := c.IndexLayout(context.Background(), ".ds-m-000002")
		if err != nil || l.Index != ".ds-m-000002" || l.Shards != 3 || l.RoutingShards != 768 {
			t.Fatalf("layout = %+v, %v; want .ds-m-000002 with 3 shards and 768 routing shards", l, err)
		}
	})
	t.Run("alias of two indices", func(t *testing.T) {
		state := `{"metadata":{"indices":{"a":{"routing_num_shards":1024,"settings":{"index.number_of_shards":"1","index.version.created":"9111000"}},` +
			`"b":{"routing_num_shards":1024,"settings":{"index.number_of_shards":"1","index.version.created":"9111000"}}}}}`
		c, _ := layoutServer(t, es9Root, state, `{}`)
		_, err := c.IndexLayout(context.Background(), "ab")
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "names 2 indices (a, b)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("odd answers", func(t *testing.T) {
		for _, state := range []string{
			`{"metadata":{"indices":{"x":{"routing_num_shards":1024,"settings":{"index.version.created":"9111000"}}}}}`,
			`{"metadata":{"indices":{"x":{"routing_num_shards":2,"settings":{"index.number_of_shards":"3","index.version.created":"9111000"}}}}}`,
			`{"metadata":{"indices":{"x":{"routing_num_shards":3,"settings":{"index.number_of_shards":"3"}}}}}`,
		} {
			c, _ := layoutServer(t, es9Root, state, `{"x":{"mappings":{}}}`)
			if _, err := c.IndexLayout(context.Background(), "x"); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: err = %v; want ErrMalformed", state, err)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		c := canned(t, http.StatusForbidden, `{"error":{"type":"security_exception","reason":"action [cluster:monitor/state] is unauthorized"},"status":403}`)
		if _, err := c.IndexLayout(context.Background(), "t3"); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("err = %v; want ErrUnauthorized", err)
		}
	})
}
