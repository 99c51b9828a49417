package e2e

// The example workers of examples/ (Python with redis-py, Node with
// ioredis) against a real relay: the stream is a public contract
// (docs/CONSUMING.md), and these tests hold consumers in other languages to
// it. Their packages are pinned and installed by `make examples` (make test
// runs it); a missing or stale install is a failure that names it.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// exampleWorker is one of the example workers: its name and the command
// that runs it (checked to be installed).
type exampleWorker struct {
	name string
	argv func(tb testing.TB) []string
}

var exampleWorkers = []exampleWorker{{"python", pythonWorker}, {"node", nodeWorker}}

const examplesHint = "run `make examples` (it installs the examples' pinned packages; make test runs it)"

// pythonWorker is examples/python/worker.py run by the venv's python
// (ESCF_EXAMPLES_VENV, default ~/.cache/escf-examples/venv), which must
// hold the redis-py of examples/python/requirements.txt.
func pythonWorker(tb testing.TB) []string {
	tb.Helper()
	venv := os.Getenv("ESCF_EXAMPLES_VENV")
	if venv == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			tb.Fatal(err)
		}
		venv = filepath.Join(home, ".cache", "escf-examples", "venv")
	}
	py := filepath.Join(venv, "bin", "python")
	req, err := os.ReadFile(filepath.Join("..", "..", "examples", "python", "requirements.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	want := ""
	for _, l := range strings.Split(string(req), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis=="); ok {
			want = v
		}
	}
	got, err := exec.Command(py, "-c", "import redis; print(redis.__version__)").Output()
	if err != nil || strings.TrimSpace(string(got)) != want {
		tb.Fatalf("the Python example needs redis-py %s in the venv %s (found %q, %v): %s",
			want, venv, strings.TrimSpace(string(got)), err, examplesHint)
	}
	return []string{py, filepath.Join("..", "..", "examples", "python", "worker.py")}
}

// nodeWorker is examples/node/worker.js run by node, with the ioredis of
// examples/node/package.json installed in examples/node/node_modules.
func nodeWorker(tb testing.TB) []string {
	tb.Helper()
	dir := filepath.Join("..", "..", "examples", "node")
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("node not found on PATH: %s", examplesHint)
	}
	var pkg, installed struct {
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		tb.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "node_modules", "ioredis", "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &installed)
	}
	if err != nil || installed.Version != pkg.Dependencies["ioredis"] {
		tb.Fatalf("the Node example needs ioredis %s in %s/node_modules (found %q, %v): %s",
			pkg.Dependencies["ioredis"], dir, installed.Version, err, examplesHint)
	}
	return []string{node, filepath.Join(dir, "worker.js")}
}

// workerProc is a running example worker (its own process group: a pool
// forks its consumers).
type workerProc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func startWorker(tb testing.TB, argv []string, name string, args ...string) *workerProc {
	tb.Helper()
	return startWorkerIn(tb, "", argv, name, args...)
}

// startWorkerIn starts the worker in the directory dir ("": the test's).
func startWorkerIn(tb testing.TB, dir string, argv []string, name string, args ...string) *workerProc {
	tb.Helper()
	w := &workerProc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(argv[0], append(argv[1:], args...)...)
	w.cmd.Dir = dir
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	tb.Cleanup(func() {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		<-w.done
		if tb.Failed() {
			tb.Logf("worker %s:\n%s", name, w.out)
		}
	})
	return w
}

// exit waits for the worker to end and returns its exit code (-1 for a
// signal, -2 if it did not end within timeout).
func (w *workerProc) exit(timeout time.Duration) int {
	select {
	case <-w.done:
		return w.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -2
	}
}

// stop sends SIGTERM and expects exit 0 (a pool drains its batches).
func (w *workerProc) stop(tb testing.TB) {
	tb.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.exit(15 * time.Second); code != 0 {
		tb.Fatalf("worker %s: exit %d after SIGTERM, want 0:\n%s", w.name, code, w.out)
	}
}

func exampleArgs(redisURL, feed, group, mirror string, extra ...string) []string {
	return append([]string{"--redis", redisURL, "--feed", feed, "--group", group, "--mirror", mirror,
		"--min-idle-ms", "1000", "--block-ms", "200", "--count", "50"}, extra...)
}

// exampleMirror is what a worker built (see the layout in worker.py).
type exampleMirror struct {
	indices map[string]string // uuid -> index name
	docs    map[docKey]string // source
	fences  map[docKey]string // "<order> <stream id>[ dropped]"
	gone    []string          // uuids of deleted indices
	hashes  []string          // every docs hash
}

