package e2e

// One suite, two backends. By default every test starts its own emulator.
// With ESCF_TEST_ENGINE set to an engine of tests/engines (opensearch-2,
// …, elasticsearch-9), the package starts one real node of that engine
// from Maven Central's jars and stops it at the end (TestMain); with
// ESCF_TEST_ES_URL set (and optionally ESCF_TEST_ES_USER,
// ESCF_TEST_ES_PASSWORD, ESCF_TEST_ES_CA_CERT) it uses that cluster. Then
// the tests that need only a plain cluster run against it instead
// (esCluster), each under index names of its own that it deletes at the
// end; tests that kill, stop or pause nodes start real clusters of their
// own (engineCluster), tests that count the relay's requests put a counting
// proxy in front (newCountingProxy); the tests that need the emulator's
// controls (held writes, injected faults, op histories, TLS and users)
// skip, saying so (cluster).

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// backend is the cluster a helper talks to: an *esemu.Cluster (emulator-only
// tests), an *emulator or a *realCluster (tests that run on both).
type backend interface {
	URL() string
}

// testCluster is the cluster of a test that runs on both backends.
type testCluster interface {
	backend
	// Index returns the name the test should use for name: name itself on
	// an emulator, a name unique to this run and test on a real cluster.
	Index(name string) string
}

// inspector reads back what the tests compare the stream with.
type inspector interface {
	// docs returns the documents of a concrete index, after a refresh.
	docs(tb testing.TB, index string) map[docKey]doc
	// shards returns, per shard of a concrete index, the primary's global
	// checkpoint and the highest seq no it assigned.
	shards(tb testing.TB, index string) []shardSeqNos
	// esConfig is the client configuration of the relay.
	esConfig() es.Config
	// cliArgs are the binary's flags to reach the cluster.
	cliArgs() []string
}

type shardSeqNos struct{ gcp, max int64 }

// inspect returns the inspector of a backend.
func inspect(c backend) inspector {
	switch v := c.(type) {
	case *esemu.Cluster:
		return emuInspector{v}
	case *emulator:
		return emuInspector{v.Cluster}
	case *realCluster:
		return v
	case *engineBackend:
		return v
	}
	panic(fmt.Sprintf("no inspector for %T", c))
}

// emulator is a fresh emulator in a test that runs on both backends; its
// controls are there for checks only the emulator can make.
type emulator struct{ *esemu.Cluster }

func (e *emulator) Index(name string) string { return name }

// realEnv is the real cluster named by the environment, if any.
type realEnv struct {
	url, user, password, caFile string
	caPEM                       []byte
	client                      *http.Client
	// engine is the cluster of ESCF_TEST_ENGINE this package started (nil
	// for ESCF_TEST_ES_URL).
	engine *engines.Cluster
}

