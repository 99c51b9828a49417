package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// statusJSON runs `status --json` and decodes it.
func statusJSON(tb testing.TB, args ...string) (int, map[string]any, string) {
	tb.Helper()
	code, out := runBinary(tb, 30*time.Second, append([]string{"status", "--json"}, args...)...)
	start := strings.Index(out, "{")
	end := strings.LastIndex(out, "}")
	var m map[string]any
	if start < 0 || end < start || json.Unmarshal([]byte(out[start:end+1]), &m) != nil {
		tb.Fatalf("status --json printed no JSON (exit %d):\n%s", code, out)
	}
	return code, m, out
}

// TestStatus_HealthAndExitCodes: status on a running feed (text and JSON)
// and on a stopped one; its exit code under each unhealthy condition.
func TestStatus_HealthAndExitCodes(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	watched := c.Index("watched")
	createIndex(t, c, watched, 2, 0)
	srv := redistest.Start(t)
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), watched, i), `{}`)
	}
	p := startBinary(t, relayArgs(c, srv.URL(), "watch", watched, "--lease-ttl", "2s")...)
	waitCaughtUp(t, c, storeFor(t, srv, "watch"), []string{watched}, 10*time.Second)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("watch")
	rdb.XGroupCreate(context.Background(), keys.Events(), "readers", "$")
	base := append([]string{"--redis", srv.URL(), "--feed", "watch"}, inspect(c).cliArgs()...)

	// Healthy, text.
	code, out := runBinary(t, 30*time.Second, append([]string{"status"}, base...)...)
	for _, want := range []string{"feed watch: healthy", "lease: held by", watched, "GROUP", "readers", "dead letters: 0", "stream: 20 entries"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Fatalf("healthy feed: exit %d:\n%s", code, out)
	}
	// Healthy, JSON: checkpoints equal the global checkpoints.
	code, rep, _ := statusJSON(t, base...)
	if code != 0 || rep["healthy"] != true {
		t.Fatalf("exit %d, report %v", code, rep)
	}
	for _, ix := range rep["indices"].([]any) {
		for _, sh := range ix.(map[string]any)["shards"].([]any) {
			s := sh.(map[string]any)
			if s["lag"].(float64) != 0 || s["checkpoint"] != s["global_checkpoint"] {
				t.Fatalf("shard %v: want lag 0, checkpoint = global checkpoint", s)
			}
		}
	}
	cases := []struct {
		name  string
		setup func()
		args  []string
		want  string
	}{
		{"group lag over --max-lag", func() {
			rdb.XGroupCreate(context.Background(), keys.Events(), "slow", "0")
		}, []string{"--max-lag", "5"}, "group slow lags by 20 entries"},
		{"dead letters", func() {
			rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Dead(), Values: []any{"op", "upsert", "error", "boom"}})
		}, nil, "1 events in the dead-letter stream"},
		{"relay stopped: no lease, shard lag", func() {
			p.kill()
			rdb.Del(context.Background(), keys.Lease())
			for i := 20; i < 40; i++ {
				mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), watched, i), `{}`)
			}
		}, []string{"--max-lag", "5"}, "no relay holds the lease"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			code, rep, out := statusJSON(t, append(base, tc.args...)...)
			problems := fmt.Sprint(rep["problems"])
			if code != 1 || rep["healthy"] != false || !strings.Contains(problems, tc.want) {
				t.Fatalf("exit %d, healthy %v, problems %s; want exit 1 and %q\n%s", code, rep["healthy"], problems, tc.want, out)
			}
		})
	}
	// The stopped feed's shard lag is reported too.
	_, rep, _ = statusJSON(t, append(base, "--max-lag", "5")...)
	if !strings.Contains(fmt.Sprint(rep["problems"]), "lags by") || !strings.Contains(fmt.Sprint(rep["problems"]), "operations") {
		t.Fatalf("no shard lag problem: %v", rep["problems"])
	}
	// Lost state.
	rdb.Del(context.Background(), keys.Meta(), keys.Checkpoints(), keys.Indices())
	code, rep, _ = statusJSON(t, base...)
	if code != 1 || !strings.Contains(fmt.Sprint(rep["problems"]), "state is lost") {
		t.Fatalf("lost state: exit %d, problems %v", code, rep["problems"])
	}
	// A Redis that cannot be reached is an error line, exit 1.
	code, out = runBinary(t, 30*time.Second, "status", "--redis", "redis://"+closedPort(t)+"/0", "--feed", "watch")
	if code != 1 || !strings.Contains(out, "cannot reach Redis") {
		t.Fatalf("unreachable Redis: exit %d:\n%s", code, out)
	}
	// Only the program's own words: no line of the Redis client's logger
	// ("redis: … pool.go:770: …"); and with --json, JSON that says why.
	if strings.Contains(out, "pool.go") || strings.Contains(out, "redis: 20") {
		t.Fatalf("unreachable Redis: the Redis client's own log reached the terminal:\n%s", out)
	}
	code, rep, out = statusJSON(t, "--redis", "redis://"+closedPort(t)+"/0", "--feed", "watch")
	if code != 1 || rep["healthy"] != false || !strings.Contains(fmt.Sprint(rep["error"]), "cannot reach Redis") || strings.Contains(out, "pool.go") {
		t.Fatalf("status --json, unreachable Redis: exit %d, %v\n%s", code, rep, out)
	}
}