func readExampleMirror(tb testing.TB, rdb *redis.Client, prefix string) exampleMirror {
	tb.Helper()
	ctx := context.Background()
	m := exampleMirror{docs: map[docKey]string{}, fences: map[docKey]string{}}
	var err error
	if m.indices, err = rdb.HGetAll(ctx, prefix+":indices").Result(); err != nil {
		tb.Fatal(err)
	}
	if m.gone, err = rdb.SMembers(ctx, prefix+":gone").Result(); err != nil {
		tb.Fatal(err)
	}
	read := func(kind string, into map[docKey]string) {
		iter := rdb.Scan(ctx, 0, prefix+":"+kind+":*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			uuid := strings.TrimPrefix(key, prefix+":"+kind+":")
			if kind == "docs" {
				m.hashes = append(m.hashes, key)
			}
			fields, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				tb.Fatal(err)
			}
			for f, v := range fields {
				shard, id, _ := strings.Cut(f, "/")
				n, err := strconv.Atoi(shard)
				if err != nil {
					tb.Fatalf("mirror %s field %q: no shard", key, f)
				}
				into[docKey{uuid, n, id}] = v
			}
		}
		if err := iter.Err(); err != nil {
			tb.Fatal(err)
		}
	}
	read("docs", m.docs)
	read("fence", m.fences)
	return m
}

