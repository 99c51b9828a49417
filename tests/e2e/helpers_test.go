// Package e2e runs the feed end to end: the emulator as the cluster, a real
// redis-server, the relay in-process or as the built binary.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

// binaryPath is the es-changefeed binary built once for the package.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// raceBinary: binary builds es-changefeed with -race when this test binary
// is race-built (raceBuild), so that go test -race checks the relay and
// consumer processes the suite starts as well as its own code; on the
// emulator only. The real-cluster run (ESCF_TEST_ENGINE set, next to JVMs
// on CI's 2 cores) keeps plain binaries: over 7 binary-heavy tests,
// race-built ones took 14% more time and 17% more CPU (up to 59% more time
// for one), and CI's 40 minutes have little room left.
var raceBinary = raceBuild && os.Getenv("ESCF_TEST_ENGINE") == ""

// binary builds es-changefeed once for the package (with -race: see
// raceBinary). Start it with binaryCommand, which fails the test on a race
// report.
func binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "escf-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "es-changefeed")
		args := []string{"build", "-o", binPath}
		if raceBinary {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = filepath.Join("..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// raceExitCode is the exit code of a race-built subprocess that found a
// data race (GORACE exitcode; 66 is the race detector's own default).
const raceExitCode = 66

// binaryCommand is exec.Command of the es-changefeed binary with extra
// environment variables. When the binary is race-built, the race detector
// writes its reports to files of a directory of the test's (GORACE
// log_path: they do not mix with the output the test reads) and the test
// fails, at its end, for each "WARNING: DATA RACE" found there; a process
// that found one exits with raceExitCode.
func binaryCommand(tb testing.TB, env []string, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(binary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	if !raceBinary {
		return cmd
	}
	// Not tb.TempDir: its path holds the test's name, and the race
	// detector splits GORACE at commas and colons as well as spaces (a
	// subtest "a, b" made every process fail "expected '=' in GORACE").
	dir, err := os.MkdirTemp("", "escf-race-")
	if err != nil {
		tb.Fatal(err)
	}
	if strings.ContainsAny(dir, " ,:\t") {
		tb.Fatalf("temporary directory %q holds a GORACE separator: set TMPDIR to a plain path", dir)
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("GORACE=log_path=%s exitcode=%d", filepath.Join(dir, "race"), raceExitCode))
	// Cleanups run last-registered first: this one after those the caller
	// registers to stop the process.
	tb.Cleanup(func() {
		checkRaceReports(tb, dir, args)
		os.RemoveAll(dir)
	})
	return cmd
}

// checkRaceReports fails tb for each race report in dir.
func checkRaceReports(tb testing.TB, dir string, args []string) {
	tb.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "race*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Errorf("read the race report %s: %v", f, err)
			continue
		}
		if n := strings.Count(string(b), "WARNING: DATA RACE"); n > 0 {
			tb.Errorf("es-changefeed %s: %d data race(s) (%s):\n%s", strings.Join(args, " "), n, filepath.Base(f), b)
		}
	}
}

// httpDo sends a JSON request and returns status and body.
func httpDo(tb testing.TB, method, url, body string) (int, []byte) {
	tb.Helper()
	st, b, err := tryDo(method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	return st, b
}

// tryDo is httpDo that returns a request without an answer (a killed or
// paused node) as an error.
func tryDo(method, url, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	ct := "application/json"
	if strings.HasSuffix(strings.SplitN(url, "?", 2)[0], "/_bulk") {
		ct = "application/x-ndjson"
	}
	req.Header.Set("Content-Type", ct)
	resp, err := requestClient(req).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read the answer: %w", method, url, err)
	}
	return resp.StatusCode, b, nil
}

func mustDo(tb testing.TB, method, url, body string) []byte {
	tb.Helper()
	st, b := httpDo(tb, method, url, body)
	if st >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, url, st, b)
	}
	return b
}

func createIndex(tb testing.TB, c backend, name string, shards, replicas int) {
	tb.Helper()
	mustDo(tb, "PUT", c.URL()+"/"+name, fmt.Sprintf(`{"settings":{"number_of_shards":%d,"number_of_replicas":%d}}`, shards, replicas))
}

// feed is an in-process relay on a real Redis.
type feed struct {
	name  string
	rdb   *redis.Client
	keys  redisx.Keys
	store *checkpoint.Store
	lease *redisx.Lease
	stop  context.CancelFunc
	done  chan error

	scanner *deletes.Scanner
}

// startRelay runs a relay in-process until the test ends (or f.halt).
func startRelay(tb testing.TB, c backend, redisURL, feedName string, indices []string, mod func(*relay.Config)) *feed {
	tb.Helper()
	return startRelayDeletes(tb, c, redisURL, feedName, indices, nil, mod)
}

