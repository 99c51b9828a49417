package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/bootstrap"
	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// bootstrapCmd runs runBootstrapCopy with args as a command line would.
func bootstrapCmd(t *testing.T, args []string, rdb redis.UniversalClient, s sink.Sink) (bootstrap.Result, []redisx.Event, string, error) {
	t.Helper()
	var mu sync.Mutex
	var evs []redisx.Event
	handler := func(_ context.Context, e redisx.Event) error {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
		return nil
	}
	var res bootstrap.Result
	var stderr bytes.Buffer
	cmd := &cli.Command{Name: "consume", Flags: append(bootstrapFlags(), logFlags()...), ErrWriter: &stderr, Writer: &stderr,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			var err error
			res, err = runBootstrapCopy(ctx, cmd, "boot", rdb, handler, s)
			return err
		}}
	err := cmd.Run(context.Background(), append([]string{"consume"}, args...))
	return res, evs, stderr.String(), err
}

// TestRunBootstrapCopy: the --es flags reach the source cluster and the
// copy hands the feed's documents; --index narrows it.
func TestRunBootstrapCopy(t *testing.T) {
	emu, err := esemu.New(esemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	rdb := redistest.Start(t).Client(t)
	for _, ix := range []string{"orders", "other"} {
		for i := range 7 {
			st, b, err := bootHTTP("PUT", fmt.Sprintf("%s/%s/_doc/%d?refresh=true", emu.URL(), ix, i), `{"x":1}`)
			if err != nil || st >= 300 {
				t.Fatalf("seed: %d %s %v", st, b, err)
			}
		}
	}
	runRelayUntilRead(t, emu.URL(), rdb, []string{"orders", "other"}, 14)

	res, evs, logs, err := bootstrapCmd(t, []string{"--es", emu.URL(), "--bootstrap-page-size", "3"}, rdb, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	if got := fmt.Sprint(res.Documents); got != "map[orders:7 other:7]" {
		t.Fatalf("documents %s, want map[orders:7 other:7]\n%s", got, logs)
	}
	if len(evs) != 14+4 || !strings.Contains(logs, "bootstrap: copied") {
		t.Fatalf("%d events (want 14 upserts and 2 pairs of markers); logs:\n%s", len(evs), logs)
	}
	res, _, logs, err = bootstrapCmd(t, []string{"--es", emu.URL(), "--index", "ord*,-other"}, rdb, nil)
	if err != nil || fmt.Sprint(res.Documents) != "map[orders:7]" {
		t.Fatalf("--index ord*,-other: %v, %v\n%s", res.Documents, err, logs)
	}
}

// TestRunBootstrapCopy_BadInput: bad flags are usage errors naming the
// flag, an unreachable cluster says so, before anything is handed.
func TestRunBootstrapCopy_BadInput(t *testing.T) {
	literal, err := es.New(es.Config{URLs: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := sink.NewBulk(sink.BulkConfig{ES: literal, Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		Keys: redisx.NewKeys("boot"), IndexTemplate: "mirror"})
	if err != nil {
		t.Fatal(err)
	}
	defer mirror.Close(context.Background())
	tests := []struct {
		name  string
		args  []string
		sink  sink.Sink
		usage bool
		want  string
	}{
		{"no --es", nil, nil, true, "--bootstrap needs --es"},
		{"bad listing", []string{"--es", "http://127.0.0.1:1", "--bootstrap-listing", "fast"}, nil, true, "--bootstrap-listing"},
		{"page too large", []string{"--es", "http://127.0.0.1:1", "--bootstrap-page-size", "20000"}, nil, true, "--bootstrap-page-size"},
		{"no workers", []string{"--es", "http://127.0.0.1:1", "--bootstrap-workers", "0"}, nil, true, "--bootstrap-workers"},
		{"password without user", []string{"--es", "http://127.0.0.1:1", "--es-password", "x"}, nil, true, "--es-password without --es-user"},
		{"a mirror mixing indices", []string{"--es", "http://127.0.0.1:1"}, mirror, true, "--bootstrap-reconcile=false"},
		{"unreachable", []string{"--es", "http://127.0.0.1:1"}, nil, false, "cannot reach Elasticsearch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, evs, logs, err := bootstrapCmd(t, tt.args, nil, tt.sink)
			var ue usageError
			if err == nil || errors.As(err, &ue) != tt.usage || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v (usage error: %v), want one containing %q (usage error: %v)\n%s", err, errors.As(err, &ue), tt.want, tt.usage, logs)
			}
			if len(evs) > 0 {
				t.Fatalf("%d events handed", len(evs))
			}
		})
	}
}

// runRelayUntilRead runs a relay on indices until its stream holds n
// upserts, then stops it: the feed's records are then there.
func runRelayUntilRead(t *testing.T, url string, rdb *redis.Client, indices []string, n int) {
	t.Helper()
	client, err := es.New(es.Config{URLs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	keys := redisx.NewKeys("boot")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Second, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(relay.Config{ES: client, Store: store, Lease: lease, Targets: indices, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l, _ := rdb.XLen(context.Background(), keys.Events()).Result(); l >= int64(n) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the relay did not write %d events", n)
}

// bootHTTP sends a JSON request and returns status and body.
func bootHTTP(method, url, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