// diffExampleMirror says how the mirror differs from the index's documents
// (ids, sources, and the fence's order 2*seq_no of each), "" when equal.
// The mirror must hold no other index's documents.
func diffExampleMirror(m exampleMirror, uuid string, want map[docKey]doc) string {
	var lines []string
	for k, d := range want {
		got, ok := m.docs[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("missing %v (seq %d)", k, d.seq))
		case compact([]byte(got)) != d.source:
			lines = append(lines, fmt.Sprintf("%v: source %s, want %s", k, got, d.source))
		case !strings.HasPrefix(m.fences[k], strconv.FormatInt(2*d.seq, 10)+" "):
			lines = append(lines, fmt.Sprintf("%v: fence %q, want order %d (seq %d)", k, m.fences[k], 2*d.seq, d.seq))
		}
	}
	for k := range m.docs {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("extra %v", k))
		}
	}
	for u := range m.indices {
		if u != uuid {
			lines = append(lines, fmt.Sprintf("index %s (%s) still listed", m.indices[u], u))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("… and %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// streamEvents reads the stream, skipping entries that are not events
// (the malformed one a test adds).
func streamEvents(tb testing.TB, rdb *redis.Client, stream string) []redisx.Event {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var out []redisx.Event
	for _, m := range msgs {
		if e, err := redisx.ParseEvent(m); err == nil {
			out = append(out, e)
		}
	}
	return out
}

// pendingOf is the number of entries pending for one consumer of a group.
func pendingOf(tb testing.TB, rdb *redis.Client, stream, group, consumer string) int {
	tb.Helper()
	p, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: group,
		Start: "-", End: "+", Count: 1 << 20, Consumer: consumer}).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return len(p)
}

// killHolding SIGKILLs the worker while it holds pending entries and
// returns how many it left pending: what the others must reclaim with
// XAUTOCLAIM. The other workers of the group are stopped (SIGSTOP) the
// while, so that the victim reads every new entry: it then holds entries
// whenever it handles a batch, and stopping it every 20 ms finds it so
// within a few tries. (Sampling every 200 ms beside two busy workers that
// win most reads found it holding nothing 100 times in a row on a loaded
// machine, in CI.) The others go on once it is dead.
func killHolding(tb testing.TB, w *workerProc, others []*workerProc, rdb *redis.Client, stream, group, consumer string) int {
	tb.Helper()
	for _, o := range others {
		_ = syscall.Kill(o.cmd.Process.Pid, syscall.SIGSTOP)
	}
	defer func() {
		for _, o := range others {
			_ = syscall.Kill(o.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	pid := w.cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if _, err := rdb.XInfoConsumers(context.Background(), stream, group).Result(); err != nil {
			continue // no group yet: the workers are starting
		}
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		if pendingOf(tb, rdb, stream, group, consumer) > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			w.exit(10 * time.Second)
			return pendingOf(tb, rdb, stream, group, consumer)
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	tb.Fatalf("worker %s never held a pending entry in 30s:\n%s", w.name, w.out)
	return 0
}

// TestExamples_Mirror runs each example worker as a pool of 3 consumers
// (a process with --consumers 2, and one alone) on the stream of a real
// relay (--deletes, --index-deleted-event) while 4 writers index, update
// and delete, with custom routing. The lone consumer is SIGKILLed while it
// holds pending entries, which the others must reclaim (XAUTOCLAIM); a
// malformed entry is added; a second index is deleted (index_deleted).
// Once the group has nothing pending and no lag, the mirror must equal the
// index exactly (ids, sources, orders) and hold nothing of the deleted
// index, the malformed entry must be in the dead letters, and the killed
// consumer must hold nothing. Then the feed's state is lost and resync
// rebuilds it while documents are deleted, updated and created: the
// workers must drop what the snapshot no longer holds, and the mirror must
// again equal the index exactly.
func TestExamples_Mirror(t *testing.T) {
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) { testExampleMirror(t, w) })
	}
}

func testExampleMirror(t *testing.T, ew exampleWorker) {
	c := cluster(t, esemu.Config{Nodes: 3, OutOfOrder: true})
	argv := ew.argv(t)
	ctx := context.Background()
	ix, old := "ex-orders", "ex-old"
	createIndex(t, c, ix, 3, 1)
	createIndex(t, c, old, 1, 0)
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/old-%d", c.URL(), old, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	feedName, group, mirror := "ex-"+ew.name, "mirror", "mirror:{ex}"
	keys := redisx.NewKeys(feedName)
	stream := keys.Events()
	relayFlags := []string{"--deletes", "--delete-scan-interval", "50ms", "--delete-scan-budget", "1", "--index-deleted-event"}
	relayProc := startBinary(t, relayArgs(c, srv.URL(), feedName, "ex-*", relayFlags...)...)
	store := storeFor(t, srv, feedName)

	args := exampleArgs(srv.URL(), feedName, group, mirror)
	pool := startWorker(t, argv, ew.name+" pool", append(args, "--consumers", "2", "--consumer", "pool")...)
	victim := startWorker(t, argv, ew.name+" victim", append(args, "--consumer", "victim")...)
	stopWriters := startWriters(t, c, ix, 4, 15, true, false)

	// The old index is delivered, then deleted: one index_deleted event.
	oldUUID := indexUUID(t, c, old)
	waitCaughtUp(t, c, store, []string{old}, 30*time.Second)
	mustDo(t, "DELETE", c.URL()+"/"+old, "")

	reclaimable := killHolding(t, victim, []*workerProc{pool}, rdb, stream, group, "victim")
	bad, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"op", "upsert", "index", ix,
		"index_uuid", "x", "shard", "0", "id", "bad", "seq_no", "not-a-number", "source", "{}"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	ws := stopWriters()
	ops, _ := writerOps(ws)

	uuid := indexUUID(t, c, ix)
	waitCaughtUp(t, c, store, []string{ix}, 30*time.Second)
	// Deletes come from scans after the reads caught up: wait until the
	// stream replays to the index, and the old index's end is in it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var mine []redisx.Event
		ended := false
		for _, e := range streamEvents(t, rdb, stream) {
			ended = ended || (e.Op == redisx.OpIndexDeleted && e.IndexUUID == oldUUID)
			if e.IndexUUID == uuid {
				mine = append(mine, e)
			}
		}
		diff := diffDocs(clusterDocs(t, c, ix), replay(mine))
		if diff == "" && ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not come to mirror %s (index_deleted of %s: %v) within 30s:\n%s", ix, old, ended, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitGroupDone(t, rdb, stream, group, 60*time.Second)

	m := readExampleMirror(t, rdb, mirror)
	want := clusterDocs(t, c, ix)
	if diff := diffExampleMirror(m, uuid, want); diff != "" {
		t.Fatalf("the %s workers' mirror differs from %s:\n%s", ew.name, ix, diff)
	}
	if len(m.gone) != 1 || m.gone[0] != oldUUID || len(m.hashes) != 1 {
		t.Fatalf("after index_deleted of %s (%s): gone %v, docs hashes %v; want only %s's", old, oldUUID, m.gone, m.hashes, ix)
	}
	if n := pendingOf(t, rdb, stream, group, "victim"); n != 0 {
		t.Fatalf("the killed consumer still holds %d entries: nobody reclaimed them", n)
	}
	dead, err := rdb.XRange(ctx, keys.Dead(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Values["stream_id"] != bad || dead[0].Values["group"] != group || dead[0].Values["error"] == "" {
		t.Fatalf("dead letters %v; want the malformed entry %s alone, with its group and error", dead, bad)
	}
	entriesBefore, _ := rdb.XLen(ctx, stream).Result()
	t.Logf("%s: %d writes, %d stream entries, a mirror of %d documents; the killed consumer left %d entries pending, all reclaimed; 1 dead letter",
		ew.name, ops, entriesBefore, len(m.docs), reclaimable)

	// The feed's state is lost (everything but the stream and the dead
	// letters); meanwhile documents go, change and come. resync rebuilds it.
	relayProc.kill()
	var lost []string
	iter := rdb.Scan(ctx, 0, keys.Pattern(), 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); k != stream && k != keys.Dead() {
			lost = append(lost, k)
		}
	}
	if err := iter.Err(); err != nil || len(lost) == 0 {
		t.Fatalf("the feed's state keys: %v, %v", lost, err)
	}
	if err := rdb.Del(ctx, lost...).Err(); err != nil {
		t.Fatal(err)
	}
	var ids []docKey
	for k := range want {
		ids = append(ids, k)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].id < ids[j].id })
	routing := func(k docKey) string {
		if r := want[k].routing; r != "" {
			return "?routing=" + r
		}
		return ""
	}
	deleted := 0
	for i, k := range ids {
		switch {
		case i%7 == 0:
			mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/%s%s", c.URL(), ix, k.id, routing(k)), "")
			deleted++
		case i%7 == 1:
			mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%s%s", c.URL(), ix, k.id, routing(k)), `{"changed":"while the state was lost"}`)
		}
	}
	for i := 0; i < 5; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/new-%d", c.URL(), ix, i), `{"new":true}`)
	}
	resync := startBinary(t, append([]string{"resync"}, relayArgs(c, srv.URL(), feedName, "ex-*", relayFlags...)[1:]...)...)
	deadline = time.Now().Add(30 * time.Second)
	for {
		ended := false
		for _, e := range streamEvents(t, rdb, stream) {
			ended = ended || e.Op == redisx.OpSnapshotEnd
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot_end in the stream 30s after resync started:\n%s", resync.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitCaughtUp(t, c, store, []string{ix}, 30*time.Second)
	waitGroupDone(t, rdb, stream, group, 60*time.Second)
	m = readExampleMirror(t, rdb, mirror)
	if diff := diffExampleMirror(m, uuid, clusterDocs(t, c, ix)); diff != "" {
		t.Fatalf("after resync the %s workers' mirror differs from %s (%d documents deleted while the state was lost):\n%s", ew.name, ix, deleted, diff)
	}
	entriesAfter, _ := rdb.XLen(ctx, stream).Result()
	t.Logf("%s: after resync (%d more entries; %d documents deleted while the state was lost, dropped at snapshot_end) the mirror holds the index's %d documents exactly",
		ew.name, entriesAfter-entriesBefore, deleted, len(m.docs))
	pool.stop(t)
	resync.kill()
}

// TestExamples_FromAnywhere: each example worker, started from another
// directory (the Python one by the system's python3, which runs it again
// with the venv of make examples when it lacks redis-py), mirrors a few
// events and prints once where its mirror is; the redis-cli commands it
// prints, run as printed, show the documents.
func TestExamples_FromAnywhere(t *testing.T) {
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found on PATH (Debian's redis-tools, installed with redis-server): %v", err)
	}
	for _, ew := range exampleWorkers {
		t.Run(ew.name, func(t *testing.T) {
			argv := ew.argv(t)
			script, err := filepath.Abs(argv[1])
			if err != nil {
				t.Fatal(err)
			}
			argv = []string{argv[0], script}
			if ew.name == "python" {
				if py, err := exec.LookPath("python3"); err == nil {
					argv[0] = py
				}
			}
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			feed, group, uuid := "anywhere-"+ew.name, "mirror", "u-"+ew.name
			stream := redisx.NewKeys(feed).Events()
			want := map[string]string{}
			for i := 0; i < 5; i++ {
				id, source := fmt.Sprintf("doc-%d", i), fmt.Sprintf(`{"n":%d}`, i)
				want["0/"+id] = source
				if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"op", "upsert", "index", "orders",
					"index_uuid", uuid, "shard", "0", "id", id, "seq_no", strconv.Itoa(i), "primary_term", "1",
					"version", "1", "source", source}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			w := startWorkerIn(t, t.TempDir(), argv, ew.name, "--redis", srv.URL(), "--feed", feed, "--group", group,
				"--consumers", "2", "--block-ms", "200")
			waitGroupDone(t, rdb, stream, group, 30*time.Second)

			out := w.out.String()
			if n := strings.Count(out, "look at it with:"); n != 1 {
				t.Fatalf("the %s pool printed where its mirror is %d times, want once:\n%s", ew.name, n, out)
			}
			var cmds []string
			for _, l := range strings.Split(out, "\n") {
				if c, _, ok := strings.Cut(strings.TrimSpace(l), "    #"); ok && strings.HasPrefix(c, "redis-cli ") {
					cmds = append(cmds, redisCLI+strings.TrimPrefix(c, "redis-cli"))
				}
			}
			if len(cmds) != 2 {
				t.Fatalf("the %s pool printed %d redis-cli commands, want 2 (indices, docs):\n%s", ew.name, len(cmds), out)
			}
			run := func(c string) map[string]string {
				b, err := exec.Command("sh", "-c", c).CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", c, err, b)
				}
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				got := map[string]string{}
				for i := 0; i+1 < len(lines); i += 2 {
					got[lines[i]] = lines[i+1]
				}
				return got
			}
			if got := run(cmds[0]); got[uuid] != "orders" || len(got) != 1 {
				t.Fatalf("the printed %s shows %v, want %s -> orders", cmds[0], got, uuid)
			}
			docs := strings.ReplaceAll(cmds[1], "<index uuid>", uuid)
			if got := run(docs); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("the printed %s shows %v, want %v", docs, got, want)
			}
			w.stop(t)
		})
	}
}

