// Package compose holds docker compose files for real clusters; this test
// checks them with Debian's docker-compose (v1.29, no Docker engine needed)
// and checks the workflow that uses them.
package compose

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tool finds a command; a missing one fails when ESCF_REQUIRE_COMPOSE=1
// (make test installs it) and skips otherwise.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " not found: install it with `apt-get install -y --no-install-recommends docker-compose` (or run make test, which does)"
	if os.Getenv("ESCF_REQUIRE_COMPOSE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; set ESCF_REQUIRE_COMPOSE=1 to make this a failure")
	return ""
}

// monitoringFile is the overlay that adds Prometheus and Grafana to any
// cluster file (it is not a cluster file of its own).
const monitoringFile = "monitoring.yml"

// composeFiles are the cluster files: every *.yml but the overlay.
func composeFiles(t *testing.T) []string {
	t.Helper()
	all, err := filepath.Glob("*.yml")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range all {
		if f != monitoringFile {
			files = append(files, f)
		}
	}
	if len(files) < 7 {
		t.Fatalf("compose files %v: want at least 7 (ES 9.5, 8.19, 7.17, OpenSearch 3.9, 2.19, 3 nodes, TLS)", files)
	}
	return files
}

// TestFiles_Config: `docker-compose config -q` accepts every file, alone
// and with the monitoring overlay after it.
func TestFiles_Config(t *testing.T) {
	dc := tool(t, "docker-compose")
	for _, f := range composeFiles(t) {
		for _, files := range [][]string{{f}, {f, monitoringFile}} {
			t.Run(strings.Join(files, "+"), func(t *testing.T) {
				var args []string
				for _, f := range files {
					args = append(args, "-f", f)
				}
				out, err := exec.Command(dc, append(args, "config", "-q")...).CombinedOutput()
				if err != nil {
					t.Fatalf("docker-compose %s config -q: %v\n%s", strings.Join(args, " "), err, out)
				}
				if len(strings.TrimSpace(string(out))) != 0 {
					t.Errorf("docker-compose %s config -q printed (a warning?):\n%s", strings.Join(args, " "), out)
				}
			})
		}
	}
}

// TestFiles_Services: every cluster file runs the relay and a consumer
// from the root Dockerfile next to the cluster and Redis (the services the
// monitoring overlay's Prometheus scrapes), the consumer with
// --wait-for-feed.
func TestFiles_Services(t *testing.T) {
	dc := tool(t, "docker-compose")
	for _, f := range composeFiles(t) {
		t.Run(f, func(t *testing.T) {
			out, err := exec.Command(dc, "-f", f, "config").CombinedOutput()
			if err != nil {
				t.Fatalf("docker-compose -f %s config: %v\n%s", f, err, out)
			}
			var cfg struct{ Services map[string]json.RawMessage }
			if err := json.Unmarshal(yamlToJSON(t, out), &cfg); err != nil {
				t.Fatal(err)
			}
			for name, sub := range map[string]string{"relay": "run", "consumer": "consume"} {
				raw, ok := cfg.Services[name]
				if !ok {
					t.Errorf("%s has no service %s", f, name)
					continue
				}
				var s struct {
					Build   struct{ Context string }
					Command []string
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatalf("%s: service %s: %v", f, name, err)
				}
				if root, _ := filepath.Abs(".."); s.Build.Context != root {
					t.Errorf("%s: service %s builds %q, want the repository root %s", f, name, s.Build.Context, root)
				}
				if len(s.Command) == 0 || s.Command[0] != sub || !strings.Contains(strings.Join(s.Command, " "), "--metrics-addr 0.0.0.0:9464") {
					t.Errorf("%s: service %s runs %q, want es-changefeed %s ... --metrics-addr 0.0.0.0:9464", f, name, s.Command, sub)
				}
				// The consumer starts beside the relay: without a wait it
				// would exit 1 when it looks before the relay wrote the feed.
				if sub == "consume" && !slices.Contains(s.Command, "--wait-for-feed") {
					t.Errorf("%s: service %s runs %q, without --wait-for-feed", f, name, s.Command)
				}
			}
			if _, ok := cfg.Services["redis"]; !ok {
				t.Errorf("%s has no service redis", f)
			}
		})
	}
}

// yamlToJSON converts docker-compose's YAML output with python3-yaml
// (which comes with docker-compose).
func yamlToJSON(t *testing.T, y []byte) []byte {
	t.Helper()
	cmd := exec.Command(tool(t, "python3"), "-c", "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)")
	cmd.Stdin = strings.NewReader(string(y))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 yaml to json: %v", err)
	}
	return out
}

// TestFiles_Header: each file starts with how to start it, point the feed at
// it and run the suite against it, naming itself.
func TestFiles_Header(t *testing.T) {
	for _, f := range composeFiles(t) {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if !strings.HasPrefix(s, "# ") {
				t.Fatalf("%s does not start with a comment", f)
			}
			head := s[:strings.Index(s, "\nservices:")]
			for _, want := range []string{
				"docker compose -f compose/" + f + " up -d --wait",
				"es-changefeed run --es http",
				"ESCF_TEST_ES_URL=http",
				"go test -race -count=1 ./tests/e2e/",
			} {
				if !strings.Contains(head, want) {
					t.Errorf("%s: the header comment lacks %q", f, want)
				}
			}
			if strings.Contains(s, "\nversion:") {
				t.Errorf("%s has a version: key (obsolete in docker compose v2, which warns)", f)
			}
		})
	}
}

// TestWorkflow_Parses: the real-cluster workflow is valid YAML and names
// every compose file (python3-yaml comes with docker-compose).
func TestWorkflow_Parses(t *testing.T) {
	tool(t, "docker-compose")
	py := tool(t, "python3")
	wf := filepath.Join("..", ".github", "workflows", "real-clusters.yml")
	const check = `import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
assert isinstance(d, dict) and d.get("jobs"), "no jobs"
for name, job in d["jobs"].items():
    assert job.get("runs-on") and job.get("steps"), name + ": no runs-on or steps"
print(yaml.safe_dump(d))
`
	out, err := exec.Command(py, "-c", check, wf).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", wf, err, out)
	}
	for _, f := range composeFiles(t) {
		if !strings.Contains(string(out), "compose/"+f) && !strings.Contains(string(out), f) {
			t.Errorf("the workflow does not use compose/%s", f)
		}
	}
}
