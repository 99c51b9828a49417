package deletes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

var (
	statsNode    = regexp.MustCompile(`"node"\s*:\s*"`)
	statsTerm    = regexp.MustCompile(`"primary_term"\s*:\s*(\d+)`)
	statsHistory = regexp.MustCompile(`"history_uuid"\s*:\s*"`)
)

// TestScanner_Scan_AbortsWhenThePrimaryChanges: a scan whose shard stats
// show another primary after its first reading (another node with the same
// term, as Elasticsearch reports a failover until the retention leases
// change; a new term; a new history) aborts and emits nothing, whether the
// change shows at the check after the listing or during the wait for the
// global checkpoint. The rule is es.ShardCheckpoints.SamePrimary, the one
// the relay's settle check uses.
func TestScanner_Scan_AbortsWhenThePrimaryChanges(t *testing.T) {
	tests := []struct {
		name string
		// from is the first _stats reading that shows the change (1: the
		// scan's first; 2: the check after the ranges' histogram; 3: the
		// check after the read of live seq nos; 4: the durability wait);
		// 0: none. to is the last (0: all that follow), so that
		// each check is shown to catch it alone.
		from, to int
		rewrite  func([]byte) []byte
		aborted  bool
	}{
		{name: "same primary", from: 0, aborted: false},
		{name: "other node, same term, at the check after the histogram", from: 2, to: 2, rewrite: func(b []byte) []byte {
			return statsNode.ReplaceAll(b, []byte(`"node":"moved-`))
		}, aborted: true},
		{name: "other node, same term, at the check after the live seq nos", from: 3, to: 3, rewrite: func(b []byte) []byte {
			return statsNode.ReplaceAll(b, []byte(`"node":"moved-`))
		}, aborted: true},
		{name: "other node, same term, during the durability wait", from: 4, rewrite: func(b []byte) []byte {
			return statsNode.ReplaceAll(b, []byte(`"node":"moved-`))
		}, aborted: true},
		{name: "new term, same node", from: 2, to: 2, rewrite: func(b []byte) []byte {
			return statsTerm.ReplaceAllFunc(b, func(m []byte) []byte {
				n, _ := strconv.Atoi(string(statsTerm.FindSubmatch(m)[1]))
				return []byte(`"primary_term":` + strconv.Itoa(n+1))
			})
		}, aborted: true},
		{name: "new history, same term and node", from: 3, rewrite: func(b []byte) []byte {
			return statsHistory.ReplaceAll(b, []byte(`"history_uuid":"forced-`))
		}, aborted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emu, err := esemu.New(esemu.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { emu.Close() })
			ctx := context.Background()
			do := func(method, path, body string) {
				t.Helper()
				req, _ := newRequest(method, emu.URL()+path, body)
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode >= 300 {
					t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
				}
			}
			do("PUT", "/docs", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
			// Seq nos 0 and 1: two documents the feed delivered, deleted at
			// 2 and 3; then the live ones at 4..11.
			var bulk strings.Builder
			live := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			bulk.WriteString("{\"index\":{\"_id\":\"gone-1\"}}\n{\"n\":1}\n{\"index\":{\"_id\":\"gone-2\"}}\n{\"n\":1}\n")
			bulk.WriteString("{\"delete\":{\"_id\":\"gone-1\"}}\n{\"delete\":{\"_id\":\"gone-2\"}}\n")
			for _, id := range live {
				fmt.Fprintf(&bulk, "{\"index\":{\"_id\":%q}}\n{\"n\":1}\n", id)
			}
			do("POST", "/docs/_bulk?refresh=true", bulk.String())

			// The cluster, through a proxy that rewrites _stats answers
			// from the from-th on.
			target, _ := url.Parse(emu.URL())
			proxy := httputil.NewSingleHostReverseProxy(target)
			var statsCalls atomic.Int32
			proxy.ModifyResponse = func(resp *http.Response) error {
				if !strings.Contains(resp.Request.URL.Path, "/_stats") {
					return nil
				}
				n := int(statsCalls.Add(1))
				if tt.rewrite == nil || n < tt.from || (tt.to > 0 && n > tt.to) {
					return nil
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				body = tt.rewrite(body)
				resp.Body = io.NopCloser(strings.NewReader(string(body)))
				resp.ContentLength = int64(len(body))
				resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
				return nil
			}
			front := httptest.NewServer(proxy)
			t.Cleanup(front.Close)
			client, err := es.New(es.Config{URLs: []string{front.URL}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Info(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := client.Stats(ctx, []string{"docs"})
			if err != nil {
				t.Fatal(err)
			}
			sc0, _ := st["docs"].Shard(0)
			statsCalls.Store(0)

			rdb := redistest.Start(t).Client(t)
			keys := redisx.NewKeys("primary-" + strconv.Itoa(tt.from))
			lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Minute})
			if ok, err := lease.TryAcquire(ctx); !ok || err != nil {
				t.Fatalf("lease: %v %v", ok, err)
			}
			store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			uuid := st["docs"].UUID
			delivered := []checkpoint.Doc{{ID: "gone-1", SeqNo: 0}, {ID: "gone-2", SeqNo: 1}}
			for i, id := range live {
				delivered = append(delivered, checkpoint.Doc{ID: id, SeqNo: int64(4 + i)})
			}
			shardID := checkpoint.ShardID{IndexUUID: uuid, Shard: 0}
			if err := store.Commit(ctx, checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{shardID: delivered}}); err != nil {
				t.Fatal(err)
			}
			sc, err := deletes.New(deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store, Interval: time.Nanosecond,
				DurableWait: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			sh := deletes.Shard{Index: "docs", Target: "docs", UUID: uuid, Shard: 0, Checkpoint: sc0.MaxSeqNo, Gap: 2, Origin: -1}
			if _, err := sc.Scan(ctx, sh); err != nil { // a shard's first sight starts its interval
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
			res, err := sc.Scan(ctx, sh)

			left, _ := rdb.HGet(ctx, keys.DeliveredCounts(uuid, 0), "total").Int64()
			if tt.aborted {
				if !errors.Is(err, deletes.ErrAborted) || !errors.Is(err, es.ErrPrimaryChanged) {
					t.Fatalf("Scan = %+v, %v; want an error wrapping ErrAborted and es.ErrPrimaryChanged", res, err)
				}
				if got, want := left, int64(len(delivered)); got != want || res.Deleted != 0 {
					t.Errorf("after the aborted scan: %d delivered ids, %d deletes; want %d, 0", got, res.Deleted, want)
				}
				if got := sc.Stats().Deletes; got != 0 {
					t.Errorf("Stats().Deletes = %d, want 0", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if got, want := res.Deleted, 2; got != want {
				t.Errorf("Scan deleted %d, want %d", got, want)
			}
			if got, want := left, int64(len(live)); got != want {
				t.Errorf("delivered ids after the scan = %d, want %d", got, want)
			}
			if got := int(statsCalls.Load()); got < 3 {
				t.Errorf("the scan read _stats %d times; the cases above assume >= 4 (first, after the histogram, after the live seq nos, durability wait)", got)
			}
		})
	}
}