// TestExamples_HistoryLost: each example worker stops with exit 1 and a
// message naming the group, what was lost and what to do, acknowledging
// nothing it did not apply, when
//   - the stream was trimmed past the group (entries it never read are
//     gone: entries-added − entries-read − entries still after
//     last-delivered-id);
//   - the stream was trimmed past the group while the worker ran (between
//     its periodic checks): the read that sees the gap reads past it, so
//     the group's ids no longer show it, and a restart refuses the group
//     from the loss recorded in escf:{feed}:lost;
//   - entries pending for a dead consumer were trimmed (XAUTOCLAIM reports
//     their ids as deleted);
//   - a new group would start on a stream that no longer holds the feed
//     from its start.
func TestExamples_HistoryLost(t *testing.T) {
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) { testExampleHistoryLost(t, w) })
	}
}

func testExampleHistoryLost(t *testing.T, ew exampleWorker) {
	c := cluster(t, esemu.Config{})
	argv := ew.argv(t)
	ctx := context.Background()
	ix := "hl"
	createIndex(t, c, ix, 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	put := func(from, to int) {
		for i := from; i < to; i++ {
			mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%02d", c.URL(), ix, i), fmt.Sprintf(`{"n":%d}`, i))
		}
	}
	groupInfo := func(stream, group string) redis.XInfoGroup {
		t.Helper()
		gs, err := rdb.XInfoGroups(ctx, stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Name == group {
				return g
			}
		}
		t.Fatalf("no group %s on %s", group, stream)
		return redis.XInfoGroup{}
	}
	expectExit1 := func(w *workerProc, wants ...string) {
		t.Helper()
		if code := w.exit(20 * time.Second); code != 1 {
			t.Fatalf("worker %s: exit %d, want 1:\n%s", w.name, code, w.out)
		}
		for _, s := range wants {
			if !strings.Contains(w.out.String(), s) {
				t.Fatalf("worker %s: its output does not say %q:\n%s", w.name, s, w.out)
			}
		}
	}

	t.Run("trimmed past the group", func(t *testing.T) {
		f := startRelay(t, c, srv.URL(), "hl-"+ew.name, []string{ix}, nil)
		stream, mirror := f.keys.Events(), "mirror:{hl-a}"
		put(0, 20)
		waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
		w := startWorker(t, argv, ew.name+" a", exampleArgs(srv.URL(), f.name, "a", mirror, "--consumer", "a1")...)
		waitGroupDone(t, rdb, stream, "a", 20*time.Second)
		w.stop(t)
		applied := readExampleMirror(t, rdb, mirror)
		put(20, 40)
		waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
		if err := rdb.XTrimMaxLen(ctx, stream, 5).Err(); err != nil {
			t.Fatal(err)
		}
		before := groupInfo(stream, "a")
		// 40 entries added, 20 read, 5 left after the group's position.
		w = startWorker(t, argv, ew.name+" a again", exampleArgs(srv.URL(), f.name, "a", mirror, "--consumer", "a1")...)
		expectExit1(w, "history lost", "group a", "15 entries", "--bootstrap")
		after := groupInfo(stream, "a")
		if after.LastDeliveredID != before.LastDeliveredID || after.EntriesRead != before.EntriesRead || after.Pending != 0 {
			t.Fatalf("the group moved: before %+v, after %+v", before, after)
		}
		got := readExampleMirror(t, rdb, mirror)
		if len(got.docs) != 20 || fmt.Sprint(got.docs) != fmt.Sprint(applied.docs) {
			t.Fatalf("the mirror changed after history was lost: %d documents, before %d", len(got.docs), len(applied.docs))
		}

		// A new group on this stream would read it from a start it no
		// longer holds: refused, and no group is created.
		w = startWorker(t, argv, ew.name+" fresh", exampleArgs(srv.URL(), f.name, "fresh", "mirror:{hl-fresh}")...)
		expectExit1(w, "new group fresh", "no longer holds the feed from its start", "--bootstrap", "--start '$'")
		gs, _ := rdb.XInfoGroups(ctx, stream).Result()
		if len(gs) != 1 {
			t.Fatalf("groups %+v: the refused group was created", gs)
		}
	})

	t.Run("pending entries trimmed", func(t *testing.T) {
		f := startRelay(t, c, srv.URL(), "hl2-"+ew.name, []string{ix}, nil)
		stream, mirror := f.keys.Events(), "mirror:{hl-b}"
		waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
		// A consumer read 5 entries and died; 3 of them are trimmed.
		if err := rdb.XGroupCreate(ctx, stream, "b", "0").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "b", Consumer: "ghost", Streams: []string{stream, ">"}, Count: 5}).Result()
		if err != nil || len(got[0].Messages) != 5 {
			t.Fatalf("ghost read: %v %v", got, err)
		}
		msgs := got[0].Messages
		if err := rdb.XTrimMinID(ctx, stream, msgs[3].ID).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		w := startWorker(t, argv, ew.name+" b", exampleArgs(srv.URL(), f.name, "b", mirror, "--consumer", "b1", "--min-idle-ms", "300")...)
		expectExit1(w, "history lost", "group b", "3 pending entries are gone", "--bootstrap")
		// The 2 entries still there were claimed, not applied: still
		// pending, not acknowledged.
		if n := pendingOf(t, rdb, stream, "b", "b1") + pendingOf(t, rdb, stream, "b", "ghost"); n != 2 {
			t.Fatalf("%d entries pending, want the 2 that are still in the stream", n)
		}
		if m := readExampleMirror(t, rdb, mirror); len(m.docs) != 0 {
			t.Fatalf("the mirror holds %d documents: something was applied after history was lost", len(m.docs))
		}
	})

	t.Run("trimmed while it reads", func(t *testing.T) {
		f := startRelay(t, c, srv.URL(), "hl3-"+ew.name, []string{ix}, nil)
		stream, mirror := f.keys.Events(), "mirror:{hl-c}"
		waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
		// The history check every 30s does not come: only the checks made
		// with each read can see the gap.
		w := startWorker(t, argv, ew.name+" c", exampleArgs(srv.URL(), f.name, "c", mirror, "--consumer", "c1")...)
		waitGroupDone(t, rdb, stream, "c", 20*time.Second)
		applied := len(readExampleMirror(t, rdb, mirror).docs)
		_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGSTOP)
		put(40, 80)
		waitCaughtUp(t, c, f.store, []string{ix}, 10*time.Second)
		if err := rdb.XTrimMaxLen(ctx, stream, 5).Err(); err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT)
		expectExit1(w, "history lost", "group c", "35 entries", "--bootstrap")
		// The read that saw the gap read past it: by ids (redisx.ReadGroup,
		// status) the stream no longer shows it — only the read counters
		// still do — and what it read stays pending, unapplied.
		if _, g, _, err := redisx.ReadGroup(ctx, rdb, stream, "c"); err != nil || g.HistoryLost() || g.Pending != 5 {
			t.Fatalf("group after the stop: %+v, %v; want the gap read past (no loss visible) and the 5 entries after it pending", g, err)
		}
		if got := len(readExampleMirror(t, rdb, mirror).docs); got != applied {
			t.Fatalf("the mirror holds %d documents, %d before the gap: something after it was applied", got, applied)
		}
		w = startWorker(t, argv, ew.name+" c again", exampleArgs(srv.URL(), f.name, "c", mirror, "--consumer", "c1")...)
		expectExit1(w, "history lost", "recorded in "+f.keys.Lost(), "35 entries", "--bootstrap")
	})
}

