package e2e

// A power failure on the host of the feed's Redis, the relay and a
// consumer (issue 23): Redis runs with appendfsync everysec and a shim
// that makes its fsyncs slow, so a SIGKILL loses commits it acknowledged,
// every time; the three processes are SIGKILLed together, started again,
// and the documents of the lost entries are deleted in the source. The
// consumer's sink must end up equal to the source, or a program must say
// what to run (and after running it the sink is equal): never a silent
// difference.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestPowerFailure_ExactOrLoud runs the power failure for the bulk
// mirror, the Redis cache (its own Redis, appendfsync always) and the file
// sink, ESCF_POWER_RUNS times each (default 1).
func TestPowerFailure_ExactOrLoud(t *testing.T) {
	t.Parallel()
	binary(t)
	runs := 1
	if v := os.Getenv("ESCF_POWER_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ESCF_POWER_RUNS=%q: want a count >= 1", v)
		}
		runs = n
	}
	for _, sinkName := range []string{"bulk", "redis", "file"} {
		t.Run(sinkName, func(t *testing.T) {
			t.Parallel()
			for i := range runs {
				t.Run(fmt.Sprintf("run-%d", i+1), func(t *testing.T) { powerFailureRun(t, sinkName, i) })
			}
		})
	}
}

// pfRig is one power-failure run.
type pfRig struct {
	sink   string
	src    testCluster
	index  string
	srv    *redistest.Server // the feed's Redis (everysec, slow fsyncs)
	rdb    *redis.Client
	feed   string
	keys   redisx.Keys
	store  *checkpoint.Store
	dst    testCluster       // bulk
	cache  *redistest.Server // redis
	file   string            // file
	relay  *proc
	cons   *proc
	tap    *streamTap
	writer *pfWriter
}

