package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// TestMain stops the engine the package started for ESCF_TEST_ENGINE.
func TestMain(m *testing.M) {
	code := m.Run()
	stopTarget()
	shared.mu.Lock()
	if shared.c != nil {
		if err := shared.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stop the shared engine:", err)
		}
	}
	shared.mu.Unlock()
	os.Exit(code)
}

var shared struct {
	mu sync.Mutex
	c  *engines.Cluster
}

// sharedEngine starts the one-node cluster of ESCF_TEST_ENGINE that the
// tests of both backends share (each under index names of its own).
func sharedEngine(name string) (*engines.Cluster, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	c, err := engines.Start(context.Background(), engines.Config{Engine: name})
	if err != nil {
		return nil, fmt.Errorf("ESCF_TEST_ENGINE=%s: %w", name, err)
	}
	shared.c = c
	return c, nil
}

// testEngineName is the engine of ESCF_TEST_ENGINE, or "" when the suite
// runs on the emulator or on ESCF_TEST_ES_URL.
func testEngineName() string { return os.Getenv("ESCF_TEST_ENGINE") }

// engineCluster is a real cluster of its own for a test that kills, stops
// or pauses nodes: nodes JVMs of ESCF_TEST_ENGINE, stopped when the test
// ends. Without ESCF_TEST_ENGINE the test skips (the emulator's version of
// the scenario runs instead, see the test).
func engineCluster(tb testing.TB, nodes int, settings map[string]string) *engineBackend {
	tb.Helper()
	name := testEngineName()
	if name == "" {
		tb.Skip("needs real nodes to kill: set ESCF_TEST_ENGINE (make test does, for " + engines.DefaultEngine + ")")
	}
	c := engines.StartTB(tb, engines.Config{Engine: name, Nodes: nodes, Settings: settings})
	rc := &realCluster{realEnv: &realEnv{url: c.URL(), client: &http.Client{Timeout: time.Minute}, engine: c},
		prefix: fmt.Sprintf("escf-%s-%d-", runID, runSeq.Add(1))}
	tb.Logf("backend: %d-node %s at %s", nodes, c.Engine(), c.URL())
	return &engineBackend{realCluster: rc, Cluster: c}
}

// engineBackend is a test's own real cluster: the suite's realCluster view
// (names, docs, shards) plus the node controls.
type engineBackend struct {
	*realCluster
	*engines.Cluster
}

func (e *engineBackend) URL() string { return e.realCluster.URL() }

// flavorCluster is the cluster of a test about one engine line (cfg.Flavor):
// the shared real node when ESCF_TEST_ENGINE is that line's engine, an
// emulator of the flavor when the suite runs on the emulator; on another
// real cluster the test skips.
func flavorCluster(tb testing.TB, cfg esemu.Config) testCluster {
	tb.Helper()
	want := string(cfg.Flavor) // a flavor is named as its engine line
	switch name := testEngineName(); {
	case name == want:
		return esCluster(tb, cfg)
	case name != "":
		tb.Skipf("about %s only; ESCF_TEST_ENGINE is %s", want, name)
	case os.Getenv("ESCF_TEST_ES_URL") != "":
		tb.Skipf("about %s only, on the emulator or ESCF_TEST_ENGINE=%s", want, want)
	}
	return &emulator{newEmulator(tb, cfg)}
}
