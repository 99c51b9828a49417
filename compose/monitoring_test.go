package compose

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// The files of the monitoring overlay whose queries name metrics.
const (
	alertsFile    = "prometheus/alerts.yml"
	dashboardFile = "grafana/dashboards/es-changefeed.json"
)

// prometheusOwn are series Prometheus makes itself for every target; no
// process serves them on /metrics.
var prometheusOwn = map[string]bool{"up": true}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

// alertQueries are the expressions of every rule of the alerts file.
func alertQueries(tb testing.TB) []query {
	tb.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		tb.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		tb.Fatalf("%s: %v", alertsFile, err)
	}
	var qs []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" {
				tb.Fatalf("%s: rule %s%s of group %s has no expr", alertsFile, r.Alert, r.Record, g.Name)
			}
			qs = append(qs, query{where: alertsFile + " " + r.Alert + r.Record, expr: r.Expr})
		}
	}
	return qs
}

// dashboardQueries are the expressions of every panel's targets (rows'
// panels too) and of the query variables of the dashboard.
func dashboardQueries(tb testing.TB) []query {
	tb.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		tb.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage
	}
	var d struct {
		Panels     []panel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		tb.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr == "" {
					tb.Fatalf("%s: panel %q has a target without expr", dashboardFile, p.Title)
				}
				qs = append(qs, query{where: fmt.Sprintf("%s panel %q", dashboardFile, p.Title), expr: t.Expr})
			}
			var nested []panel
			if len(p.Panels) > 0 {
				if err := json.Unmarshal(p.Panels, &nested); err != nil {
					tb.Fatalf("%s: panels of row %q: %v", dashboardFile, p.Title, err)
				}
			}
			walk(nested)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				tb.Fatalf("%s: variable %s: query %s: %v", dashboardFile, v.Name, v.Query, err)
			}
			q = obj.Query
		}
		qs = append(qs, query{where: dashboardFile + " variable " + v.Name, expr: variableExpr(q)})
	}
	return qs
}

// variableExpr is the PromQL inside a Grafana query variable:
// label_values(<expr>, label) → <expr>, label_values(label) → nothing,
// query_result(<expr>) → <expr>.
func variableExpr(q string) string {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\((.*),\s*\w+\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	if strings.HasPrefix(q, "label_values(") {
		return ""
	}
	if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	return q
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promVariable = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
)

// metricNames are the metric names a PromQL expression selects: every
// identifier that is not a function or aggregation (followed by "("), a
// keyword, a label (inside {...} or a by/without/on/ignoring/group_*
// list), a string, a duration or a Grafana variable ($__rate_interval).
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promVariable.ReplaceAllString(s, " ")
	s = promMatchers.ReplaceAllString(s, "{}")
	s = promRange.ReplaceAllString(s, "[]")
	s = promGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.") {
			continue // part of a number (1e3) or a duration (offset 5m)
		}
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") || promKeywords[name] {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{name: "a selector", expr: `escf_backpressure`, want: []string{"escf_backpressure"}},
		{name: "matchers and aggregation", expr: `max by (feed, group) (escf_group_lag_entries{feed="orders",group=~"a|b"}) > 10000`,
			want: []string{"escf_group_lag_entries"}},
		{name: "binary op and function", expr: `(sum by (partition) (escf_lease_held) < 1) or absent(escf_lease_held)`,
			want: []string{"escf_lease_held"}},
		{name: "two metrics", expr: `max by (index, shard) (escf_shard_global_checkpoint - escf_shard_checkpoint) > 1e4`,
			want: []string{"escf_shard_global_checkpoint", "escf_shard_checkpoint"}},
		{name: "histogram with a grafana variable", expr: `histogram_quantile(0.99, sum by (le) (rate(escf_commit_duration_seconds_bucket[$__rate_interval])))`,
			want: []string{"escf_commit_duration_seconds_bucket"}},
		{name: "on, unless, offset", expr: "(rate(escf_rounds_total[5m] offset 1h) == 0)\n and on (instance, partition) (escf_lease_held == 1)\n unless ignoring(job) escf_backpressure == 1",
			want: []string{"escf_rounds_total", "escf_lease_held", "escf_backpressure"}},
		{name: "a string holding braces and a name", expr: `label_replace(escf_stream_entries, "x", "escf_not_a_metric{}", "feed", "(.*)")`,
			want: []string{"escf_stream_entries"}},
		{name: "a name of another namespace", expr: `up{job=~"es-changefeed-.*"} == 0 and bogus_metric_total > 0`,
			want: []string{"up", "bogus_metric_total"}},
		{name: "nothing but numbers", expr: `1 + 2.5e3`, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := metricNames(tt.expr), tt.want; !slices.Equal(got, want) {
				t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, want)
			}
		})
	}
}