// xrangeIDs lists the stream's entry ids.
func xrangeIDs(tb testing.TB, rdb *redis.Client, stream string) map[string]bool {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range msgs {
		out[m.ID] = true
	}
	return out
}

// trimmedTo waits until the relay's trims brought the stream down to want
// entries or fewer, then for 2 more of its XTRIMs (INFO commandstats: the
// relay is the only client that trims): the second comes from a pass that
// read the groups after the first, so the stream is what the groups' state
// leaves, however long the trims took to come on a loaded machine.
func trimmedTo(tb testing.TB, rdb *redis.Client, stream string, want int64) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for rdb.XLen(context.Background(), stream).Val() > want {
		if time.Now().After(deadline) {
			tb.Fatalf("the stream still has %d entries 30 s after the acks; want %d", rdb.XLen(context.Background(), stream).Val(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for n := commandCalls(tb, rdb, "xtrim"); commandCalls(tb, rdb, "xtrim") < n+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("no 2 more XTRIM within 30 s")
		}
	}
}

// commandCalls is how many times Redis ran the command (INFO
// commandstats).
func commandCalls(tb testing.TB, rdb *redis.Client, command string) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil {
			tb.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// TestTrim_NeverRemovesUnacked: two groups read at different speeds, one
// holds entries pending; trimming removes only what every group acked, and
// the slower group bounds it.
func TestTrim_NeverRemovesUnacked(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	trimmed := c.Index("trimmed")
	createIndex(t, c, trimmed, 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startRelay(t, c, srv.URL(), "trim", []string{trimmed}, func(cfg *relay.Config) {
		cfg.Trim, cfg.TrimInterval = true, 50*time.Millisecond
	})
	ctx := context.Background()
	stream := f.keys.Events()
	for i := 0; i < 100; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), trimmed, i), `{}`)
	}
	waitCaughtUp(t, c, f.store, []string{trimmed}, 10*time.Second)
	rdb.XGroupCreate(ctx, stream, "fast", "0")
	rdb.XGroupCreate(ctx, stream, "slow", "0")
	// fast reads and acks 80; slow reads 50, acks 30 (20 stay pending).
	read := func(group string, n int64) []string {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{stream, ">"}, Count: n}).Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	fast := read("fast", 80)
	rdb.XAck(ctx, stream, "fast", fast...)
	slow := read("slow", 50)
	rdb.XAck(ctx, stream, "slow", slow[:30]...)
	before := xrangeIDs(t, rdb, stream)
	trimmedTo(t, rdb, stream, 70)
	after := xrangeIDs(t, rdb, stream)
	// Everything slow has not acked (pending 20, unread 50) must remain:
	// the oldest pending entry of the slow group bounds the trim.
	for _, id := range slow[30:] {
		if !after[id] {
			t.Fatalf("entry %s, pending in group slow, was trimmed", id)
		}
	}
	if len(after) != 70 {
		t.Fatalf("%d entries before, %d after; want 70 kept (slow acked 30)", len(before), len(after))
	}
	// slow catches up: the fast group's unread 20 bound the trim now.
	rdb.XAck(ctx, stream, "slow", slow[30:]...)
	rest := read("slow", 50)
	rdb.XAck(ctx, stream, "slow", rest...)
	trimmedTo(t, rdb, stream, 21)
	// The trim keeps each group's last delivered entry (a lost history is
	// then told by ids): the fast group's 80th, and its unread 20.
	if got := len(xrangeIDs(t, rdb, stream)); got != 21 {
		t.Fatalf("%d entries kept; want the fast group's last delivered one and the 20 it has not read", got)
	}
	t.Logf("entries: 100 → 70 (slow group's pending bound) → 21 (fast group's last delivered and unread); nothing unacked removed")
}