// startRelayDeletes is startRelay with delete detection when dmod is not
// nil (it may adjust the scanner's config; the interval defaults to 100ms).
func startRelayDeletes(tb testing.TB, c backend, redisURL, feedName string, indices []string, dmod func(*deletes.Config), mod func(*relay.Config)) *feed {
	tb.Helper()
	return startRelayLease(tb, c, redisURL, feedName, indices, time.Second, dmod, mod)
}

// startRelayLease is startRelayDeletes with a lease of the given TTL. The
// 1 s of the others makes takeovers quick, but a relay that a loaded
// machine stalls for 2/3 of it loses the lease and starts its index loops
// again: a test that counts what a relay asks in its steady state gives it
// the default TTL.
func startRelayLease(tb testing.TB, c backend, redisURL, feedName string, indices []string, ttl time.Duration, dmod func(*deletes.Config), mod func(*relay.Config)) *feed {
	tb.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { rdb.Close() })
	keys := redisx.NewKeys(feedName)
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: ttl, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	client, err := es.New(inspect(c).esConfig())
	if err != nil {
		tb.Fatal(err)
	}
	cfg := relay.Config{ES: client, Store: store, Lease: lease, Targets: indices, PollInterval: 50 * time.Millisecond,
		BatchSize: 100, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: testLogLevel()}))}
	if dmod != nil {
		dcfg := deletes.Config{ES: client, Client: rdb, Keys: keys, Store: store, Interval: 100 * time.Millisecond,
			DurableWait: 5 * time.Second, Logger: cfg.Logger}
		dmod(&dcfg)
		sc, err := deletes.New(dcfg)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Deletes = sc
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := relay.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &feed{name: feedName, rdb: rdb, keys: keys, store: store, lease: lease, stop: cancel, done: make(chan error, 1), scanner: cfg.Deletes}
	go func() { f.done <- r.Run(ctx) }()
	tb.Cleanup(f.halt)
	return f
}

func (f *feed) halt() {
	f.stop()
	select {
	case err := <-f.done:
		f.done <- err // for the next halt (a test's own, then its cleanup's)
	case <-time.After(10 * time.Second):
	}
}

// testWriter sends log lines to t.Log (until the test ends).
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // logging after the test ended
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// entries reads the whole stream.
func entries(tb testing.TB, rdb *redis.Client, stream string) []redisx.Event {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]redisx.Event, len(msgs))
	for i, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// docKey is a document's identity: one _id on two shards is two documents.
type docKey struct {
	uuid  string
	shard int
	id    string
}

// doc is a document as the cluster holds it or the stream replays it.
type doc struct {
	routing string
	seq     int64
	source  string
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// replay applies the stream: the last upsert per document wins, deletes
// remove.
func replay(evs []redisx.Event) map[docKey]doc {
	out := map[docKey]doc{}
	for _, e := range evs {
		k := docKey{e.IndexUUID, e.Shard, e.ID}
		switch e.Op {
		case redisx.OpUpsert:
			out[k] = doc{routing: e.Routing, seq: e.SeqNo, source: compact(e.Source)}
		case redisx.OpDelete:
			delete(out, k)
		}
	}
	return out
}

// clusterDocs returns the documents of an index: the primaries' views after
// a refresh.
func clusterDocs(tb testing.TB, c backend, index string) map[docKey]doc {
	tb.Helper()
	return inspect(c).docs(tb, index)
}

func indexUUID(tb testing.TB, c backend, index string) string {
	tb.Helper()
	var r map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", c.URL()+"/"+index+"/_settings?flat_settings=true", ""), &r); err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprint(r[index].Settings["index.uuid"])
}

// diffDocs describes how two document sets differ (empty when equal).
func diffDocs(want, got map[docKey]doc) string {
	var lines []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("missing %v (seq %d)", k, w.seq))
		case g != w:
			lines = append(lines, fmt.Sprintf("differs %v: stream %+v, cluster %+v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("extra %v (seq %d)", k, g.seq))
		}
	}
	sort.Strings(lines)
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("… and %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// waitCaughtUp waits until every shard of the indices has a stored
// checkpoint equal to its gcp and the gcp covers every op started.
func waitCaughtUp(tb testing.TB, c backend, store *checkpoint.Store, indices []string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		why = caughtUp(tb, c, store, indices)
		if why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("the feed did not catch up within %s: %s\nwhere the in-process relays are:\n%s", timeout, why, relayStacks())
}

// relayStacks are the stacks of this process's goroutines that run relay,
// deletes or checkpoint code: where an in-process relay that does not
// move waits.
func relayStacks() string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "es-changefeed/relay") || strings.Contains(g, "es-changefeed/deletes") || strings.Contains(g, "es-changefeed/checkpoint") {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return "(none: no relay runs in this process)"
	}
	return strings.Join(out, "\n\n")
}