// bootstrapPipeline runs the bootstrap of examples/README.md: es-changefeed
// consume --group G --bootstrap --bootstrap-only --sink stdout piped into
// the example's --apply-stdin, and expects both to exit 0. It returns what
// the applier wrote.
func bootstrapPipeline(tb testing.TB, c backend, argv []string, redisURL, feed, group, mirror string) string {
	tb.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	srcOut, appOut := &syncBuffer{}, &syncBuffer{}
	src := binaryCommand(tb, nil, append([]string{"consume", "--redis", redisURL, "--feed", feed, "--group", group,
		"--bootstrap", "--bootstrap-only", "--sink", "stdout"}, inspect(c).cliArgs()...)...)
	src.Stdout, src.Stderr = w, srcOut
	app := exec.Command(argv[0], append(argv[1:], "--apply-stdin", "--redis", redisURL, "--feed", feed,
		"--group", group, "--mirror", mirror)...)
	app.Stdin, app.Stdout, app.Stderr = r, appOut, appOut
	if err := app.Start(); err != nil {
		tb.Fatal(err)
	}
	if err := src.Start(); err != nil {
		tb.Fatal(err)
	}
	w.Close() // the children hold the ends now
	r.Close()
	wait := func(cmd *exec.Cmd) <-chan int {
		ch := make(chan int, 1)
		go func() { _ = cmd.Wait(); ch <- cmd.ProcessState.ExitCode() }()
		return ch
	}
	srcDone, appDone := wait(src), wait(app)
	timeout := time.After(2 * time.Minute)
	codes := map[string]int{}
	for len(codes) < 2 {
		select {
		case codes["es-changefeed"] = <-srcDone:
		case codes["applier"] = <-appDone:
		case <-timeout:
			_ = src.Process.Kill()
			_ = app.Process.Kill()
			tb.Fatalf("the bootstrap pipeline of group %s did not end within 2 minutes:\nes-changefeed:\n%s\n%s --apply-stdin:\n%s",
				group, tail(srcOut.String(), 20), argv[0], appOut)
		}
	}
	if codes["es-changefeed"] != 0 || codes["applier"] != 0 {
		tb.Fatalf("the bootstrap pipeline of group %s: es-changefeed exit %d, --apply-stdin exit %d; want 0 and 0:\nes-changefeed:\n%s\n--apply-stdin:\n%s",
			group, codes["es-changefeed"], codes["applier"], tail(srcOut.String(), 20), appOut)
	}
	return appOut.String()
}