func powerFailureRun(t *testing.T, sinkName string, run int) {
	r := &pfRig{sink: sinkName}
	r.src = esCluster(t, esemu.Config{Nodes: 1})
	r.index = r.src.Index(fmt.Sprintf("pf-%s-%d", sinkName, run))
	createIndex(t, r.src, r.index, 3, 0)
	r.srv = redistest.Start(t, redistest.Options{SlowFsync: time.Second,
		Args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0"}})
	r.rdb = r.srv.Client(t)
	r.feed = fmt.Sprintf("pf-%s-%d", sinkName, run)
	r.keys = redisx.NewKeys(r.feed)
	r.store = storeFor(t, r.srv, r.feed)
	switch sinkName {
	case "bulk":
		r.dst = mirrorTarget(t, r.src, esemu.Config{})
	case "redis":
		r.cache = redistest.Start(t, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	case "file":
		r.file = filepath.Join(t.TempDir(), "events.jsonl")
	}
	r.writer = &pfWriter{url: r.src.URL(), index: r.index, rng: rand.New(rand.NewPCG(uint64(run), 23))}
	stopWriter := r.writer.start(t)
	defer stopWriter()
	r.tap = startTap(t, r.rdb, r.keys.Events())
	r.relay = startBinary(t, r.relayArgs()...)
	r.cons = startBinary(t, r.consumeArgs(false)...)

	// Load, with the consumer applying, until Redis holds acknowledged
	// commits it has not written to its append-only file yet.
	waitEntries(t, r.rdb, r.keys.Events(), 300, 60*time.Second)
	before := r.cutPower(t)
	r.srv.StartAgain()
	after := r.commits(t)
	lostEntries := r.tap.after(r.lastID(t))
	if after >= before.commits || len(lostEntries) == 0 {
		t.Fatalf("the power failure lost nothing: commits %d acknowledged, %d after; %d entries seen lost", before.commits, after, len(lostEntries))
	}
	r.relay = startBinary(t, r.relayArgs()...)
	r.cons = startBinary(t, r.consumeArgs(false)...)
	// The documents of the lost entries (the newest writes) are deleted.
	deleted := r.writer.deleteSeen(t, lostEntries)
	stopWriter()

	said := r.settle(t)
	diff, docs := r.diff(t)
	if diff != "" {
		t.Errorf("after the power failure the %s sink differs from the source, and %s:\n%s", sinkName, said, diff)
	}
	silent := 0
	if diff != "" && !strings.Contains(said, "exited") {
		silent = 1
	}
	record(t, figure{Scenario: fmt.Sprintf("power failure (Redis everysec + slow fsync, relay and %s consumer SIGKILLed together)", sinkName),
		Faults: 1, Entries: len(r.tap.all()), Docs: docs, Lost: silent,
		Note: fmt.Sprintf("%d commits acknowledged and lost (%d entries the tap had seen), %d of their documents deleted after the restart; %s",
			before.commits-after, len(lostEntries), deleted, said)})
}

func (r *pfRig) relayArgs() []string {
	return relayArgs(r.src, r.srv.URL(), r.feed, r.index, "--deletes", "--delete-scan-interval", "200ms", "--delete-scan-budget", "1")
}

// consumeArgs are the consumer's flags; bootstrap adds --bootstrap (from
// the source cluster).
func (r *pfRig) consumeArgs(bootstrap bool) []string {
	args := []string{"consume", "--redis", r.srv.URL(), "--feed", r.feed, "--group", rigGroup, "--consumer", "c0",
		"--workers", "4", "--min-idle", "500ms", "--shutdown-timeout", "5s", "--wait-for-feed", "1m", "--repair-grace", "3s",
		"--sink", r.sink}
	switch r.sink {
	case "bulk":
		args = append(args, "--bulk-es", r.dst.URL())
	case "redis":
		args = append(args, "--cache-redis", r.cache.URL(), "--cache-mode", "set", "--cache-key", "cache:{index}:{id}")
	case "file":
		args = append(args, "--file-path", r.file)
	}
	if bootstrap {
		args = append(append(args, "--bootstrap", "--index", r.index), inspect(r.src).cliArgs()...)
	}
	return args
}

// powerCut is the feed's Redis at the moment of the cut.
type powerCut struct {
	commits int64 // the meta commit counter: commits acknowledged
}

// cutPower waits until Redis holds acknowledged writes it has not written
// to its AOF yet, then SIGKILLs it, the relay and the consumer at once.
func (r *pfRig) cutPower(t *testing.T) powerCut {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A commit acknowledged between the readings was held back too: the
		// cut loses it.
		var first, commits *redis.StringCmd
		held, err := redistest.AOFHeldBack(ctx, r.rdb, func(p redis.Pipeliner, second bool) {
			if second {
				commits = p.HGet(ctx, r.keys.Meta(), checkpoint.MetaCommits)
			} else {
				first = p.HGet(ctx, r.keys.Meta(), checkpoint.MetaCommits)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if held && commits.Val() != first.Val() {
			r.srv.Stop()
			r.relay.kill()
			r.cons.kill()
			n, _ := strconv.ParseInt(commits.Val(), 10, 64)
			t.Logf("power cut: %d commits acknowledged, writes held back from the AOF", n)
			return powerCut{commits: n}
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis never held writes back from its AOF within 30s: the slow-fsync shim is not working")
		}
	}
}

func (r *pfRig) commits(t *testing.T) int64 {
	t.Helper()
	n, err := r.rdb.HGet(context.Background(), r.keys.Meta(), checkpoint.MetaCommits).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *pfRig) lastID(t *testing.T) string {
	t.Helper()
	st, err := redisx.ReadStream(context.Background(), r.rdb, r.keys.Events())
	if err != nil {
		t.Fatal(err)
	}
	return st.LastID
}

// settle waits until the feed caught up with the source and the consumer
// either made its sink equal to the source or exited; an exit with
// "history lost" is followed as its message says: consume --bootstrap,
// which must then make the sink equal. It returns what the programs said.
func (r *pfRig) settle(t *testing.T) string {
	t.Helper()
	waitCaughtUp(t, r.src, r.store, []string{r.index}, 90*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !binaryRunning(r.cons) {
			_ = r.cons.cmd.Wait()
			code := r.cons.cmd.ProcessState.ExitCode()
			out := r.cons.out.String()
			line := lastLineWith(out, "history lost")
			if code == 0 || line == "" || !strings.Contains(out, "--bootstrap") {
				t.Fatalf("the consumer exited %d without saying history lost and to run --bootstrap:\n%s", code, out)
			}
			r.cons = startBinary(t, r.consumeArgs(true)...)
			waitGroupDone(t, r.rdb, r.keys.Events(), rigGroup, 60*time.Second)
			if d := r.waitEqual(t, 60*time.Second); d != "" {
				t.Fatalf("after consume --bootstrap the %s sink still differs:\n%s\nconsumer:\n%s", r.sink, d, r.cons.out.String())
			}
			return fmt.Sprintf("consume exited %d (%q), then consume --bootstrap made the sink equal", code, truncate(line, 200))
		}
		if d, _ := r.diff(t); d == "" && groupDone(r.rdb, r.keys.Events(), rigGroup) {
			// Equal now: it must stay so while the relay's delete scans run.
			time.Sleep(time.Second)
			if d, _ := r.diff(t); d == "" && binaryRunning(r.cons) {
				return "the consumer went on and its sink is equal to the source (it had applied none of the lost entries' documents that were deleted, or the feed repaired itself)"
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "the consumer kept running and said nothing"
}

func (r *pfRig) waitEqual(t *testing.T, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, _ := r.diff(t)
		if d == "" || time.Now().After(deadline) {
			return d
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func groupDone(rdb *redis.Client, stream, group string) bool {
	groups, err := rdb.XInfoGroups(context.Background(), stream).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == group {
			return g.Lag == 0 && g.Pending == 0
		}
	}
	return false
}

func lastLineWith(out, sub string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// diff says how the sink differs from the source ("" when equal) and how
// many documents the source holds.
func (r *pfRig) diff(t *testing.T) (string, int) {
	t.Helper()
	switch r.sink {
	case "bulk":
		return diffMirror(t, r.src, r.dst, r.index)
	}
	want := map[string]string{}
	for k, d := range clusterDocs(t, r.src, r.index) {
		want[k.id] = d.source
	}
	var got map[string]string
	if r.sink == "redis" {
		got = cacheDocs(t, r.cache.Client(t), "cache:"+r.index+":")
	} else {
		got = fileDocs(t, r.file, r.index)
	}
	var problems []string
	for id, src := range want {
		if g, ok := got[id]; !ok {
			problems = append(problems, "missing "+id)
		} else if g != src {
			problems = append(problems, fmt.Sprintf("%s: %s, want %s", id, g, src))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			problems = append(problems, "kept "+id+" (deleted in the source)")
		}
	}
	if len(problems) > 15 {
		problems = append(problems[:15], fmt.Sprintf("… %d in all", len(problems)))
	}
	return strings.Join(problems, "\n"), len(want)
}

// cacheDocs reads the cache's keys under prefix: id -> compact JSON.
func cacheDocs(tb testing.TB, c *redis.Client, prefix string) map[string]string {
	tb.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := c.Get(ctx, iter.Val()).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		out[strings.TrimPrefix(iter.Val(), prefix)] = compact([]byte(v))
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// fileDocs replays the file sink's JSON lines for one index as a reader
// would: per document the event with the highest order wins (a delete
// removes it), and a snapshot_end removes the documents the snapshot of
// its index did not carry.
func fileDocs(tb testing.TB, path, index string) map[string]string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	type state struct {
		order  int64
		source string
		live   bool
	}
	docs := map[string]*state{} // shard/id
	var snap map[string]bool
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct {
			Op     string          `json:"op"`
			Index  string          `json:"index"`
			Shard  int             `json:"shard"`
			ID     string          `json:"id"`
			SeqNo  int64           `json:"seq_no"`
			Source json.RawMessage `json:"source"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			tb.Fatalf("%s: %v: %s", path, err, sc.Text())
		}
		if e.Index != index && e.Index != "" {
			continue
		}
		k := fmt.Sprintf("%d/%s", e.Shard, e.ID)
		switch e.Op {
		case "snapshot_start":
			snap = map[string]bool{}
		case "snapshot_end":
			for k := range docs {
				if !snap[k] {
					delete(docs, k)
				}
			}
			snap = nil
		case "upsert", "delete":
			order := 2 * e.SeqNo
			if e.Op == "delete" {
				order++
			}
			if snap != nil && e.Op == "upsert" {
				snap[k] = true
			}
			if s, ok := docs[k]; ok && s.order >= order {
				continue
			}
			docs[k] = &state{order: order, source: compact(e.Source), live: e.Op == "upsert"}
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for k, s := range docs {
		if s.live {
			_, id, _ := strings.Cut(k, "/")
			out[id] = s.source
		}
	}
	return out
}

// waitEntries waits until the stream has at least n entries.
func waitEntries(tb testing.TB, rdb *redis.Client, stream string, n int64, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l, _ := rdb.XLen(context.Background(), stream).Result(); l >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the stream did not reach %d entries within %s", n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamTap reads a stream as entries arrive (XREAD, no group) and keeps
// every entry it saw, so that a test knows what a Redis that went back in
// time had acknowledged, readers may have seen, and then lost.
type streamTap struct {
	mu   sync.Mutex
	seen []redisx.Event
	ids  map[string]bool
}

func startTap(tb testing.TB, rdb *redis.Client, stream string) *streamTap {
	tb.Helper()
	tap := &streamTap{ids: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := "0-0"
		for ctx.Err() == nil {
			res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 1000, Block: 50 * time.Millisecond}).Result()
			if err != nil {
				if !errors.Is(err, redis.Nil) {
					time.Sleep(20 * time.Millisecond)
				}
				if errors.Is(err, redis.Nil) {
					// After a restart the stream may end before last: read
					// from its end on, entries with new ids.
					if st, serr := redisx.ReadStream(ctx, rdb, stream); serr == nil && redisx.LessID(st.LastID, last) {
						last = st.LastID
					}
				}
				continue
			}
			tap.mu.Lock()
			for _, m := range res[0].Messages {
				if tap.ids[m.ID] {
					continue
				}
				ev, err := redisx.ParseEvent(m)
				if err == nil {
					tap.ids[m.ID] = true
					tap.seen = append(tap.seen, ev)
				}
				last = m.ID
			}
			tap.mu.Unlock()
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return tap
}

// after returns the entries seen with ids after id.
func (tap *streamTap) after(id string) []redisx.Event {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	var out []redisx.Event
	for _, e := range tap.seen {
		if redisx.LessID(id, e.StreamID) {
			out = append(out, e)
		}
	}
	return out
}

func (tap *streamTap) all() []redisx.Event {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return append([]redisx.Event(nil), tap.seen...)
}

// pfWriter creates, updates and deletes documents of one index.
type pfWriter struct {
	url, index string
	rng        *rand.Rand
	mu         sync.Mutex
	live       []string
	next       int
	ops        int
}

// start writes until the returned stop is called (idempotent).
func (w *pfWriter) start(tb testing.TB) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			w.one(tb)
		}
	}()
	var once sync.Once
	s := func() { once.Do(func() { close(stop); <-done }) }
	tb.Cleanup(s)
	return s
}

func (w *pfWriter) one(tb testing.TB) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops++
	switch r := w.rng.IntN(10); {
	case r < 6 || len(w.live) < 20:
		id := fmt.Sprintf("d%d", w.next)
		w.next++
		if st, _, err := tryDo("PUT", w.url+"/"+w.index+"/_doc/"+id, fmt.Sprintf(`{"n":%d,"v":0}`, w.next)); err == nil && st/100 == 2 {
			w.live = append(w.live, id)
		}
	case r < 9:
		id := w.live[w.rng.IntN(len(w.live))]
		_, _, _ = tryDo("PUT", w.url+"/"+w.index+"/_doc/"+id, fmt.Sprintf(`{"n":%d,"v":%d}`, w.next, w.ops))
	default:
		i := w.rng.IntN(len(w.live))
		id := w.live[i]
		if st, _, err := tryDo("DELETE", w.url+"/"+w.index+"/_doc/"+id, ""); err == nil && st/100 == 2 {
			w.live = append(w.live[:i], w.live[i+1:]...)
		}
	}
}

// deleteSeen deletes the live documents that upserts among evs carried,
// and returns how many it deleted.
func (w *pfWriter) deleteSeen(tb testing.TB, evs []redisx.Event) int {
	tb.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[string]bool{}
	for _, e := range evs {
		if e.Op == redisx.OpUpsert {
			want[e.ID] = true
		}
	}
	n := 0
	for i := 0; i < len(w.live); {
		id := w.live[i]
		if !want[id] {
			i++
			continue
		}
		mustDo(tb, "DELETE", w.url+"/"+w.index+"/_doc/"+id, "")
		w.live = append(w.live[:i], w.live[i+1:]...)
		n++
	}
	return n
}

// TestPowerFailure_CacheRedisGoesBack: the Redis cache sink's own Redis
// (appendfsync everysec, fsyncs slowed) is SIGKILLed with applied writes
// not yet in its AOF, alone and then together with the consumer: it comes
// back without writes the group had acknowledged. The consumer notices —
// the position the cache records goes back with it, below what the feed's
// Redis says it recorded — and hands the entries from the cache's low
// water on again: the cache equals the source, nothing to run.
func TestPowerFailure_CacheRedisGoesBack(t *testing.T) {
	t.Parallel()
	binary(t)
	for _, withConsumer := range []bool{false, true} {
		name := "cache Redis alone"
		if withConsumer {
			name = "cache Redis and consumer"
		}
		t.Run(name, func(t *testing.T) {
			r := &pfRig{sink: "redis"}
			r.src = esCluster(t, esemu.Config{Nodes: 1})
			r.index = r.src.Index(fmt.Sprintf("cache-back-%v", withConsumer))
			createIndex(t, r.src, r.index, 3, 0)
			r.srv = redistest.Start(t, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
			r.rdb = r.srv.Client(t)
			r.feed = fmt.Sprintf("cache-back-%v", withConsumer)
			r.keys = redisx.NewKeys(r.feed)
			r.store = storeFor(t, r.srv, r.feed)
			r.cache = redistest.Start(t, redistest.Options{SlowFsync: time.Second,
				Args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0"}})
			r.writer = &pfWriter{url: r.src.URL(), index: r.index, rng: rand.New(rand.NewPCG(7, 23))}
			stopWriter := r.writer.start(t)
			defer stopWriter()
			r.relay = startBinary(t, r.relayArgs()...)
			r.cons = startBinary(t, r.consumeArgs(false)...)
			waitEntries(t, r.rdb, r.keys.Events(), 300, 60*time.Second)
			time.Sleep(3 * time.Second) // the cache's Redis writes its AOF at least once
			cacheClient := r.cache.Client(t)
			ctx := context.Background()
			for deadline := time.Now().Add(30 * time.Second); ; {
				held, err := redistest.AOFHeldBack(ctx, cacheClient, nil)
				if err != nil {
					t.Fatal(err)
				}
				if held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the cache's Redis never held writes back from its AOF within 30s")
				}
			}
			if withConsumer {
				r.cons.kill()
			}
			r.cache.Stop()
			r.cache.StartAgain()
			if withConsumer {
				r.cons = startBinary(t, r.consumeArgs(false)...)
			}
			time.Sleep(time.Second)
			stopWriter()
			waitCaughtUp(t, r.src, r.store, []string{r.index}, 60*time.Second)
			waitGroupDone(t, r.rdb, r.keys.Events(), rigGroup, 60*time.Second)
			if d := r.waitEqual(t, 30*time.Second); d != "" {
				t.Fatalf("the cache differs from the source after its Redis went back:\n%s\nconsumer:\n%s", d, r.cons.out.String())
			}
			if !binaryRunning(r.cons) {
				t.Fatalf("the consumer exited:\n%s", r.cons.out.String())
			}
			_, docs := r.diff(t)
			record(t, figure{Scenario: "the Redis cache's own Redis SIGKILLed with applied writes not in its AOF (everysec, slow fsyncs), " + name,
				Faults: 1, Docs: docs,
				Note: "killed while it held applied writes back from its AOF; the consumer handed the entries from the cache's low water on again; the cache equals the source"})
		})
	}
}
