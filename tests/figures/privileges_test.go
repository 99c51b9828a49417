package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrivileges_TablesIntoTheDocument(t *testing.T) {
	dir := t.TempDir()
	pkg := `"Package":"github.com/es-changefeed/es-changefeed/tests/e2e"`
	run := `{"Time":"2026-12-05T10:00:00Z","Action":"run",` + pkg + `,"Test":"TestSecurity_LeastPrivileges"}
{"Time":"2026-12-05T10:00:00Z","Action":"output",` + pkg + `,"Test":"TestSecurity_LeastPrivileges","Output":"    security_engines_test.go:35: backend: opensearch-2 (OpenSearch 2.19.6) secured by the engine's security plugin at https://127.0.0.1:1\n"}
{"Time":"2026-12-05T10:00:01Z","Action":"output",` + pkg + `,"Test":"TestSecurity_LeastPrivileges/escf_status","Output":"    security_privileges_test.go:150: PRIVILEGE {\"engine\":\"opensearch-2\",\"role\":\"escf_status\",\"removed\":\"\",\"result\":\"works\",\"line\":\"\"}\n"}
{"Time":"2026-12-05T10:00:02Z","Action":"output",` + pkg + `,"Test":"TestSecurity_LeastPrivileges/escf_status","Output":"    security_privileges_test.go:150: PRIVILEGE {\"engine\":\"opensearch-2\",\"role\":\"escf_status\",\"removed\":\"cluster cluster_monitor\",\"result\":\"needed\",\"line\":\"level=ERROR msg=x err=\\\"denied user (GET /: HTTP 403 security_exception: no permissions for [cluster:monitor/main] | x)\\\"\"}\n"}
{"Time":"2026-12-05T10:00:03Z","Action":"output",` + pkg + `,"Test":"TestSecurity_LeastPrivileges/escf_relay","Output":"    security_privileges_test.go:150: PRIVILEGE {\"engine\":\"opensearch-2\",\"role\":\"escf_relay\",\"removed\":\"cluster indices:data/read/scroll\",\"result\":\"not used\",\"line\":\"\",\"only\":\"scroll listings\"}\n"}
{"Time":"2026-12-05T10:00:09Z","Action":"pass",` + pkg + `,"Test":"TestSecurity_LeastPrivileges","Elapsed":9}
`
	if err := os.WriteFile(filepath.Join(dir, "opensearch-2.json"), []byte(run), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "SECURITY.md")
	if err := os.WriteFile(doc, []byte("# S\n\nbefore\n"+privilegesBegin+"\nold table\n"+privilegesEnd+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writePrivileges(dir, []string{"opensearch-2", "elasticsearch-9"}, doc); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	got := string(b)
	for _, want := range []string{
		"before\n" + privilegesBegin + "\n",
		"#### opensearch-2 (OpenSearch 2.19.6)",
		"TestSecurity_LeastPrivileges passed, 2026-12-05, 9 s.",
		"| escf_status | `(nothing: the whole role)` | works |  |",
		"| escf_status | `cluster cluster_monitor` | needed | HTTP 403 security_exception: no permissions for [cluster:monitor/main] \\| x |",
		"| escf_relay | `cluster indices:data/read/scroll` | not used | used only by scroll listings |",
		privilegesEnd + "\nafter\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the document lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") || strings.Contains(got, "elasticsearch-9") {
		t.Errorf("the old block or an engine without a run is left:\n%s", got)
	}
	if err := os.WriteFile(doc, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writePrivileges(dir, []string{"opensearch-2"}, doc); err == nil || !strings.Contains(err.Error(), "block") {
		t.Errorf("a document without the block: %v, want an error saying so", err)
	}
}
