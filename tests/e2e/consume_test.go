package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// consumeArgs are the flags of a bulk mirror's consume. The tests start
// consumers beside the relay, as deployments do: --wait-for-feed lets one
// start before the relay has written the feed's meta hash.
func consumeArgs(redisURL, feed, group, consumer, target string) []string {
	return []string{"consume", "--redis", redisURL, "--feed", feed, "--group", group, "--consumer", consumer,
		"--sink", "bulk", "--bulk-es", target, "--workers", "4", "--min-idle", "500ms", "--shutdown-timeout", "5s",
		"--wait-for-feed", "1m"}
}

// waitGroupDone waits until the group has read everything and nothing is
// pending (Redis 7 reports the lag).
func waitGroupDone(tb testing.TB, rdb *redis.Client, stream, group string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		groups, err := rdb.XInfoGroups(context.Background(), stream).Result()
		if err == nil {
			for _, g := range groups {
				if g.Name == group {
					last = fmt.Sprintf("lag %d, pending %d", g.Lag, g.Pending)
					if g.Lag == 0 && g.Pending == 0 {
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("group %s did not finish within %s (%s)", group, timeout, last)
}

// waitGroupRead waits until the group has read at least n entries of the
// stream (XINFO GROUPS entries-read): a consumer started before the stream
// filled may not have read anything yet when the stream reaches a size.
func waitGroupRead(tb testing.TB, rdb *redis.Client, stream, group string, n int64, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var read int64
	for time.Now().Before(deadline) {
		groups, _ := rdb.XInfoGroups(context.Background(), stream).Result()
		for _, g := range groups {
			if g.Name == group {
				read = g.EntriesRead
			}
		}
		if read >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("group %s read %d entries of %s within %s, want at least %d", group, read, stream, timeout, n)
}

// mirrorDoc is a document of the target with its version.
type mirrorDoc struct {
	source  string
	version int64
}

// targetDocs reads every document of an index in the target with its
// version: each shard in _seq_no order, in pages (one search stops at
// 10,000 hits, and a mirror may hold more).
func targetDocs(tb testing.TB, c backend, index string) map[string]mirrorDoc {
	tb.Helper()
	mustDo(tb, "POST", c.URL()+"/"+index+"/_refresh", "")
	var settings map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", c.URL()+"/"+index+"/_settings?flat_settings=true", ""), &settings); err != nil {
		tb.Fatal(err)
	}
	shards, err := strconv.Atoi(fmt.Sprint(settings[index].Settings["index.number_of_shards"]))
	if err != nil {
		tb.Fatalf("target %s: number_of_shards: %v", index, err)
	}
	out := map[string]mirrorDoc{}
	for n := 0; n < shards; n++ {
		after := ""
		for {
			// unmapped_type: a target index nothing was written to yet has
			// no mapping, and real engines then refuse a sort on _seq_no.
			body := `{"size":1000,"version":true,"seq_no_primary_term":true,"track_total_hits":false,` +
				`"sort":[{"_seq_no":{"order":"asc","unmapped_type":"long"}}],"query":{"match_all":{}}` + after + `}`
			st, b := httpDo(tb, "POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", c.URL(), index, n), body)
			if st != 200 {
				tb.Fatalf("search target: %d %s", st, b)
			}
			var r struct {
				Hits struct {
					Hits []struct {
						ID      string          `json:"_id"`
						Version int64           `json:"_version"`
						SeqNo   int64           `json:"_seq_no"`
						Source  json.RawMessage `json:"_source"`
					} `json:"hits"`
				} `json:"hits"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				tb.Fatal(err)
			}
			for _, h := range r.Hits.Hits {
				out[h.ID] = mirrorDoc{source: compact(h.Source), version: h.Version}
			}
			if len(r.Hits.Hits) < 1000 {
				break
			}
			after = fmt.Sprintf(`,"search_after":[%d]`, r.Hits.Hits[len(r.Hits.Hits)-1].SeqNo)
		}
	}
	return out
}

// diffMirror says how the target differs from the source ("" when it holds
// exactly the source's documents, each with version
// generation<<41 | seq_no<<1, generation 1).
func diffMirror(tb testing.TB, src, dst backend, index string) (string, int) {
	tb.Helper()
	want := clusterDocs(tb, src, index)
	got := targetDocs(tb, dst, index)
	var problems []string
	for k, d := range want {
		m, ok := got[k.id]
		switch {
		case !ok:
			problems = append(problems, "missing "+k.id)
		case m.source != d.source:
			problems = append(problems, fmt.Sprintf("%s: source %s, want %s", k.id, m.source, d.source))
		case m.version != bulkVersion(tb, d.seq):
			problems = append(problems, fmt.Sprintf("%s: version %d, want %d (seq %d)", k.id, m.version, bulkVersion(tb, d.seq), d.seq))
		}
	}
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("target has %d documents, source %d", len(got), len(want)))
	}
	if len(problems) > 15 {
		problems = append(problems[:15], "…")
	}
	return strings.Join(problems, "\n"), len(want)
}

// waitTargetMirror waits until the target mirrors the source exactly.
func waitTargetMirror(tb testing.TB, src, dst backend, index string, timeout time.Duration) int {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		diff, n := diffMirror(tb, src, dst, index)
		if diff == "" {
			return n
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the mirror did not converge within %s:\n%s", timeout, diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bulkVersion is the external version the bulk sink writes for an upsert
// of generation 1.
func bulkVersion(tb testing.TB, seq int64) int64 {
	v, err := sink.BulkVersion(1, seq, false)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// TestConsume_RedisCliConsumer: a consumer written with plain redis-cli
// commands (XREADGROUP, XACK) in a shell script reads the same stream: the
// wire format is the contract.
func TestConsume_RedisCliConsumer(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: install redis-server (it brings redis-cli)")
	}
	c := esCluster(t, esemu.Config{})
	ix := c.Index("cli")
	createIndex(t, c, ix, 2, 0)
	srv := redistest.Start(t)
	f := startRelayDeletes(t, c, srv.URL(), "clifeed", []string{ix}, func(*deletes.Config) {}, nil)
	for i := 0; i < 30; i++ {
		q := ""
		if i%4 == 0 {
			q = "?routing=r1"
		}
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/doc%d%s", c.URL(), ix, i, q), fmt.Sprintf(`{"n":%d,"text":"a b c"}`, i))
	}
	for i := 0; i < 30; i += 5 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/doc%d", c.URL(), ix, i), `{"updated":true}`)
	}
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	mustDo(t, "DELETE", c.URL()+"/"+ix+"/_doc/doc3", "")
	waitMirror(t, c, f, ix, 10*time.Second)

	script := filepath.Join(t.TempDir(), "consumer.sh")
	out := filepath.Join(t.TempDir(), "seen.txt")
	const sh = `#!/bin/sh
# A consumer with nothing but redis-cli: XREADGROUP one entry at a time,
# print "<entry id> <op> <id> <seq_no> <routing>", XACK it.
set -eu
PORT=$1 STREAM=$2 GROUP=$3 OUT=$4
redis-cli -p "$PORT" XGROUP CREATE "$STREAM" "$GROUP" 0 >/dev/null
while :; do
  reply=$(redis-cli -p "$PORT" XREADGROUP GROUP "$GROUP" sh-1 COUNT 1 STREAMS "$STREAM" '>')
  [ -z "$reply" ] && break
  # Raw replies: the stream name, the entry id, then field/value lines.
  printf '%s\n' "$reply" | awk 'NR==1 {next} NR==2 {id=$0; next}
    (NR % 2) == 1 {k=$0; next} {f[k]=$0}
    END {r = ("routing" in f) ? f["routing"] : "-"; print id, f["op"], f["id"], f["seq_no"], r}' >> "$OUT"
  id=$(printf '%s\n' "$reply" | sed -n 2p)
  redis-cli -p "$PORT" XACK "$STREAM" "$GROUP" "$id" >/dev/null
done
`
	if err := os.WriteFile(script, []byte(sh), 0o755); err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(srv.Port)
	cmd := exec.Command("sh", script, port, f.keys.Events(), "shell", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script: %v\n%s", err, b)
	}
	seen, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries(t, f.rdb, f.keys.Events()) {
		r := e.Routing
		if r == "" {
			r = "-"
		}
		want = append(want, fmt.Sprintf("%s %s %s %d %s", e.StreamID, e.Op, e.ID, e.SeqNo, r))
	}
	got := strings.Split(strings.TrimSpace(string(seen)), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the shell consumer read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p, _ := f.rdb.XPending(context.Background(), f.keys.Events(), "shell").Result(); p.Count != 0 {
		t.Fatalf("%d entries left pending by the shell consumer", p.Count)
	}
	t.Logf("the redis-cli consumer read and acked %d entries, identical to the Go decoder", len(got))
}

// TestConsume_StdoutAndSIGTERM: consume --sink stdout prints the seed's JSON
// lines; SIGTERM stops it with exit 0 and nothing left pending.
func TestConsume_StdoutAndSIGTERM(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	ix := c.Index("printed")
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "printed", []string{ix}, nil)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/1", `{"title":"first"}`)
	mustDo(t, "PUT", c.URL()+"/"+ix+"/_doc/1", `{"title":"edited"}`)
	waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
	p := startBinary(t, "consume", "--redis", srv.URL(), "--feed", "printed", "--group", "print", "--sink", "stdout", "--log-level", "error")
	uuid := indexUUID(t, c, ix)
	want := fmt.Sprintf(`{"op":"upsert","index":"%s","index_uuid":"%s","shard":0,"id":"1","seq_no":1,"primary_term":1,"version":2,"source":{"title":"edited"}}`, ix, uuid)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.out.String(), want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.out.String(), want) {
		t.Fatalf("stdout:\n%s\nwant the line:\n%s", p.out, want)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume did not exit within 10s of SIGTERM")
	}
	if pend, _ := f.rdb.XPending(context.Background(), f.keys.Events(), "print").Result(); pend.Count != 0 {
		t.Fatalf("%d events pending after a graceful stop", pend.Count)
	}
}