func TestVariableExpr(t *testing.T) {
	tests := []struct{ name, query, want string }{
		{name: "label values of a metric", query: `label_values(escf_stream_entries{job="x"}, feed)`, want: `escf_stream_entries{job="x"}`},
		{name: "label values alone", query: `label_values(feed)`, want: ""},
		{name: "query result", query: `query_result(max by (feed) (escf_stream_entries))`, want: `max by (feed) (escf_stream_entries)`},
		{name: "plain expression", query: `escf_lease_held`, want: `escf_lease_held`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := variableExpr(tt.query), tt.want; got != want {
				t.Errorf("variableExpr(%q) = %q, want %q", tt.query, got, want)
			}
		})
	}
}

// TestMonitoring_MetricsServed: every metric name the alert rules and the
// Grafana dashboard query is served on /metrics by a running relay (with
// --deletes) or consumer, built from this repository. Writes, deletes
// and failed _stats calls make the series that need an event appear.
func TestMonitoring_MetricsServed(t *testing.T) {
	queried := map[string][]string{} // metric name → the rules and panels that query it
	queries := append(alertQueries(t), dashboardQueries(t)...)
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric name in %q", q.where, q.expr)
		}
		for _, n := range names {
			queried[n] = append(queried[n], q.where)
		}
	}
	if len(queries) < 20 || len(queried) < 15 {
		t.Fatalf("%d queries naming %d metrics in %s and %s: want at least 20 naming 15", len(queries), len(queried), alertsFile, dashboardFile)
	}
	want := map[string]bool{}
	for n := range queried {
		if !prometheusOwn[n] {
			want[n] = true
		}
	}

	served := serveAndScrape(t, want)
	var missing []string
	for n := range want {
		if !served[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	for _, n := range missing {
		t.Errorf("%s is queried by %s but served by neither the relay nor the consumer", n, strings.Join(queried[n], ", "))
	}
	if len(missing) == 0 {
		t.Logf("the %d metric names of %d queries are served: %s", len(want), len(queries), strings.Join(sortedKeys(want), " "))
	}
}

// serveAndScrape runs the emulator, a redis-server, the relay (with
// --deletes) and a consumer (file sink) of the built binary, drives
// upserts, deletes and failed _stats calls through them, and scrapes both
// /metrics until every name of want is served or 60 s have passed. It
// returns the names served (samples and # TYPE families) by either.
func serveAndScrape(t *testing.T, want map[string]bool) map[string]bool {
	t.Helper()
	bin := buildBinary(t)
	c, err := esemu.New(esemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const index = "orders"
	httpDo(t, "PUT", c.URL()+"/"+index, `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`)
	srv := redistest.Start(t)
	relayAddr, consumerAddr := freeAddr(t), freeAddr(t)
	relay := startProc(t, bin, "run", "--es", c.URL(), "--redis", srv.URL(), "--feed", "mon", "--index", index,
		"--poll-interval", "20ms", "--lease-ttl", "1s", "--deletes", "--delete-scan-interval", "50ms", "--trim",
		"--metrics-addr", relayAddr)
	consumer := startProc(t, bin, "consume", "--redis", srv.URL(), "--feed", "mon", "--group", "printer", "--consumer", "c1",
		"--sink", "file", "--file-path", filepath.Join(t.TempDir(), "events.jsonl"), "--metrics-addr", consumerAddr, "--wait-for-feed", "1m")
	scrape := func(addr string) (map[string]bool, string) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return nil, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, ""
		}
		return exposedNames(string(b)), string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s\nrelay:\n%s\nconsumer:\n%s", what, relay, consumer)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	const docs = 20
	for i := range docs {
		httpDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), index, i), fmt.Sprintf(`{"n":%d}`, i))
	}
	// Delivered first: a document deleted before the relay read it needs
	// no delete event.
	waitFor("the relay commits the upserts", func() bool {
		_, body := scrape(relayAddr)
		return strings.Contains(body, fmt.Sprintf(`escf_events_written_total{op="upsert"} %d`, docs))
	})
	for i := 0; i < docs; i += 4 {
		httpDo(t, "DELETE", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), index, i), "")
	}
	served := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if !served["escf_errors_total"] && len(c.PendingFaults()) == 0 {
			// A failed round: escf_errors_total has a series only after an
			// error. A round's _stats is the batch's, then its own when the
			// batch failed (a delete scan may take one too): until it shows.
			if err := c.InjectFault(esemu.Fault{Kind: esemu.KindStats, Status: 503, Count: 2}); err != nil {
				t.Fatal(err)
			}
		}
		r, _ := scrape(relayAddr)
		cons, _ := scrape(consumerAddr)
		served = map[string]bool{}
		for _, m := range []map[string]bool{r, cons} {
			for n := range m {
				served[n] = true
			}
		}
		all := true
		for n := range want {
			all = all && served[n]
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(served) == 0 {
		t.Fatalf("nothing scraped from the relay at %s and the consumer at %s\nrelay:\n%s\nconsumer:\n%s", relayAddr, consumerAddr, relay, consumer)
	}
	return served
}