// waitDelivered waits until the relay's delivered sets of the index hold
// exactly the index's documents: every delete a scan could find is in the
// stream (the stream itself, trimmed, can no longer be replayed).
// deliveredIDs returns the ids the feed recorded as delivered from one
// shard (its delivered ranges, and a set of the layout before them).
func deliveredIDs(tb testing.TB, rdb redis.UniversalClient, keys redisx.Keys, uuid string, shard int) []string {
	tb.Helper()
	docs, err := checkpoint.ReadDelivered(context.Background(), rdb, keys, checkpoint.ShardID{IndexUUID: uuid, Shard: shard})
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids
}

func waitDelivered(tb testing.TB, c backend, rdb *redis.Client, keys redisx.Keys, index string, shards int, timeout time.Duration) {
	tb.Helper()
	uuid := indexUUID(tb, c, index)
	deadline := time.Now().Add(timeout)
	for {
		want := clusterDocs(tb, c, index)
		got := map[docKey]bool{}
		for s := 0; s < shards; s++ {
			for _, id := range deliveredIDs(tb, rdb, keys, uuid, s) {
				got[docKey{uuid, s, id}] = true
			}
		}
		diff := 0
		for k := range want {
			if !got[k] {
				diff++
			}
		}
		if diff == 0 && len(got) == len(want) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the relay's delivered sets of %s did not come to its %d documents within %s (%d delivered, %d missing)",
				index, len(want), timeout, len(got), diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExamples_Bootstrap: an example worker pool mirrors a real relay's
// feed (--deletes, a 3-node emulator) while 4 writers index, update and
// delete, and is stopped. Then an index it mirrored is deleted, and so are
// 20 documents of its own; the writers go on until the stream is trimmed
// to a tenth, past the group, taking those deletes with it. The worker
// refuses the group (exit 1, history lost), records the loss, and refuses
// again from the record; a new group on the trimmed stream is refused too.
// While the writers still write, es-changefeed consume --bootstrap
// --bootstrap-only --sink stdout piped into the worker's --apply-stdin
// re-initializes the mirror (and builds a new one for the new group): the
// documents deleted during the gap are gone from it at once, the group is
// at the recorded position and healthy, and the workers resume. Once the
// writers stopped, the relay delivered everything and each group has lag
// 0 and nothing pending, both mirrors equal the index exactly.
func TestExamples_Bootstrap(t *testing.T) {
	for _, w := range exampleWorkers {
		t.Run(w.name, func(t *testing.T) { testExampleBootstrap(t, w) })
	}
}

func testExampleBootstrap(t *testing.T, ew exampleWorker) {
	c := cluster(t, esemu.Config{Nodes: 3, OutOfOrder: true})
	argv := ew.argv(t)
	ctx := context.Background()
	ix, old := "bs-orders", "bs-old"
	createIndex(t, c, ix, 3, 1)
	createIndex(t, c, old, 1, 0)
	for i := 0; i < 20; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/old-%d", c.URL(), old, i), fmt.Sprintf(`{"n":%d}`, i))
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/gap-%d", c.URL(), ix, i), fmt.Sprintf(`{"gap":%d}`, i))
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	feedName, group, mirror := "bs-"+ew.name, "mirror", "mirror:{bs}"
	fresh, freshMirror := "fresh", "mirror:{bs-fresh}"
	keys := redisx.NewKeys(feedName)
	stream := keys.Events()
	startBinary(t, relayArgs(c, srv.URL(), feedName, "bs-*", "--deletes", "--delete-scan-interval", "50ms", "--delete-scan-budget", "1")...)
	store := storeFor(t, srv, feedName)
	oldUUID, uuid := indexUUID(t, c, old), indexUUID(t, c, ix)
	// held reports which of the documents the gap takes the mirror holds.
	held := func(prefix string) (olds, gaps int) {
		m := readExampleMirror(t, rdb, prefix)
		for k := range m.docs {
			switch {
			case k.uuid == oldUUID:
				olds++
			case strings.HasPrefix(k.id, "gap-"):
				gaps++
			}
		}
		return olds, gaps
	}

	args := exampleArgs(srv.URL(), feedName, group, mirror)
	stopWriters := startWriters(t, c, ix, 4, 15, true, false)
	pool := startWorker(t, argv, ew.name+" pool", append(args, "--consumers", "2", "--consumer", "pool")...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if o, g := held(mirror); o == 20 && g == 20 && rdb.XLen(ctx, stream).Val() >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s pool did not mirror %s and the gap-* documents of %s within 30s", ew.name, old, ix)
		}
	}
	pool.stop(t)
	before := readExampleMirror(t, rdb, mirror)

	// The gap: an index and 20 documents the mirror holds are deleted, and
	// the relay writes their deletes; the stream grows, then is trimmed to
	// a tenth, past the group and those deletes.
	mustDo(t, "DELETE", c.URL()+"/"+old, "")
	for i := 0; i < 20; i++ {
		mustDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/gap-%d", c.URL(), ix, i), "")
	}
	deadline := time.Now().Add(30 * time.Second)
	for rdb.HExists(ctx, keys.Indices(), oldUUID).Val() || !gapDeleted(t, rdb, keys, uuid) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not end %s and delete the gap-* documents within 30s", old)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deletesAt := rdb.XLen(ctx, stream).Val()
	for target := deletesAt + 1000; rdb.XLen(ctx, stream).Val() < target; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline.Add(90 * time.Second)) {
			t.Fatalf("the stream did not reach %d entries", target)
		}
	}
	n := rdb.XLen(ctx, stream).Val()
	if err := rdb.XTrimMaxLen(ctx, stream, n/10).Err(); err != nil {
		t.Fatal(err)
	}
	st, g, _, err := redisx.ReadGroup(ctx, rdb, stream, group)
	if err != nil || g.LostUnread <= 0 || st.EntriesAdded-st.Length < deletesAt {
		t.Fatalf("after the trim: stream %+v, group %+v (%v); want the group's unread entries and the gap's deletes (the first %d entries) trimmed", st, g, err, deletesAt)
	}
	lost := g.LostUnread

	// Refused: found in the stream and recorded, then refused by the record.
	w := startWorker(t, argv, ew.name+" refused", append(args, "--consumer", "pool-1")...)
	if code := w.exit(20 * time.Second); code != 1 || !strings.Contains(w.out.String(), "history lost") || !strings.Contains(w.out.String(), "--bootstrap") {
		t.Fatalf("the %s worker on the trimmed group: exit %d, want 1 with history lost and --bootstrap:\n%s", ew.name, code, w.out)
	}
	if rec, _ := redisx.RecordedLoss(ctx, rdb, keys, group); !strings.HasPrefix(rec, "history lost") {
		t.Fatalf("%s field %s = %q; want the worker's history-lost message", keys.Lost(), group, rec)
	}
	if v := rdb.Get(ctx, mirror+":bootstrap").Val(); !strings.HasPrefix(v, "needed: history lost") {
		t.Fatalf("%s:bootstrap = %q; want it marked as needing a bootstrap", mirror, v)
	}
	w = startWorker(t, argv, ew.name+" refused again", append(args, "--consumer", "pool-1")...)
	if code := w.exit(20 * time.Second); code != 1 || !strings.Contains(w.out.String(), "recorded in "+keys.Lost()) {
		t.Fatalf("the %s worker restarted: exit %d, want 1 naming the record in %s:\n%s", ew.name, code, keys.Lost(), w.out)
	}
	freshArgs := exampleArgs(srv.URL(), feedName, fresh, freshMirror)
	w = startWorker(t, argv, ew.name+" fresh refused", freshArgs...)
	if code := w.exit(20 * time.Second); code != 1 || !strings.Contains(w.out.String(), "no longer holds the feed from its start") {
		t.Fatalf("the %s worker of a new group on the trimmed stream: exit %d, want 1:\n%s", ew.name, code, w.out)
	}

	// The bootstraps, while the writers write: then the workers resume.
	if got := readExampleMirror(t, rdb, mirror); fmt.Sprint(got.docs) != fmt.Sprint(before.docs) {
		t.Fatalf("the mirror changed while refused: %d documents, %d before", len(got.docs), len(before.docs))
	}
	out := bootstrapPipeline(t, c, argv, srv.URL(), feedName, group, mirror)
	if o, gp := held(mirror); o != 0 || gp != 0 {
		t.Fatalf("after the bootstrap the mirror still holds %d documents of the deleted %s and %d deleted gap-* documents:\n%s", o, old, gp, out)
	}
	_, g, _, err = redisx.ReadGroup(ctx, rdb, stream, group)
	rec, _ := redisx.RecordedLoss(ctx, rdb, keys, group)
	if err != nil || g.HistoryLost() || rec != "" || rdb.Exists(ctx, mirror+":bootstrap").Val() != 0 {
		t.Fatalf("after the bootstrap: group %+v (%v), recorded loss %q, marker %q; want a healthy group and neither",
			g, err, rec, rdb.Get(ctx, mirror+":bootstrap").Val())
	}
	copied := len(readExampleMirror(t, rdb, mirror).docs)
	pool = startWorker(t, argv, ew.name+" pool again", append(args, "--consumers", "2", "--consumer", "pool")...)
	bootstrapPipeline(t, c, argv, srv.URL(), feedName, fresh, freshMirror)
	copiedFresh := len(readExampleMirror(t, rdb, freshMirror).docs)
	freshPool := startWorker(t, argv, ew.name+" fresh pool", append(freshArgs, "--consumers", "2", "--consumer", "fresh")...)
	time.Sleep(2 * time.Second) // the workers follow the writers
	ws := stopWriters()
	ops, _ := writerOps(ws)

	waitCaughtUp(t, c, store, []string{ix}, 30*time.Second)
	waitDelivered(t, c, rdb, keys, ix, 3, 30*time.Second)
	want := clusterDocs(t, c, ix)
	for _, m := range []struct{ group, prefix string }{{group, mirror}, {fresh, freshMirror}} {
		waitGroupDone(t, rdb, stream, m.group, 60*time.Second)
		got := readExampleMirror(t, rdb, m.prefix)
		if diff := diffExampleMirror(got, uuid, want); diff != "" {
			t.Fatalf("the %s workers' mirror of group %s differs from %s after the bootstrap:\n%s", ew.name, m.group, ix, diff)
		}
	}
	if gs := rdb.XInfoGroups(ctx, stream).Val(); len(gs) != 2 {
		t.Fatalf("groups %+v; want %s and %s alone (the holding groups dropped)", gs, group, fresh)
	}
	t.Logf("%s: %d writes; the stream trimmed from %d to %d entries past the group (%d unread lost, the deletes of %s and of 20 documents among them); "+
		"the bootstrap left %d documents in the re-initialized mirror and %d in the new one, and both followed on to the index's %d documents exactly",
		ew.name, ops, n, n/10, lost, old, copied, copiedFresh, len(want))
	pool.stop(t)
	freshPool.stop(t)
}

// gapDeleted reports whether the relay delivered the deletes of the gap-*
// documents (none is in its delivered sets any more).
func gapDeleted(tb testing.TB, rdb *redis.Client, keys redisx.Keys, uuid string) bool {
	tb.Helper()
	for s := 0; s < 3; s++ {
		for _, id := range deliveredIDs(tb, rdb, keys, uuid, s) {
			if strings.HasPrefix(id, "gap-") {
				return false
			}
		}
	}
	return true
}