// waitReached waits until the relay's checkpoints reach the global
// checkpoints of now: unlike waitCaughtUp it ends while writers go on
// (their ops in flight keep the global checkpoint below the max seq no at
// most instants).
func waitReached(tb testing.TB, c backend, store *checkpoint.Store, indices []string, timeout time.Duration) {
	tb.Helper()
	want := map[checkpoint.ShardID]int64{}
	for _, ix := range indices {
		uuid := indexUUID(tb, c, ix)
		for n, ss := range inspect(c).shards(tb, ix) {
			want[checkpoint.ShardID{IndexUUID: uuid, Shard: n}] = ss.gcp
		}
	}
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		why = ""
		st, err := store.Load(context.Background())
		if err != nil {
			why = err.Error()
		}
		for id, gcp := range want {
			if cp, ok := st.Checkpoints[id]; why == "" && gcp >= 0 && (!ok || cp < gcp) {
				why = fmt.Sprintf("%s: checkpoint %d (stored %v), below the global checkpoint %d", id, cp, ok, gcp)
			}
		}
		if why == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("the relay did not reach the global checkpoints of %s ago: %s", timeout, why)
}

func caughtUp(tb testing.TB, c backend, store *checkpoint.Store, indices []string) string {
	st, err := store.Load(context.Background())
	if err != nil {
		return err.Error()
	}
	for _, ix := range indices {
		uuid := indexUUID(tb, c, ix)
		for n, ss := range inspect(c).shards(tb, ix) {
			if ss.gcp != ss.max {
				return fmt.Sprintf("%s/%d: gcp %d behind max seq no %d", ix, n, ss.gcp, ss.max)
			}
			cp, ok := st.Checkpoints[checkpoint.ShardID{IndexUUID: uuid, Shard: n}]
			if ss.gcp >= 0 && (!ok || cp != ss.gcp) {
				return fmt.Sprintf("%s/%d: checkpoint %d (stored %v), gcp %d", ix, n, cp, ok, ss.gcp)
			}
		}
	}
	return ""
}

// testLogLevel is Info, or Debug with ESCF_TEST_DEBUG=1.
func testLogLevel() slog.Level {
	if os.Getenv("ESCF_TEST_DEBUG") == "1" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// newTestLogger logs as text into w.
func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// leaseNames reports whether a lease token names process p: the binary's
// lease owner is host-pid, its token owner/random.
func leaseNames(token string, p *proc) bool {
	owner, _, ok := strings.Cut(token, "/")
	return ok && strings.HasSuffix(owner, fmt.Sprintf("-%d", p.cmd.Process.Pid))
}

// metricValue scrapes http://addr/metrics for the sample named name (with
// its labels, as in `escf_lease_held` or `escf_backpressure`); ok is false
// when it is not served (yet).
func metricValue(tb testing.TB, addr, name string) (v float64, ok bool) {
	tb.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, found := strings.CutPrefix(l, name+" "); found {
			if _, err := fmt.Sscan(rest, &v); err != nil {
				tb.Fatalf("metric %s: %q: %v", name, l, err)
			}
			return v, true
		}
	}
	return 0, false
}

// waitResolutions waits until the relay binary p, serving /metrics on
// addr, began its n-th resolution of the targets
// (escf_target_resolutions_total): everything the earlier ones log is
// logged by then. It fails if p exits first.
func waitResolutions(tb testing.TB, p *proc, addr string, n float64) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if !binaryRunning(p) {
			tb.Fatalf("the relay exited:\n%s", tail(p.out.String(), 20))
		}
		if v, ok := metricValue(tb, addr, "escf_target_resolutions_total"); ok && v >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the relay did not resolve its targets %.0f times within 60 s:\n%s", n, tail(p.out.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitOutput waits until out holds want (a line a process or a relay
// logs), failing after timeout with out.
func waitOutput(tb testing.TB, out fmt.Stringer, want string, timeout time.Duration) {
	tb.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(out.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("no %q within %s:\n%s", want, timeout, out)
		}
	}
}

// waitMetric waits until addr serves name with a value ok accepts.
func waitMetric(tb testing.TB, addr, name string, ok func(float64) bool, timeout time.Duration) float64 {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, served := metricValue(tb, addr, name)
		if served && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s on http://%s/metrics: %v (served %v) after %s", name, addr, v, served, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
