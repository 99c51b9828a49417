package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestTargets_TypoRefusedAtStart: a concrete --index that names nothing
// stops the relay at start with an error naming it, on every engine —
// Elasticsearch 8+ answers its _resolve/index with 404, Elasticsearch 7
// and OpenSearch with 200 and empty lists (on those, the relay used to
// wait for the index instead) — while a pattern that matches nothing yet
// is waited for.
func TestTargets_TypoRefusedAtStart(t *testing.T) {
	c := esCluster(t, esemu.Config{Flavor: esemu.FlavorOpenSearch2})
	srv := redistest.Start(t)
	typo := c.Index("ordres")
	code, out := runBinary(t, 30*time.Second, relayArgs(c, srv.URL(), "typo", typo)...)
	if code != 1 || !strings.Contains(out, typo) || !strings.Contains(out, "names no index") {
		t.Fatalf("run --index %s: exit %d, want 1 with an error naming it:\n%s", typo, code, tail(out, 10))
	}
	if keys := keyspace(t, srv.Client(t)); len(keys) != 0 {
		t.Fatalf("a refused start wrote %v", keys)
	}
	// Resolved the pattern twice and still running (waitResolutions fails
	// if it exits): waiting, not stopped.
	addr := closedPort(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "later", c.Index("ordres-*"), "--metrics-addr", addr)...)
	waitResolutions(t, p, addr, 2)
	p.kill()
}
