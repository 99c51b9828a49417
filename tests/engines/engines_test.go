package engines

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testEngine is the engine these tests run: ESCF_TEST_ENGINE, else the
// default.
func testEngine(tb testing.TB) string {
	tb.Helper()
	name := os.Getenv("ESCF_TEST_ENGINE")
	if name == "" {
		name = DefaultEngine
	}
	if _, err := Lookup(name); err != nil {
		tb.Fatalf("ESCF_TEST_ENGINE: %v", err)
	}
	return name
}

func do(tb testing.TB, method, url, body string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func mustDo(tb testing.TB, method, url, body string) []byte {
	tb.Helper()
	st, b := do(tb, method, url, body)
	if st >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, url, st, b)
	}
	return b
}

// TestVersions: every line of the engine table has its Maven profile in
// launcher/pom.xml (its dependencies), and every profile is a line;
// README.md lists the lines in the table's order.
func TestVersions(t *testing.T) {
	pom, err := launcherFS.ReadFile("launcher/pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	var profiles, secured []string
	for _, m := range regexp.MustCompile(`(?s)<profile>\s*<id>([^<]+)</id>`).FindAllStringSubmatch(string(pom), -1) {
		if name, ok := strings.CutSuffix(m[1], "-security"); ok {
			secured = append(secured, name)
			continue
		}
		profiles = append(profiles, m[1])
	}
	if got, want := strings.Join(profiles, ","), strings.Join(Names(), ","); got != want {
		t.Errorf("launcher/pom.xml has the profiles %s, the engine table the lines %s: add or remove a profile", got, want)
	}
	var want []string
	for _, n := range Names() {
		if _, ok := securityPlugins[n]; ok {
			want = append(want, n)
		}
	}
	if got, want := strings.Join(secured, ","), strings.Join(want, ","); got != want {
		t.Errorf("launcher/pom.xml has <engine>-security profiles for %s, securityPlugins names %s", got, want)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+-[0-9]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		rows = append(rows, m[1])
	}
	if got, want := strings.Join(rows, ","), strings.Join(Names(), ","); got != want {
		t.Errorf("README.md's table lists %s, the engine table %s", got, want)
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "unknown engine", cfg: Config{Engine: "solr-9", Nodes: 1}, want: `unknown engine "solr-9"`},
		{name: "no nodes", cfg: Config{Engine: DefaultEngine, Nodes: -1}, want: "Nodes -1"},
		{name: "port", cfg: Config{Engine: DefaultEngine, Nodes: 3, HTTPPort: 65534}, want: "HTTPPort 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := (Config{}).withDefaults().Validate(); err != nil {
		t.Fatalf("the zero Config with defaults: %v", err)
	}
	// Security on every line, elasticsearch-7's behind the TLS proxy:
	// TestSecurityKindOf.
}

// TestCluster_NodeControls starts three real nodes, writes an index with a
// replica, and checks each control by the cluster's own answers: a killed
// node leaves the cluster and comes back with its data; a paused node
// answers nothing until resumed; Close leaves no JVM.
func TestCluster_NodeControls(t *testing.T) {
	c := StartTB(t, Config{Engine: testEngine(t), Nodes: 3})
	ctx := context.Background()

	mustDo(t, "PUT", c.URL()+"/ctl", `{"settings":{"number_of_shards":3,"number_of_replicas":1}}`)
	var bulk strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&bulk, "{\"index\":{\"_id\":\"%d\"}}\n{\"n\":%d}\n", i, i)
	}
	req, _ := http.NewRequest("POST", c.URL()+"/ctl/_bulk?refresh=true", strings.NewReader(bulk.String()))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := c.WaitGreen(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := func(via int) int {
		var rows []json.RawMessage
		if err := json.Unmarshal(mustDo(t, "GET", c.NodeURL(via)+"/_cat/nodes?format=json", ""), &rows); err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	count := func(via int) int {
		var r struct{ Count int }
		if err := json.Unmarshal(mustDo(t, "GET", c.NodeURL(via)+"/ctl/_count", ""), &r); err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	if got := nodes(0); got != 3 {
		t.Fatalf("_cat/nodes lists %d nodes, want 3", got)
	}

	// Kill: the JVM is gone at once, the others see it leave.
	pid := c.PID(2)
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still exists after Kill", pid)
	}
	if c.Running(2) || c.Kill(2) == nil {
		t.Fatal("a killed node still counts as running")
	}
	deadline := time.Now().Add(time.Minute)
	for nodes(0) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the cluster still lists 3 nodes a minute after a kill")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := count(0); got != 50 {
		t.Fatalf("with a node killed, _count = %d, want 50", got)
	}

	// Start: the node rejoins with its data; the index turns green again.
	if err := c.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitGreen(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nodes(2); got != 3 {
		t.Fatalf("the restarted node lists %d nodes, want 3", got)
	}

	// Pause: the node answers nothing; Resume: it answers again.
	if err := c.Pause(1); err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: time.Second}
	if resp, err := cl.Get(c.NodeURL(1) + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("a paused node answered")
	}
	if err := c.Resume(1); err != nil {
		t.Fatal(err)
	}
	if st, _ := do(t, "GET", c.NodeURL(1)+"/", ""); st != 200 {
		t.Fatalf("the resumed node answered HTTP %d", st)
	}

	// Stop: a clean shutdown; Start again.
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitGreen(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(0); got != 50 {
		t.Fatalf("after restarts, _count = %d, want 50", got)
	}

	pids := []int{c.PID(0), c.PID(1), c.PID(2)}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if err := syscall.Kill(p, 0); err == nil {
			t.Fatalf("pid %d still exists after Close", p)
		}
	}
}

// TestCluster_RootAnswersVersion: GET / names the pinned product and
// version on every engine (on Elasticsearch 8+ the launcher serves it, the
// rest-root module not being on Maven Central).
func TestCluster_RootAnswersVersion(t *testing.T) {
	c := StartTB(t, Config{Engine: testEngine(t)})
	var root struct {
		ClusterName string `json:"cluster_name"`
		ClusterUUID string `json:"cluster_uuid"`
		Version     struct {
			Number       string `json:"number"`
			Distribution string `json:"distribution"`
		} `json:"version"`
		Tagline string `json:"tagline"`
	}
	if err := json.Unmarshal(mustDo(t, "GET", c.URL()+"/", ""), &root); err != nil {
		t.Fatal(err)
	}
	e := c.Engine()
	if root.Version.Number != e.Version {
		t.Errorf("version.number = %q, want %q", root.Version.Number, e.Version)
	}
	if got, want := root.Version.Distribution == "opensearch", e.Product == "opensearch"; got != want {
		t.Errorf("version.distribution = %q for %s", root.Version.Distribution, e)
	}
	if root.ClusterName != c.Name() || len(root.ClusterUUID) < 20 || root.Tagline == "" {
		t.Errorf("GET / = %+v, want cluster %s with a uuid and a tagline", root, c.Name())
	}
}
