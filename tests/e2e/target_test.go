package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// The second cluster of a test that mirrors with `consume --sink bulk`:
// the target. On the emulator backend it is a fresh emulator; with
// ESCF_TEST_ENGINE it is a second real node of the same engine, started
// once for the package (the first test that asks starts it) and stopped by
// TestMain, shared as the source node is, each test under its own names.

var sharedTarget struct {
	mu  sync.Mutex
	c   *engines.Cluster
	err error
}

// targetEngine is the package's target node of ESCF_TEST_ENGINE, started
// on first use.
func targetEngine(tb testing.TB) *engines.Cluster {
	tb.Helper()
	sharedTarget.mu.Lock()
	defer sharedTarget.mu.Unlock()
	if sharedTarget.c == nil && sharedTarget.err == nil {
		sharedTarget.c, sharedTarget.err = engines.Start(context.Background(), engines.Config{Engine: testEngineName()})
		if sharedTarget.err != nil {
			sharedTarget.err = fmt.Errorf("ESCF_TEST_ENGINE=%s: the mirror target: %w", testEngineName(), sharedTarget.err)
		}
	}
	if sharedTarget.err != nil {
		tb.Fatal(sharedTarget.err)
	}
	return sharedTarget.c
}

// stopTarget stops the target node if a test started it (TestMain).
func stopTarget() {
	sharedTarget.mu.Lock()
	defer sharedTarget.mu.Unlock()
	if sharedTarget.c != nil {
		if err := sharedTarget.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stop the target engine:", err)
		}
		sharedTarget.c = nil
	}
}

// mirrorTarget is the cluster src's feed is mirrored into: an emulator
// configured by cfg when src is an emulator (or the ESCF_TEST_ES_URL
// cluster, for which no second real cluster is known), else the shared
// target node of ESCF_TEST_ENGINE. Its index names are src's: the bulk
// sink writes each event into the index of its name, so dst.Index(name)
// is src.Index(name). The test's indices there are deleted when it ends.
func mirrorTarget(tb testing.TB, src testCluster, cfg esemu.Config) testCluster {
	tb.Helper()
	rc, ok := src.(*realCluster)
	if !ok || testEngineName() == "" {
		return &emulator{newEmulator(tb, cfg)}
	}
	node := targetEngine(tb)
	dst := &realCluster{realEnv: &realEnv{url: node.URL(), client: &http.Client{Timeout: time.Minute}, engine: node}, prefix: rc.prefix}
	tb.Cleanup(func() { dst.deleteAll(tb) })
	return dst
}

// versionConflicts is how many bulk items the target refused with a
// version conflict (redeliveries), when it counts them: only the emulator
// does.
func versionConflicts(dst backend) (int64, bool) {
	if e, ok := dst.(*emulator); ok {
		return e.VersionConflicts(), true
	}
	return 0, false
}

// onEmulator reports whether c is an emulator (whose op histories the
// audit reads) rather than a real cluster.
func onEmulator(c backend) bool {
	switch c.(type) {
	case *esemu.Cluster, *emulator:
		return true
	}
	return false
}

// relayCounted is the view of c to give a relay whose requests the test
// counts, and what counts them: the emulator itself (it counts every
// request it serves), or the real cluster behind a countingProxy (it
// counts the relay's only).
func relayCounted(tb testing.TB, c testCluster) (backend, requestCounter) {
	tb.Helper()
	switch v := c.(type) {
	case *emulator:
		return v, v.Cluster
	case *realCluster:
		p := newCountingProxy(tb, v.URL())
		view := &realCluster{realEnv: &realEnv{url: p.URL(), user: v.user, password: v.password, client: v.client}, prefix: v.prefix}
		return view, p
	}
	tb.Fatalf("relayCounted: no request counts for %T", c)
	return nil, nil
}

// skipWithoutDataStreams skips on a real cluster without data streams
// (noDataStreams).
func skipWithoutDataStreams(tb testing.TB, c backend) {
	tb.Helper()
	if why := noDataStreams(tb, c); why != "" {
		tb.Skip(why)
	}
}

// noDataStreams says why c has no data streams, or "": Elasticsearch 7.17
// from Maven Central's jars has no data stream module at all (an index
// template's data_stream is refused, and a write creates a plain index).
func noDataStreams(tb testing.TB, c backend) string {
	tb.Helper()
	if onEmulator(c) {
		return ""
	}
	var root struct {
		Version struct {
			Number       string `json:"number"`
			Distribution string `json:"distribution"`
		} `json:"version"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", c.URL()+"/", ""), &root); err != nil {
		tb.Fatal(err)
	}
	if root.Version.Distribution != "opensearch" && strings.HasPrefix(root.Version.Number, "7.") {
		return fmt.Sprintf("Elasticsearch %s from Maven Central's jars has no data streams (the module is not published there)", root.Version.Number)
	}
	return ""
}

// rolloverAlias creates the index c.Index(name+"-000001") behind the write
// alias c.Index(name) and returns the alias: what rolls over where there
// are no data streams.
func rolloverAlias(tb testing.TB, c testCluster, name string, shards, replicas int) string {
	tb.Helper()
	alias := c.Index(name)
	mustDo(tb, "PUT", c.URL()+"/"+alias+"-000001", fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":%d},"aliases":{%q:{"is_write_index":true}}}`,
		shards, replicas, alias))
	return alias
}

// dataStreamTemplate puts an index template (named c.Index(name)) that
// makes data streams of the names c.Index(name+"-*") with the given shards
// and replicas, and returns the data stream c.Index(name+"-app"), created
// by its first write. At the end of the test it deletes the data stream
// and then the template, where the engine can: Elasticsearch 8 and 9 from
// Maven Central's jars answer 405 to /_data_stream, and both stay on the
// package's node until it stops.
func dataStreamTemplate(tb testing.TB, c testCluster, name string, shards, replicas int) string {
	tb.Helper()
	tmpl := c.Index(name)
	body := fmt.Sprintf(`{"index_patterns":[%q],"data_stream":{},"template":{"settings":{"number_of_shards":%d,"number_of_replicas":%d}}}`,
		c.Index(name+"-*"), shards, replicas)
	mustDo(tb, "PUT", c.URL()+"/_index_template/"+tmpl, body)
	stream := c.Index(name + "-app")
	if !onEmulator(c) {
		tb.Cleanup(func() {
			if st, _ := httpDo(tb, "DELETE", c.URL()+"/_data_stream/"+stream, ""); st == http.StatusMethodNotAllowed {
				return
			}
			if st, b := httpDo(tb, "DELETE", c.URL()+"/_index_template/"+tmpl, ""); st >= 300 {
				tb.Logf("cleanup: delete the index template %s: HTTP %d: %s", tmpl, st, b)
			}
		})
	}
	return stream
}