// TestBackpressure_BoundedStreamThenExactMirror: with a consumer stopped,
// the relay pauses at --max-backlog while writers keep writing, so the
// stream (Redis memory) stays bounded; when the consumer resumes, the relay
// reads on and the mirror is exact.
func TestBackpressure_BoundedStreamThenExactMirror(t *testing.T) {
	t.Parallel()
	src := esCluster(t, esemu.Config{Nodes: 2})
	dst := mirrorTarget(t, src, esemu.Config{})
	orders := src.Index("orders")
	createIndex(t, src, orders, 2, 1)
	// The writers use custom routing: the bulk sink writes routed events
	// only into a target that places them as the source does.
	createIndex(t, dst, orders, 2, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	keys := redisx.NewKeys("bp")
	rdb.XGroupCreateMkStream(context.Background(), keys.Events(), "mirror", "0")
	logs := &lockedLog{}
	f := startRelayDeletes(t, src, srv.URL(), "bp", []string{orders}, func(*deletes.Config) {}, func(cfg *relay.Config) {
		cfg.MaxBacklog = 300
		cfg.Trim, cfg.TrimInterval = true, 100*time.Millisecond
		cfg.Logger = newTestLogger(logs)
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		w := &writer{url: src.URL(), index: orders, id: i, rng: rand.New(rand.NewPCG(uint64(i), 5)), routing: map[string]string{}, deletes: true}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(t, stop) }()
	}
	var maxLen int64
	var memPaused int64 // used_memory when the relay first paused
	var pausedAt time.Time
	// 4 s of writes, and at least 1 s of them while the relay is paused: a
	// loaded real node may take longer to fill the backlog (30 s at most).
	for start := time.Now(); ; {
		n, _ := rdb.XLen(context.Background(), keys.Events()).Result()
		maxLen = max(maxLen, n)
		if memPaused == 0 && backpressureSince(t, rdb, keys) != "" {
			memPaused, pausedAt = usedMemory(t, rdb), time.Now()
		}
		if d := time.Since(start); d >= 4*time.Second && (memPaused != 0 && time.Since(pausedAt) >= time.Second || d >= 30*time.Second) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	memEnd := usedMemory(t, rdb)
	close(stop)
	wg.Wait()
	if memPaused == 0 {
		t.Fatalf("the relay never paused:\n%s", logs)
	}
	// While paused the writers kept writing to ES; Redis must not grow with them.
	if memEnd-memPaused > 1<<20 {
		t.Fatalf("Redis used_memory grew from %d to %d bytes while the relay was paused", memPaused, memEnd)
	}
	// The bound: MaxBacklog plus what one round commits after the check.
	if maxLen > 300+1000 {
		t.Fatalf("the stream grew to %d entries with --max-backlog 300", maxLen)
	}
	if backpressureSince(t, rdb, keys) == "" {
		t.Fatal("backpressure is not recorded in the feed's meta (status shows it from there)")
	}
	// The consumer resumes: the relay reads on and the mirror converges.
	// 16 lanes: the backlog of an emulator's writers (some 20,000 documents)
	// drains in seconds, not in the half minute 4 lanes take.
	c := startBinary(t, append(consumeArgs(srv.URL(), "bp", "mirror", "c1", dst.URL()), "--workers", "16")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer:\n%s", tail(c.out.String(), 30))
		}
	})
	waitCaughtUp(t, src, f.store, []string{orders}, 60*time.Second)
	// The stream is trimmed as the group acks, so compare the target itself
	// (deletes come from scans, after the reads caught up).
	docs := waitTargetMirror(t, src, dst, orders, 60*time.Second)
	waitGroupDone(t, rdb, keys.Events(), "mirror", 30*time.Second)
	for deadline := time.Now().Add(30 * time.Second); backpressureSince(t, rdb, keys) != ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("backpressure still recorded in the feed's meta 30 s after the group caught up:\n%s", logs)
		}
	}
	t.Logf("stream peaked at %d entries with --max-backlog 300 while writers wrote; used_memory %d bytes when paused, %d after; mirror exact with %d documents after the consumer resumed", maxLen, memPaused, memEnd, docs)
	c.kill()
}

