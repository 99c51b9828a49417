package deletes_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/prometheus/client_golang/prometheus"
)

// TestScanner_StoppingIsNoWarning: a scan cut short because the relay is
// stopping (its context ends) is no trouble to warn about: the demo and any
// clean shutdown would print a WARN otherwise.
func TestScanner_StoppingIsNoWarning(t *testing.T) {
	f := newFeedFixture(t, "stopping")
	f.write(docIDs("doc", 10), false, "")
	f.deliver(f.live())
	var logs bytes.Buffer
	sc, err := deletes.New(deletes.Config{ES: f.es, Client: f.rdb, Keys: f.keys, Store: f.store, Interval: time.Nanosecond,
		DurableWait: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: prometheus.NewPedanticRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	sh := deletes.Shard{Index: "docs", Target: "docs", UUID: f.uuid, Shard: 0, Checkpoint: f.maxSeqNo(), Origin: -1}
	if _, err := sc.Scan(context.Background(), sh); err != nil { // the first sight starts the interval
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sc.Scan(ctx, sh); !errors.Is(err, deletes.ErrAborted) {
		t.Fatalf("a scan with an ended context: %v; want ErrAborted", err)
	}
	if strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "delete scan stopped") {
		t.Fatalf("a stopped scan logged:\n%s\nwant no WARN, and a debug line", logs.String())
	}
}