// exposedNames are the metric names of a Prometheus text exposition: each
// sample's name (escf_commit_duration_seconds_bucket, …) and each family
// named by a # TYPE line.
func exposedNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				names[f[0]] = true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func TestExposedNames(t *testing.T) {
	body := `# HELP escf_commit_duration_seconds Time of one commit transaction.
# TYPE escf_commit_duration_seconds histogram
escf_commit_duration_seconds_bucket{le="0.0005"} 3
escf_commit_duration_seconds_sum 0.01
escf_commit_duration_seconds_count 3
# HELP escf_lease_held 1 while this relay holds the feed's lease.
# TYPE escf_lease_held gauge
escf_lease_held 1
`
	got := sortedKeys(exposedNames(body))
	want := []string{"escf_commit_duration_seconds", "escf_commit_duration_seconds_bucket", "escf_commit_duration_seconds_count",
		"escf_commit_duration_seconds_sum", "escf_lease_held"}
	if !slices.Equal(got, want) {
		t.Errorf("exposedNames = %q, want %q", got, want)
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// buildBinary builds es-changefeed from the repository root into a
// temporary directory.
func buildBinary(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "es-changefeed")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is a running binary; String is its output so far.
type proc struct {
	mu  sync.Mutex
	out strings.Builder
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc starts bin with args; it is killed when the test ends.
func startProc(tb testing.TB, bin string, args ...string) *proc {
	tb.Helper()
	p := &proc{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// freeAddr is a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpDo sends a JSON request and fails the test on an error status.
func httpDo(tb testing.TB, method, url, body string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		tb.Fatalf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, b)
	}
}

// TestMonitoring_Wiring: the monitoring overlay's pieces point at each
// other (nothing runs them here: no Docker engine). Prometheus scrapes the
// relay and consumer services on the port they serve metrics on and loads
// the alerts; Grafana's provisioned data source has the uid every panel
// uses, and its dashboard provider reads the directory the dashboards are
// mounted at.
func TestMonitoring_Wiring(t *testing.T) {
	readYAML := func(path string, v any) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML("prometheus/prometheus.yml", &prom)
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	sort.Strings(targets)
	if got, want := targets, []string{"consumer:9464", "relay:9464"}; !slices.Equal(got, want) {
		t.Errorf("prometheus.yml scrapes %q, want %q (the services of every cluster file, --metrics-addr 0.0.0.0:9464)", got, want)
	}
	if got, want := prom.RuleFiles, []string{filepath.Base(alertsFile)}; !slices.Equal(got, want) {
		t.Errorf("prometheus.yml loads rule files %q, want %q", got, want)
	}

	var overlay struct {
		Services map[string]struct{ Volumes []string }
	}
	readYAML(monitoringFile, &overlay)
	mounts := map[string]string{} // host path → container path
	for _, name := range []string{"prometheus", "grafana"} {
		for _, v := range overlay.Services[name].Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && strings.HasPrefix(parts[0], "./") {
				mounts[parts[0]] = parts[1]
			}
		}
	}
	if got, want := mounts["./prometheus"], "/etc/prometheus"; got != want {
		t.Errorf("%s mounts ./prometheus at %q, want %q (--config.file=/etc/prometheus/prometheus.yml)", monitoringFile, got, want)
	}
	if got, want := mounts["./grafana/provisioning"], "/etc/grafana/provisioning"; got != want {
		t.Errorf("%s mounts ./grafana/provisioning at %q, want %q", monitoringFile, got, want)
	}

	var providers struct {
		Providers []struct {
			Options struct{ Path string }
		}
	}
	readYAML("grafana/provisioning/dashboards/es-changefeed.yml", &providers)
	if len(providers.Providers) != 1 || providers.Providers[0].Options.Path == "" {
		t.Fatalf("grafana dashboard providers %+v: want one with a path", providers.Providers)
	}
	if got, want := mounts["./"+filepath.Dir(dashboardFile)], providers.Providers[0].Options.Path; got != want {
		t.Errorf("%s mounts ./%s at %q, but the dashboard provider reads %q", monitoringFile, filepath.Dir(dashboardFile), got, want)
	}

	var sources struct {
		Datasources []struct{ UID, Type, URL string }
	}
	readYAML("grafana/provisioning/datasources/prometheus.yml", &sources)
	if len(sources.Datasources) != 1 || sources.Datasources[0].Type != "prometheus" || sources.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("grafana data sources %+v: want one prometheus at http://prometheus:9090", sources.Datasources)
	}
	uid := sources.Datasources[0].UID
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title      string
			Datasource struct{ UID string }
			Targets    []struct {
				Datasource struct{ UID string }
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if p.Datasource.UID != uid {
			t.Errorf("panel %q uses the data source %q, want the provisioned %q", p.Title, p.Datasource.UID, uid)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != uid {
				t.Errorf("a target of panel %q uses the data source %q, want the provisioned %q", p.Title, tg.Datasource.UID, uid)
			}
		}
	}
}