// TestMetrics_ScrapedDuringMirror: run and consume serve /metrics with the
// documented names, /healthz, /readyz and the status page.
func TestMetrics_ScrapedDuringMirror(t *testing.T) {
	src := esCluster(t, esemu.Config{})
	dst := mirrorTarget(t, src, esemu.Config{})
	orders := src.Index("orders")
	createIndex(t, src, orders, 2, 0)
	createIndex(t, dst, orders, 1, 0)
	srv := redistest.Start(t)
	relayAddr, consumeAddr := closedPort(t), closedPort(t)
	r := startBinary(t, relayArgs(src, srv.URL(), "m", orders, "--deletes", "--delete-scan-interval", "50ms", "--delete-scan-budget", "1", "--metrics-addr", relayAddr, "--trim")...)
	cons := startBinary(t, append(consumeArgs(srv.URL(), "m", "mirror", "c1", dst.URL()), "--metrics-addr", consumeAddr)...)
	for i := 0; i < 50; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", src.URL(), orders, i), `{}`)
	}
	// Delivered first: a document deleted before the relay ever read it
	// needs no delete event, and the delete counter would never appear.
	waitCaughtUp(t, src, storeFor(t, srv, "m"), []string{orders}, 10*time.Second)
	for i := 0; i < 50; i += 10 {
		mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/%d", src.URL(), orders, i), "")
	}
	waitCaughtUp(t, src, storeFor(t, srv, "m"), []string{orders}, 10*time.Second)
	get := func(url string) (int, string) {
		// The consumer serves its metrics once it found the feed (it may
		// start before the relay: --wait-for-feed).
		resp, err := http.Get(url)
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			resp, err = http.Get(url)
		}
		if err != nil {
			t.Fatalf("%v\nrelay:\n%s\nconsumer:\n%s", err, r.out, cons.out)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, body = get("http://" + relayAddr + "/metrics")
		if strings.Contains(body, `escf_events_written_total{op="delete"}`) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range []string{`escf_events_written_total{op="upsert"}`, `escf_events_written_total{op="delete"}`, "escf_commits_total",
		"escf_commit_duration_seconds_bucket", `escf_shard_checkpoint{index="` + orders + `",shard="0"}`, `escf_shard_global_checkpoint{index="` + orders + `",shard="1"}`,
		"escf_rounds_total", "escf_poll_ticks_total", "escf_target_resolutions_total", `escf_delete_scans_total{result="saved_by_gap_proof"}`, `escf_delete_ranges_total{result="compared"}`,
		"escf_delete_listed_ids_total", "escf_stream_entries", "escf_lease_held 1", "escf_backpressure 0",
		"escf_dead_letter_entries"} {
		if !strings.Contains(body, name) {
			t.Errorf("relay /metrics lacks %s\n%s", name, r.out)
		}
	}
	var cbody string
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, cbody = get("http://" + consumeAddr + "/metrics")
		if strings.Contains(cbody, `escf_group_lag_entries{feed="m",group="mirror"} 0`) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range []string{`escf_consumer_events_total{group="mirror",result="handled"}`, `escf_handler_duration_seconds_bucket{group="mirror"`,
		`escf_group_lag_entries{feed="m",group="mirror"} 0`, `escf_group_pending_entries{feed="m",group="mirror"}`, `escf_consumer_events_total{group="mirror",result="dead_lettered"} 0`} {
		if !strings.Contains(cbody, name) {
			t.Errorf("consume /metrics lacks %s", name)
		}
	}
	if code, b := get("http://" + relayAddr + "/healthz"); code != 200 || !strings.Contains(b, "leading") {
		t.Errorf("/healthz: %d %s", code, b)
	}
	if code, b := get("http://" + relayAddr + "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, b)
	}
	if code, page := get("http://" + relayAddr + "/"); code != 200 || !strings.Contains(page, "<html") || !strings.Contains(page, orders) {
		t.Errorf("status page: %d\n%.300s", code, page)
	}
	if code, js := get("http://" + relayAddr + "/status.json"); code != 200 || !strings.Contains(js, `"feed":"m"`) {
		t.Errorf("/status.json: %d %.300s", code, js)
	}
	r.kill()
	cons.kill()
}

