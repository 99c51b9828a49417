package engine_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/internal/engine"
	"github.com/es-changefeed/es-changefeed/tests/engines"
)

// root is the repository root, from this package's directory.
var root = filepath.Join("..", "..")

// The files that say what es-changefeed is tested on now. Not among them:
// docs/COMPATIBILITY.md (tests/figures writes it from what a run of make
// test-engines found), docs/PERFORMANCE.md and docs/RELIABILITY.md (records
// of runs on the versions of their day), docs/SECURITY.md (example log
// lines of a user's cluster). Compose files and the real-cluster workflow
// are checked by compose/engines_test.go.
var checkedDocs = []string{"README.md", "docs/DESIGN.md", "internal/esemu/README.md", "tests/engines/README.md",
	"Makefile", ".ci/run"}

var (
	// productVersion is a product named with a full version.
	productVersion = regexp.MustCompile(`\b(Elasticsearch|OpenSearch) (\d+)\.(\d+)\.(\d+)\b`)
	// lineName is anything named like an engine line.
	lineName = regexp.MustCompile(`\b(?:opensearch|elasticsearch)-\d+\b`)
	// flavorFlag is a --flavor or --engine flag with its value.
	flavorFlag = regexp.MustCompile(`--(?:flavor|engine)[ =]([a-z0-9-]+)`)
)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTable_Docs: the docs name engine lines by their names, versions of a
// pinned series only at the pinned version, and pass --flavor and
// --engine a line's name (not a former alias).
func TestTable_Docs(t *testing.T) {
	for _, doc := range checkedDocs {
		t.Run(doc, func(t *testing.T) {
			s := read(t, doc)
			for _, m := range productVersion.FindAllStringSubmatch(s, -1) {
				for _, l := range engine.Lines() {
					if strings.EqualFold(l.Display(), m[1]) && l.Series() == m[2]+"."+m[3] && l.Version != m[2]+"."+m[3]+"."+m[4] {
						t.Errorf("names %q, the engine table pins %s %s: say %s, or the series (%s %s) alone",
							m[0], l.Display(), l.Version, l.Version, l.Display(), l.Series())
					}
				}
			}
			for _, name := range lineName.FindAllString(s, -1) {
				if _, err := engine.Lookup(name); err != nil {
					t.Errorf("names %s: %v", name, err)
				}
			}
			for _, m := range flavorFlag.FindAllStringSubmatch(s, -1) {
				if l, err := engine.Lookup(m[1]); err == nil && l.Name != m[1] {
					t.Errorf("%q: say %s (%s is its former name)", m[0], l.Name, m[1])
				}
			}
		})
	}
}

// TestTable_CI: make test-engines and .ci/run take the engine lines from
// the table rather than a list of their own, and the Makefile's default
// engine is the harness's.
func TestTable_CI(t *testing.T) {
	mk := read(t, "Makefile")
	all := regexp.MustCompile(`(?m)^ALL_ENGINES :?= .*internal/engine/versions\.txt.*$`)
	if !all.MatchString(mk) {
		t.Error("the Makefile's ALL_ENGINES does not read internal/engine/versions.txt")
	}
	if !regexp.MustCompile(`(?m)^ENGINES \?= \$\(ALL_ENGINES\)$`).MatchString(mk) {
		t.Error("the Makefile's ENGINES is not $(ALL_ENGINES)")
	}
	if m := regexp.MustCompile(`(?m)^DEFAULT_ENGINE = (\S+)$`).FindStringSubmatch(mk); m == nil || m[1] != engines.DefaultEngine {
		t.Errorf("the Makefile's DEFAULT_ENGINE is %q, tests/engines.DefaultEngine %s", m, engines.DefaultEngine)
	}
	ci := read(t, ".ci/run")
	if !strings.Contains(ci, "'ENGINES=$(OTHER_ENGINES)'") {
		t.Error(".ci/run does not run make test-engines on the Makefile's OTHER_ENGINES")
	}
	for _, f := range []string{"Makefile", ".ci/run"} {
		for _, name := range lineName.FindAllString(read(t, f), -1) {
			if name != engines.DefaultEngine {
				t.Errorf("%s names %s: take the engine lines from the table", f, name)
			}
		}
	}
}
