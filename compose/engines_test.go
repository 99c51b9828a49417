package compose

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/es-changefeed/es-changefeed/internal/engine"
)

// engineImage matches an Elasticsearch or OpenSearch image and its tag.
var engineImage = regexp.MustCompile(`^(?:docker\.elastic\.co/elasticsearch/|opensearchproject/)(elasticsearch|opensearch):(\S+)$`)

// engineVersion matches a product named with a full version anywhere in a
// file, e.g. "Elasticsearch 9.5.3" or "opensearch:2.19.6".
var engineVersion = regexp.MustCompile(`(?i)\b(elasticsearch|opensearch)[ :](\d+)\.(\d+)\.(\d+)\b`)

// lineOf is the engine line of a product and major version.
func lineOf(t *testing.T, product, major string) (engine.Line, bool) {
	t.Helper()
	for _, l := range engine.Lines() {
		if l.Product == strings.ToLower(product) && strings.HasPrefix(l.Version, major+".") {
			return l, true
		}
	}
	return engine.Line{}, false
}

// TestFiles_EngineLines: each cluster file runs one engine line at the
// version of the engine table (internal/engine/versions.txt), says which
// in its first line, and names no other version of it; each line's
// compose file exists and runs it.
func TestFiles_EngineLines(t *testing.T) {
	files := composeFiles(t)
	for _, l := range engine.Lines() {
		if !slices.Contains(files, l.Compose) {
			t.Errorf("the engine table's %s runs in compose/%s, which does not exist", l.Name, l.Compose)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Services map[string]struct{ Image string }
			}
			if err := yaml.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for name, s := range cfg.Services {
				m := engineImage.FindStringSubmatch(s.Image)
				if m == nil {
					continue
				}
				major, _, _ := strings.Cut(m[2], ".")
				l, ok := lineOf(t, m[1], major)
				switch {
				case !ok:
					t.Errorf("service %s runs %s, of no line of the engine table", name, s.Image)
				case m[2] != l.Version:
					t.Errorf("service %s runs %s %s, the engine table pins %s for %s", name, m[1], m[2], l.Version, l.Name)
				}
				if !slices.Contains(lines, l.Name) {
					lines = append(lines, l.Name)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("runs the engine lines %v, want one", lines)
			}
			l, _ := engine.Lookup(lines[0])
			if first, _, _ := strings.Cut(string(b), "\n"); !strings.Contains(first, "("+l.Name+",") {
				t.Errorf("the first line %q does not name %s", first, l.Name)
			}
			if base := filepath.Base(f); !strings.Contains(base, l.Series()) {
				t.Errorf("%s runs %s %s: the file name should say %s", f, l.Display(), l.Version, l.Series())
			}
			for _, m := range engineVersion.FindAllStringSubmatch(string(b), -1) {
				if ml, ok := lineOf(t, m[1], m[2]); ok && m[2]+"."+m[3]+"."+m[4] != ml.Version {
					t.Errorf("names %q, the engine table pins %s %s", m[0], ml.Display(), ml.Version)
				}
			}
		})
	}
}

// TestWorkflow_EngineLines: the real-cluster workflow runs the compose
// file of every engine line, and its job names name the lines without a
// version of their own (the compose file has the table's).
func TestWorkflow_EngineLines(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".github", "workflows", "real-clusters.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Strategy struct {
				Matrix struct {
					Include []struct{ Name, File string }
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	files := composeFiles(t)
	var ran []string
	for _, e := range wf.Jobs["suite"].Strategy.Matrix.Include {
		ran = append(ran, e.File)
		if !slices.Contains(files, e.File) {
			t.Errorf("matrix entry %q runs compose/%s, which is no cluster file", e.Name, e.File)
		}
		line, _, _ := strings.Cut(e.Name, ",")
		if l, err := engine.Lookup(line); err != nil || (l.Compose != e.File && !strings.HasPrefix(e.File, strings.TrimSuffix(l.Compose, ".yml")+"-")) {
			t.Errorf("matrix entry %q runs %s: want an engine line's name first, and that line's compose file or a variant of it (%v)", e.Name, e.File, err)
		}
	}
	for _, l := range engine.Lines() {
		if !slices.Contains(ran, l.Compose) {
			t.Errorf("the workflow's matrix does not run %s (compose/%s)", l.Name, l.Compose)
		}
	}
	for _, m := range engineVersion.FindAllStringSubmatch(string(b), -1) {
		t.Errorf("the workflow names %q: name the line, the compose file has its version", m[0])
	}
}
