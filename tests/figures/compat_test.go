package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompat_TablesFromTestJSON(t *testing.T) {
	dir := t.TempDir()
	run := `{"Time":"2026-12-01T10:00:00Z","Action":"start","Package":"github.com/es-changefeed/es-changefeed/tests/e2e"}
{"Time":"2026-12-01T10:00:01Z","Action":"run","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_Mirror"}
{"Time":"2026-12-01T10:00:01Z","Action":"output","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_Mirror","Output":"    relay_test.go:163: backend: real cluster at http://127.0.0.1:1 (opensearch 2.19.6), indices x-*\n"}
{"Time":"2026-12-01T10:00:01Z","Action":"output","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_Mirror","Output":"    relay_test.go:164: backend: opensearch-2 (OpenSearch 2.19.6) secured by the engine's security plugin at https://127.0.0.1:2\n"}
{"Time":"2026-12-01T10:00:02Z","Action":"output","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_Mirror","Output":"    cost_test.go:9: COST {\"engine\":\"opensearch-2\",\"what\":\"idle\",\"value\":2.5,\"unit\":\"requests/s\",\"note\":\"stats 20\"}\n"}
{"Time":"2026-12-01T10:00:09Z","Action":"pass","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_Mirror","Elapsed":8}
{"Time":"2026-12-01T10:00:09Z","Action":"run","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_LateCommit"}
{"Time":"2026-12-01T10:00:09Z","Action":"output","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_LateCommit","Output":"    relay_test.go:213: needs held writes | the emulator\n"}
{"Time":"2026-12-01T10:00:09Z","Action":"skip","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestRelay_LateCommit"}
{"Time":"2026-12-01T10:00:09Z","Action":"run","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestTargets_DataStream"}
{"Time":"2026-12-01T10:00:09Z","Action":"run","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestTargets_DataStream/a"}
{"Time":"2026-12-01T10:00:10Z","Action":"fail","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestTargets_DataStream/a","Elapsed":1}
{"Time":"2026-12-01T10:00:10Z","Action":"output","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestTargets_DataStream","Output":"    targets_test.go:9: the stream lacks 3 documents\n"}
{"Time":"2026-12-01T10:00:11Z","Action":"fail","Package":"github.com/es-changefeed/es-changefeed/tests/e2e","Test":"TestTargets_DataStream","Elapsed":2}
`
	if err := os.WriteFile(filepath.Join(dir, "opensearch-2.json"), []byte(run), 0o644); err != nil {
		t.Fatal(err)
	}
	fig := `{"scenario":"node kill","test":"TestRealFailover","faults":5,"entries":900,"docs":300,"lost":0,"duplicated":0,"wrong":0,"note":"5 SIGKILLs"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "opensearch-2.figures.jsonl"), []byte(fig), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := compat(dir, []string{"opensearch-2", "elasticsearch-9"}, &b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"| opensearch-2 | opensearch 2.19.6 | 1 | 2 | 1 | 1 passed | 11s |",
		"| elasticsearch-9 | – | not run | | | | |",
		"| `e2e.TestRelay_Mirror` | pass | – |",
		"| `e2e.TestTargets_DataStream` | FAIL [1 FAIL] | – |",
		"- `e2e.TestRelay_LateCommit`: needs held writes \\| the emulator",
		"| node kill | `TestRealFailover` | 5 | 300 | 900 | 0 | 0 | 0 | 5 SIGKILLs |",
		"Last generated 2026-12-01 10:00 UTC.",
		"| idle | 2.5 requests/s | stats 20 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q:\n%s", want, doc)
		}
	}
}

func TestSummary_CountsAndFailures(t *testing.T) {
	in := `{"Action":"run","Package":"p/tests/e2e","Test":"TestA"}
{"Action":"output","Package":"p/tests/e2e","Test":"TestA","Output":"    a_test.go:1: it broke\n"}
{"Action":"fail","Package":"p/tests/e2e","Test":"TestA"}
{"Action":"pass","Package":"p/tests/e2e","Test":"TestB"}
{"Action":"pass","Package":"p/tests/e2e","Test":"TestB/sub"}
{"Action":"skip","Package":"p/tests/e2e","Test":"TestC"}
{"Action":"fail","Package":"p/tests/e2e"}
`
	var b strings.Builder
	failed, err := summary(strings.NewReader(in), &b, "")
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !failed || !strings.Contains(out, "--- FAIL p/tests/e2e TestA\n        a_test.go:1: it broke") || !strings.Contains(out, "e2e: 1 passed, 1 failed, 1 skipped") {
		t.Fatalf("failed %v, summary:\n%s", failed, out)
	}
	ok, err := summary(strings.NewReader(`{"Action":"pass","Package":"p/x","Test":"TestA"}`+"\n"), &b, "[x] ")
	if err != nil || ok {
		t.Fatalf("a passing run: failed %v, err %v", ok, err)
	}
}