var realOnce = sync.OnceValues(func() (*realEnv, error) {
	u := strings.TrimRight(os.Getenv("ESCF_TEST_ES_URL"), "/")
	if name := os.Getenv("ESCF_TEST_ENGINE"); name != "" {
		if u != "" {
			return nil, fmt.Errorf("ESCF_TEST_ENGINE=%s and ESCF_TEST_ES_URL=%s are both set: choose one", name, u)
		}
		c, err := sharedEngine(name)
		if err != nil {
			return nil, err
		}
		return &realEnv{url: c.URL(), client: &http.Client{Timeout: time.Minute}, engine: c}, nil
	}
	if u == "" {
		return nil, nil
	}
	env := &realEnv{url: u, user: os.Getenv("ESCF_TEST_ES_USER"), password: os.Getenv("ESCF_TEST_ES_PASSWORD"),
		caFile: os.Getenv("ESCF_TEST_ES_CA_CERT"), client: &http.Client{Timeout: time.Minute}}
	if env.caFile != "" {
		if !filepath.IsAbs(env.caFile) {
			// go test runs in tests/e2e; the docs give paths from the
			// repository root.
			env.caFile = filepath.Join("..", "..", env.caFile)
		}
		abs, err := filepath.Abs(env.caFile)
		if err != nil {
			return nil, err
		}
		env.caFile = abs
		env.caPEM, err = os.ReadFile(abs)
		if err != nil {
			return nil, fmt.Errorf("ESCF_TEST_ES_CA_CERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(env.caPEM) {
			return nil, fmt.Errorf("ESCF_TEST_ES_CA_CERT=%s holds no PEM certificate", abs)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		env.client.Transport = tr
	}
	return env, nil
})

// realClusterEnv returns the real cluster of ESCF_TEST_ES_URL, or nil.
func realClusterEnv(tb testing.TB) *realEnv {
	tb.Helper()
	env, err := realOnce()
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// requestClient is the client for a request to url: the real cluster's
// (with its CA and credentials) when url is on it, else Go's default.
func requestClient(req *http.Request) *http.Client {
	env, _ := realOnce()
	if env == nil || !strings.HasPrefix(req.URL.String(), env.url) {
		return http.DefaultClient
	}
	if env.user != "" {
		req.SetBasicAuth(env.user, env.password)
	}
	return env.client
}

// cluster starts an emulator closed at the end of the test. With
// ESCF_TEST_ES_URL set the test skips: it needs the emulator's controls.
func cluster(tb testing.TB, cfg esemu.Config) *esemu.Cluster {
	tb.Helper()
	if env := realClusterEnv(tb); env != nil {
		what := "ESCF_TEST_ES_URL is set (" + env.url + ")"
		if env.engine != nil {
			what = "ESCF_TEST_ENGINE is " + testEngineName()
		}
		tb.Skipf("%s, but this test needs the emulator's own controls "+
			"(held writes, injected faults or failing shard copies, op histories, TLS or users), which a real cluster lacks; it runs on the emulator", what)
	}
	return newEmulator(tb, cfg)
}

func newEmulator(tb testing.TB, cfg esemu.Config) *esemu.Cluster {
	tb.Helper()
	c, err := esemu.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// esCluster is the cluster of a test that runs on both backends: the real
// cluster of ESCF_TEST_ES_URL (cfg is then ignored), else a fresh emulator
// configured by cfg.
func esCluster(tb testing.TB, cfg esemu.Config) testCluster {
	tb.Helper()
	env := realClusterEnv(tb)
	if env == nil {
		return &emulator{newEmulator(tb, cfg)}
	}
	rc := &realCluster{realEnv: env, prefix: fmt.Sprintf("escf-%s-%d-", runID, runSeq.Add(1))}
	st, body := httpDo(tb, "GET", env.url+"/", "")
	if st != 200 {
		tb.Fatalf("ESCF_TEST_ES_URL=%s: GET / answered HTTP %d: %s", env.url, st, body)
	}
	var root struct {
		Version struct {
			Number       string `json:"number"`
			Distribution string `json:"distribution"`
		} `json:"version"`
	}
	_ = json.Unmarshal(body, &root)
	dist := root.Version.Distribution
	if dist == "" {
		dist = "elasticsearch"
	}
	// The marker TestBackend_RealClusterSwitch looks for.
	tb.Logf("backend: real cluster at %s (%s %s), indices %s*", env.url, dist, root.Version.Number, rc.prefix)
	tb.Cleanup(func() { rc.deleteAll(tb) })
	return rc
}

// runID tells this run's indices from other runs' on a shared cluster.
var runID = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

var runSeq atomic.Int64

// realCluster is a real cluster seen by one test: its indices are named
// with a prefix of its own and deleted when the test ends.
type realCluster struct {
	*realEnv
	prefix string
}

// URL is the cluster's URL; on a cluster of engine nodes, the first node
// that runs (tests kill and pause nodes).
func (rc *realCluster) URL() string {
	if rc.engine != nil {
		for i := 0; i < rc.engine.Nodes(); i++ {
			if rc.engine.Running(i) {
				return rc.engine.NodeURL(i)
			}
		}
	}
	return rc.url
}

func (rc *realCluster) Index(name string) string { return rc.prefix + name }

func (rc *realCluster) esConfig() es.Config {
	return es.Config{URLs: []string{rc.url}, Username: rc.user, Password: rc.password, CACertPEM: rc.caPEM}
}

func (rc *realCluster) cliArgs() []string {
	args := []string{"--es", rc.url}
	if rc.user != "" {
		args = append(args, "--es-user", rc.user, "--es-password", rc.password)
	}
	if rc.caFile != "" {
		args = append(args, "--es-ca-cert", rc.caFile)
	}
	return args
}

// deleteAll deletes the data streams and indices named with the test's
// prefix (by name: wildcard deletes may be forbidden).
func (rc *realCluster) deleteAll(tb testing.TB) {
	st, body := httpDo(tb, "GET", rc.URL()+"/_resolve/index/"+rc.prefix+"*?expand_wildcards=all", "")
	if st != 200 {
		tb.Logf("cleanup: resolve %s*: HTTP %d: %s", rc.prefix, st, body)
		return
	}
	var r struct {
		Indices     []struct{ Name string } `json:"indices"`
		DataStreams []struct{ Name string } `json:"data_streams"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Logf("cleanup: %v", err)
		return
	}
	for _, ds := range r.DataStreams {
		httpDo(tb, "DELETE", rc.URL()+"/_data_stream/"+ds.Name, "")
	}
	var names []string
	for _, ix := range r.Indices {
		if !strings.HasPrefix(ix.Name, ".ds-") {
			names = append(names, ix.Name)
		}
	}
	if len(names) > 0 {
		if st, body := httpDo(tb, "DELETE", rc.URL()+"/"+strings.Join(names, ",")+"?ignore_unavailable=true", ""); st >= 300 {
			tb.Logf("cleanup: delete %v: HTTP %d: %s", names, st, body)
		}
	}
}

// numShards returns the index's number of shards.
func (rc *realCluster) numShards(tb testing.TB, index string) int {
	tb.Helper()
	var r map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", rc.URL()+"/"+index+"/_settings?flat_settings=true", ""), &r); err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.Atoi(fmt.Sprint(r[index].Settings["index.number_of_shards"]))
	if err != nil {
		tb.Fatalf("%s: number_of_shards: %v", index, err)
	}
	return n
}

// docs reads each shard in _seq_no order with preference=_shards:N after a
// refresh (every op up to the gcp is then visible on every copy).
func (rc *realCluster) docs(tb testing.TB, index string) map[docKey]doc {
	tb.Helper()
	mustDo(tb, "POST", rc.URL()+"/"+index+"/_refresh", "")
	uuid := indexUUID(tb, rc, index)
	out := map[docKey]doc{}
	for n := 0; n < rc.numShards(tb, index); n++ {
		after := ""
		for {
			body := `{"size":1000,"seq_no_primary_term":true,"track_total_hits":false,"sort":[{"_seq_no":{"order":"asc","unmapped_type":"long"}}],"query":{"match_all":{}}` + after + `}`
			var r struct {
				Shards struct {
					Failed int `json:"failed"`
				} `json:"_shards"`
				Hits struct {
					Hits []struct {
						ID      string          `json:"_id"`
						Routing string          `json:"_routing"`
						SeqNo   int64           `json:"_seq_no"`
						Source  json.RawMessage `json:"_source"`
					} `json:"hits"`
				} `json:"hits"`
			}
			b := mustDo(tb, "POST", fmt.Sprintf("%s/%s/_search?preference=_shards:%d", rc.URL(), index, n), body)
			if err := json.Unmarshal(b, &r); err != nil {
				tb.Fatal(err)
			}
			if r.Shards.Failed != 0 {
				tb.Fatalf("search shard %d of %s: %d failed: %s", n, index, r.Shards.Failed, b)
			}
			for _, h := range r.Hits.Hits {
				out[docKey{uuid, n, h.ID}] = doc{routing: h.Routing, seq: h.SeqNo, source: compact(h.Source)}
			}
			if len(r.Hits.Hits) < 1000 {
				break
			}
			after = fmt.Sprintf(`,"search_after":[%d]`, r.Hits.Hits[len(r.Hits.Hits)-1].SeqNo)
		}
	}
	return out
}

func (rc *realCluster) shards(tb testing.TB, index string) []shardSeqNos {
	tb.Helper()
	var r struct {
		Indices map[string]struct {
			Shards map[string][]struct {
				Routing struct {
					Primary bool `json:"primary"`
				} `json:"routing"`
				SeqNo struct {
					Max int64 `json:"max_seq_no"`
					GCP int64 `json:"global_checkpoint"`
				} `json:"seq_no"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", rc.URL()+"/"+index+"/_stats/get?level=shards", ""), &r); err != nil {
		tb.Fatal(err)
	}
	ix, ok := r.Indices[index]
	if !ok {
		tb.Fatalf("stats of %s: no such index in the answer", index)
	}
	var nums []int
	for s := range ix.Shards {
		n, err := strconv.Atoi(s)
		if err != nil {
			tb.Fatalf("stats of %s: shard %q", index, s)
		}
		nums = append(nums, n)
	}
	sort.Ints(nums)
	out := make([]shardSeqNos, len(nums))
	for i, n := range nums {
		primary := false
		for _, cp := range ix.Shards[strconv.Itoa(n)] {
			if cp.Routing.Primary {
				out[i] = shardSeqNos{gcp: cp.SeqNo.GCP, max: cp.SeqNo.Max}
				primary = true
			}
		}
		if !primary {
			out[i] = shardSeqNos{gcp: -2, max: -1} // no started primary: not caught up
		}
	}
	return out
}

// emuInspector reads the emulator's own state (not its HTTP answers).
type emuInspector struct{ c *esemu.Cluster }

func (e emuInspector) docs(tb testing.TB, index string) map[docKey]doc {
	tb.Helper()
	c := e.c
	mustDo(tb, "POST", c.URL()+"/"+index+"/_refresh", "")
	uuid := indexUUID(tb, c, index)
	out := map[docKey]doc{}
	for n := 0; ; n++ {
		st, err := c.ShardState(index, n)
		if err != nil {
			break
		}
		primary := -1
		for i, cp := range st.Copies {
			if cp.Primary && cp.Started {
				primary = i
			}
		}
		if primary < 0 {
			tb.Fatalf("shard %d of %s has no started primary", n, index)
		}
		vis, err := c.VisibleDocs(index, n, primary)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range vis {
			out[docKey{uuid, n, d.ID}] = doc{routing: d.Routing, seq: d.SeqNo, source: compact(d.Source)}
		}
	}
	return out
}

func (e emuInspector) shards(tb testing.TB, index string) []shardSeqNos {
	var out []shardSeqNos
	for n := 0; ; n++ {
		ss, err := e.c.ShardState(index, n)
		if err != nil {
			return out
		}
		out = append(out, shardSeqNos{gcp: ss.GlobalCheckpoint, max: ss.NextSeqNo - 1})
	}
}

func (e emuInspector) esConfig() es.Config { return es.Config{URLs: []string{e.c.URL()}} }

func (e emuInspector) cliArgs() []string { return []string{"--es", e.c.URL()} }

// TestBackend_RealClusterSwitch shows the switch: it starts the standalone
// emulator binary (HTTPS, a user) as if it were a real cluster and runs part
// of this suite against it in a subprocess with ESCF_TEST_ES_URL,
// ESCF_TEST_ES_USER, ESCF_TEST_ES_PASSWORD and ESCF_TEST_ES_CA_CERT set:
// the chosen tests log that they run on that URL and pass; a test that
// needs the emulator's controls skips, saying why.
func TestBackend_RealClusterSwitch(t *testing.T) {
	t.Parallel()
	if os.Getenv("ESCF_TEST_ES_URL") != "" || testEngineName() != "" {
		t.Skip("already running against a real cluster (ESCF_TEST_ES_URL or ESCF_TEST_ENGINE)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "esemu")
	if out, err := exec.Command("go", "build", "-o", bin, "../../internal/esemu/cmd/esemu").CombinedOutput(); err != nil {
		t.Fatalf("go build esemu: %v\n%s", err, out)
	}
	addr := closedPort(t)
	ca := filepath.Join(dir, "ca.pem")
	var emuOut syncBuffer
	emu := exec.Command(bin, "--addr", addr, "--nodes", "3", "--tls", "--ca-out", ca, "--user", "elastic:switch-s3cret")
	emu.Stdout, emu.Stderr = &emuOut, &emuOut
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = emu.Process.Signal(syscall.SIGTERM)
		_ = emu.Wait()
	})
	url := "https://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(emuOut.String(), "serving at "+url) {
		if time.Now().After(deadline) {
			t.Fatalf("esemu did not start within 20s:\n%s", emuOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// In-process relays and the binary (TestTargets_NothingYetThenSomething
	// passes --es-user, --es-password and --es-ca-cert).
	onReal := []string{"TestRelay_Mirror", "TestRelay_CustomRouting", "TestDeletes_Mirror", "TestDeletes_MassDeleteIsConfirmed",
		"TestTargets_FromNow", "TestTargets_NothingYetThenSomething"}
	emuOnly := "TestRelay_LateCommit"
	run := "^(" + strings.Join(append(append([]string{}, onReal...), emuOnly), "|") + ")$"
	cmd := exec.Command("go", "test", "-count=1", "-short", "-v", "-run", run, ".")
	cmd.Env = append(os.Environ(), "ESCF_TEST_ES_URL="+url, "ESCF_TEST_ES_USER=elastic",
		"ESCF_TEST_ES_PASSWORD=switch-s3cret", "ESCF_TEST_ES_CA_CERT="+ca)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test against %s: %v\n%s", url, err, out)
	}
	s := string(out)
	for _, name := range onReal {
		if !strings.Contains(s, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass against the real-cluster URL", name)
		}
		// The marker line is between the test's own RUN and PASS lines in
		// -v output (the tests are not parallel).
		i := strings.Index(s, "=== RUN   "+name+"\n")
		j := strings.Index(s, "--- PASS: "+name+" ")
		if i < 0 || j < i || !strings.Contains(s[i:j], "backend: real cluster at "+url) {
			t.Errorf("%s did not log that it ran against %s", name, url)
		}
	}
	if !strings.Contains(s, "--- SKIP: "+emuOnly+" ") || !strings.Contains(s, "needs the emulator's own controls") {
		t.Errorf("%s did not skip with the reason", emuOnly)
	}
	if strings.Contains(s, "switch-s3cret") {
		t.Errorf("the password appears in the output")
	}
	if t.Failed() {
		t.Logf("subprocess output:\n%s", s)
	}
	t.Logf("against the emulator binary at %s as a real cluster: %d tests passed, %s skipped", url, len(onReal), emuOnly)
}
