package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// nodeCmd runs a shell command of the environment from the repository root
// (where compose/ is), with a time limit.
func nodeCmd(tb testing.TB, env, command string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s (%q): %v\n%s", env, command, err, out)
	}
	tb.Logf("%s: %s", env, strings.TrimSpace(string(out)))
}

// TestRealCluster_NodeKilled is the kill-a-node check for a real
// multi-node cluster (compose/es-8.19-3nodes.yml): writers index, update and
// delete while the relay runs with delete detection; a node is stopped
// (ESCF_TEST_KILL_NODE_CMD), writing goes on, the node is started again
// (ESCF_TEST_START_NODE_CMD) and the index turns green; then the replayed
// stream equals the index exactly and every delete event is of a document
// a writer deleted. The relay talks to ESCF_TEST_ES_URL only, which must be
// a node the commands leave running. Skipped unless both commands are set.
func TestRealCluster_NodeKilled(t *testing.T) {
	kill, start := os.Getenv("ESCF_TEST_KILL_NODE_CMD"), os.Getenv("ESCF_TEST_START_NODE_CMD")
	if kill == "" || start == "" {
		t.Skip("set ESCF_TEST_ES_URL, ESCF_TEST_KILL_NODE_CMD and ESCF_TEST_START_NODE_CMD (see compose/es-8.19-3nodes.yml) to run the kill-a-node test")
	}
	if realClusterEnv(t) == nil {
		t.Fatal("ESCF_TEST_KILL_NODE_CMD is set but ESCF_TEST_ES_URL is not: the test needs the real cluster the commands act on")
	}
	c := esCluster(t, esemu.Config{})
	ix := c.Index("nodekill")
	createIndex(t, c, ix, 3, 1)
	mustDo(t, "GET", c.URL()+"/_cluster/health/"+ix+"?wait_for_status=green&timeout=60s", "")
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "nodekill", []string{ix}, func(dc *deletes.Config) {
		dc.Interval = time.Second
	}, nil)

	stop := startWriters(t, c, ix, 4, 21, true, true)
	time.Sleep(5 * time.Second)
	nodeCmd(t, "ESCF_TEST_KILL_NODE_CMD", kill)
	time.Sleep(15 * time.Second)
	nodeCmd(t, "ESCF_TEST_START_NODE_CMD", start)
	mustDo(t, "GET", c.URL()+"/_cluster/health/"+ix+"?wait_for_status=green&timeout=180s", "")
	time.Sleep(5 * time.Second)
	ws := stop()
	ops, failed := writerOps(ws)

	waitCaughtUp(t, c, f.store, []string{ix}, 2*time.Minute)
	evs := waitMirror(t, c, f, ix, 2*time.Minute)
	n := checkDeletes(t, c, ix, evs)
	byWriters := map[string]bool{}
	for _, w := range ws {
		for _, id := range w.deleted {
			byWriters[id] = true
		}
	}
	for _, e := range evs {
		if e.Op == redisx.OpDelete && !byWriters[e.ID] {
			t.Fatalf("false delete: no writer deleted %s", e.ID)
		}
	}
	t.Logf("writes %d (%d failed while the node was away), stream entries %d, delete events %d, documents %d: the stream mirrors the index",
		ops, failed, len(evs), n, len(clusterDocs(t, c, ix)))
	if ops-failed < 1000 {
		t.Fatalf("only %d writes succeeded: the test did not exercise the relay", ops-failed)
	}
}