// TestStatus_OnRunningDemo: status reads the demo's embedded Redis while the
// demo runs (text and JSON) and reports its lease, shards and stream.
func TestStatus_OnRunningDemo(t *testing.T) {
	// The demo writes for a minute (it is killed when the test ends): the
	// checks below run while it writes, however slowly it starts.
	p := startBinary(t, "demo", "--duration", "1m", "--log-level", "warn")
	deadline := time.Now().Add(10 * time.Second)
	addr := ""
	for addr == "" && time.Now().Before(deadline) {
		if i := strings.Index(p.out.String(), "embedded Redis at "); i >= 0 {
			rest := p.out.String()[i+len("embedded Redis at "):]
			if j := strings.IndexAny(rest, ";\n"); j > 0 {
				addr = rest[:j]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("no Redis address in the demo's output:\n%s", p.out)
	}
	// Until the demo's relay leads, follows the index and wrote entries,
	// status rightly says otherwise: ask until it says so (or 30 s).
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, out := runBinary(t, 30*time.Second, "status", "--redis", "redis://"+addr+"/0", "--feed", "demo")
		if code == 0 && strings.Contains(out, "feed demo: healthy") && strings.Contains(out, "demo-orders") && strings.Contains(out, "lease: held by demo/") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status on the running demo: exit %d\n%s\ndemo:\n%s", code, out, tail(p.out.String(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		code, rep, _ := statusJSON(t, "--redis", "redis://"+addr+"/0", "--feed", "demo")
		if code == 0 && rep["stream"].(map[string]any)["length"].(float64) > 0 && len(rep["indices"].([]any)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --json on the running demo: exit %d, %v", code, rep)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTrim_NoGroupKeepsMaxStreamLen: without any consumer group, --trim
// keeps the newest --max-stream-len entries.
func TestTrim_NoGroupKeepsMaxStreamLen(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	nogroup := c.Index("nogroup")
	createIndex(t, c, nogroup, 1, 0)
	srv := redistest.Start(t)
	logs := &lockedLog{}
	f := startRelay(t, c, srv.URL(), "nogroup", []string{nogroup}, func(cfg *relay.Config) {
		cfg.Trim, cfg.TrimInterval, cfg.MaxStreamLen = true, 50*time.Millisecond, 30
		cfg.Logger = newTestLogger(logs)
	})
	for i := 0; i < 100; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), nogroup, i), `{}`)
	}
	waitCaughtUp(t, c, f.store, []string{nogroup}, 10*time.Second)
	// Without groups the relay trims with XTRIM MAXLEN once the stream is
	// longer than --max-stream-len: wait for that, not for a time.
	for deadline := time.Now().Add(30 * time.Second); f.rdb.XLen(context.Background(), f.keys.Events()).Val() > 30; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries 30 s after catching up; want the newest 30", f.rdb.XLen(context.Background(), f.keys.Events()).Val())
		}
	}
	evs := entries(t, f.rdb, f.keys.Events())
	if len(evs) != 30 || evs[len(evs)-1].ID != "99" {
		t.Fatalf("%d entries kept (last %q); want the newest 30", len(evs), evs[len(evs)-1].ID)
	}
	if !strings.Contains(logs.String(), "no consumer group") {
		t.Errorf("no warning about trimming without groups:\n%s", logs)
	}
}

// backpressureSince is the feed's record of backpressure (the meta field
// status reads): when the relay paused, "" while it reads.
func backpressureSince(tb testing.TB, rdb *redis.Client, keys redisx.Keys) string {
	tb.Helper()
	v, err := rdb.HGet(context.Background(), keys.Meta(), checkpoint.MetaBackpressure).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	return v
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.InfoMap(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatalf("INFO memory: used_memory: %v", err)
	}
	return n
}
